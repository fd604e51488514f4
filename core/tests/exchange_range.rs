//! The `Range` request kind of the client exchange (an object URL's origin): what it sends
//! and how each answer ends, one rule per test, with crafted answers (a `Content-Range`
//! that lies, is missing or overflows, a `200` that ignores `Range`, a changed object).

use bytes::Bytes;
use peerblock_core::client::{
    BreakerOutcome, ClientConfig, ClientEvent, ConnectionFate, ContentRangeError, Ending, Exchange,
    ExchangeConfigError, ExchangeError, ExchangeOutcome, ExchangeRequest, LengthError, Link,
    ObjectChange, ObjectRange, ProtocolError, RangeAnswer,
};
use peerblock_core::time::Instant;

const HOST: &str = "origin.test:8080";

fn range(start: u64, len: u64) -> ObjectRange<'static> {
    ObjectRange {
        target: "/objects/a.bin?X-Sig=abc",
        start,
        len,
        total: Some(10),
        validator: Some("\"v1\""),
    }
}

/// Runs one exchange for `range` against the crafted `response` (then end of stream if
/// `eof`); returns the request as sent and the outcome.
fn exchange(range: ObjectRange<'_>, response: &[u8], eof: bool) -> (String, ExchangeOutcome) {
    let now = Instant::ZERO;
    let mut ex = Exchange::new(
        now,
        &ClientConfig::default(),
        ExchangeRequest::range(HOST, range),
        Link::Dial,
    )
    .expect("a valid request");
    ex.handle_connected(now);
    let t = ex.poll_transmit(now).expect("the request");
    ex.handle_transmitted(now);
    let request = String::from_utf8(t.head.to_vec()).unwrap();
    let mut taken = 0;
    let mut outcome = None;
    // Feed in small pieces, draining after each, as a socket would deliver them.
    while taken < response.len() && outcome.is_none() {
        let end = (taken + 7).min(response.len());
        taken += ex.handle_input(now, &response[taken..end]);
        while let Some(ev) = ex.poll_event() {
            if let ClientEvent::Done(o) = ev {
                outcome = Some(o);
            }
        }
    }
    if eof && outcome.is_none() {
        ex.handle_eof(now);
        while let Some(ev) = ex.poll_event() {
            if let ClientEvent::Done(o) = ev {
                outcome = Some(o);
            }
        }
    }
    (request, outcome.expect("an outcome"))
}

fn partial(content_range: &str, etag: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 206 Partial Content\r\nContent-Range: {content_range}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(e) = etag {
        r.push_str(&format!("ETag: {e}\r\n"));
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

#[test]
fn the_request_is_a_get_of_the_target_with_range_host_and_if_match() {
    let (req, _) = exchange(
        range(4, 3),
        &partial("bytes 4-6/10", Some("\"v1\""), b"abc"),
        false,
    );
    assert_eq!(
        req,
        "GET /objects/a.bin?X-Sig=abc HTTP/1.1\r\nHost: origin.test:8080\r\nRange: bytes=4-6\r\nIf-Match: \"v1\"\r\n\r\n"
    );
}

#[test]
fn a_weak_etag_is_never_sent_as_if_match_and_a_date_is_sent_as_if_unmodified_since() {
    let weak = ObjectRange {
        validator: Some("W/\"v1\""),
        ..range(0, 1)
    };
    let (req, _) = exchange(
        weak,
        &partial("bytes 0-0/10", Some("W/\"v1\""), b"a"),
        false,
    );
    assert!(
        !req.contains("If-Match") && !req.contains("If-Unmodified-Since"),
        "{req}"
    );
    let date = ObjectRange {
        validator: Some("Tue, 01 Dec 2026 10:00:00 GMT"),
        ..range(0, 1)
    };
    let (req, _) = exchange(date, b"HTTP/1.1 412 X\r\nContent-Length: 0\r\n\r\n", false);
    assert!(
        req.contains("If-Unmodified-Since: Tue, 01 Dec 2026 10:00:00 GMT\r\n")
            && !req.contains("If-Match"),
        "{req}"
    );
}

#[test]
fn a_206_with_exactly_the_asked_range_and_length_is_the_part_with_total_and_validator() {
    let (_, out) = exchange(
        range(4, 3),
        &partial("bytes 4-6/10", Some("\"v1\""), b"abc"),
        false,
    );
    assert_eq!(
        out.ending_range(),
        Some(&RangeAnswer::Part {
            body: Bytes::from_static(b"abc"),
            total: 10,
            validator: Some("\"v1\"".into())
        })
    );
    assert_eq!(out.breaker, BreakerOutcome::Answered);
    assert_eq!(
        out.connection,
        ConnectionFate::Reuse,
        "a keep-alive 206 is reusable"
    );
}

#[test]
fn the_probe_learns_size_and_validator_from_a_206_of_byte_zero() {
    let (req, out) = exchange(
        ObjectRange::probe("/o"),
        &partial("bytes 0-0/5242880", Some("\"65f-500000\""), b"x"),
        false,
    );
    assert!(
        req.contains("Range: bytes=0-0\r\n") && !req.contains("If-"),
        "{req}"
    );
    assert_eq!(
        out.ending_range(),
        Some(&RangeAnswer::Part {
            body: Bytes::from_static(b"x"),
            total: 5_242_880,
            validator: Some("\"65f-500000\"".into())
        })
    );
}

#[test]
fn the_probe_of_an_empty_object_is_a_416_for_bytes_star_slash_zero() {
    let (_, out) = exchange(
        ObjectRange::probe("/o"),
        b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */0\r\nETag: \"e\"\r\nContent-Length: 0\r\n\r\n",
        false,
    );
    assert_eq!(
        out.ending_range(),
        Some(&RangeAnswer::Empty {
            validator: Some("\"e\"".into())
        })
    );
    assert!(!out.ending.is_error());
}

#[test]
fn a_416_of_a_nonzero_total_that_differs_is_a_size_change_and_otherwise_a_failure() {
    let (_, out) = exchange(
        range(8, 2),
        b"HTTP/1.1 416 X\r\nContent-Range: bytes */7\r\nContent-Length: 0\r\n\r\n",
        false,
    );
    assert_eq!(
        out.ending_range(),
        Some(&RangeAnswer::Changed(ObjectChange::Size {
            expected: 10,
            got: 7
        }))
    );
    let (_, out) = exchange(
        range(8, 2),
        b"HTTP/1.1 416 X\r\nContent-Length: 0\r\n\r\n",
        false,
    );
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Status(416))
    ));
}

#[test]
fn a_200_means_range_was_ignored_decided_at_the_head_and_the_whole_object_is_never_read() {
    // A 5 GB object announced: far above the error-body bound; the head decides.
    let (_, out) = exchange(
        range(0, 4),
        b"HTTP/1.1 200 OK\r\nContent-Length: 5000000000\r\nETag: \"v1\"\r\n\r\nabcdefgh",
        false,
    );
    assert_eq!(out.ending_range(), Some(&RangeAnswer::Ignored));
    assert!(out.ending.is_error());
    assert_eq!(out.connection, ConnectionFate::Close);
    // Close-delimited too.
    let (_, out) = exchange(range(0, 4), b"HTTP/1.0 200 OK\r\n\r\nabcdefgh", false);
    assert_eq!(out.ending_range(), Some(&RangeAnswer::Ignored));
}

#[test]
fn a_412_is_an_object_change_the_precondition_failed() {
    let (_, out) = exchange(
        range(0, 4),
        b"HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n",
        false,
    );
    assert_eq!(
        out.ending_range(),
        Some(&RangeAnswer::Changed(ObjectChange::Precondition))
    );
}

#[test]
fn a_206_naming_another_total_is_an_object_change_of_size() {
    let (_, out) = exchange(
        range(0, 2),
        &partial("bytes 0-1/11", Some("\"v1\""), b"ab"),
        false,
    );
    assert_eq!(
        out.ending_range(),
        Some(&RangeAnswer::Changed(ObjectChange::Size {
            expected: 10,
            got: 11
        }))
    );
}

#[test]
fn a_206_with_another_etag_or_none_is_an_object_change_of_validator() {
    let (_, out) = exchange(
        range(0, 2),
        &partial("bytes 0-1/10", Some("\"v2\""), b"ab"),
        false,
    );
    assert_eq!(
        out.ending_range(),
        Some(&RangeAnswer::Changed(ObjectChange::Validator {
            expected: "\"v1\"".into(),
            got: Some("\"v2\"".into())
        }))
    );
    let (_, out) = exchange(range(0, 2), &partial("bytes 0-1/10", None, b"ab"), false);
    assert!(matches!(
        out.ending_range(),
        Some(RangeAnswer::Changed(ObjectChange::Validator {
            got: None,
            ..
        }))
    ));
}

fn content_range_error(out: &ExchangeOutcome) -> Option<ContentRangeError> {
    match &out.ending {
        Ending::Failed(ExchangeError::Protocol(ProtocolError::ContentRange(e))) => Some(*e),
        _ => None,
    }
}

#[test]
fn a_206_whose_content_range_names_other_bytes_is_a_protocol_error() {
    let (_, out) = exchange(
        range(4, 3),
        &partial("bytes 3-5/10", Some("\"v1\""), b"abc"),
        false,
    );
    assert_eq!(
        content_range_error(&out),
        Some(ContentRangeError::OtherRange {
            asked_first: 4,
            asked_last: 6,
            first: 3,
            last: 5
        })
    );
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
}

#[test]
fn a_206_without_content_range_is_a_protocol_error() {
    let (_, out) = exchange(
        range(0, 2),
        b"HTTP/1.1 206 X\r\nETag: \"v1\"\r\nContent-Length: 2\r\n\r\nab",
        false,
    );
    assert_eq!(content_range_error(&out), Some(ContentRangeError::Missing));
}

#[test]
fn a_206_whose_content_range_overflows_or_is_malformed_is_a_protocol_error() {
    let (_, out) = exchange(
        range(0, 2),
        &partial("bytes 0-1/99999999999999999999999", Some("\"v1\""), b"ab"),
        false,
    );
    assert_eq!(content_range_error(&out), Some(ContentRangeError::Overflow));
    let (_, out) = exchange(
        range(0, 2),
        &partial("bytes 0-1/*", Some("\"v1\""), b"ab"),
        false,
    );
    assert_eq!(
        content_range_error(&out),
        Some(ContentRangeError::UnknownTotal)
    );
    let (_, out) = exchange(
        range(0, 2),
        &partial("bytes=0-1/10", Some("\"v1\""), b"ab"),
        false,
    );
    assert_eq!(
        content_range_error(&out),
        Some(ContentRangeError::Malformed)
    );
}

#[test]
fn a_206_whose_body_is_not_exactly_len_bytes_is_a_length_failure() {
    // Content-Length too short: refused at the head.
    let (_, out) = exchange(
        range(0, 3),
        &partial("bytes 0-2/10", Some("\"v1\""), b"ab"),
        false,
    );
    assert!(
        matches!(out.ending, Ending::Failed(ExchangeError::Length(_))),
        "{:?}",
        out.ending
    );
    // Too long: refused at the head too.
    let (_, out) = exchange(
        range(0, 2),
        &partial("bytes 0-1/10", Some("\"v1\""), b"abc"),
        false,
    );
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(
            LengthError::ContentLengthAboveLimit { .. }
        ))
    ));
    // Close-delimited and short: a short body.
    let (_, out) = exchange(
        range(0, 3),
        b"HTTP/1.1 206 X\r\nContent-Range: bytes 0-2/10\r\nETag: \"v1\"\r\nConnection: close\r\n\r\nab",
        true,
    );
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(LengthError::Short { .. }))
    ));
}

#[test]
fn a_404_is_a_miss_absent_at_the_origin() {
    let (_, out) = exchange(
        range(0, 2),
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n",
        false,
    );
    assert!(matches!(out.ending, Ending::Miss));
}

#[test]
fn a_401_or_403_is_a_refusal_carrying_the_status() {
    for status in [401u16, 403] {
        let resp = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
        let (_, out) = exchange(range(0, 2), resp.as_bytes(), false);
        assert!(
            matches!(out.ending, Ending::UpstreamRefused { status: s } if s == status),
            "{:?}",
            out.ending
        );
        assert_eq!(out.breaker, BreakerOutcome::Answered);
    }
}

#[test]
fn an_error_status_with_a_huge_body_is_classified_at_its_head() {
    let (_, out) = exchange(
        range(0, 2),
        b"HTTP/1.1 500 X\r\nContent-Length: 99999999\r\n\r\n",
        false,
    );
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Status(500))
    ));
}

#[test]
fn an_empty_range_or_a_bad_target_is_our_misuse_an_err_at_new() {
    let now = Instant::ZERO;
    let c = ClientConfig::default();
    let empty = ObjectRange {
        len: 0,
        ..range(0, 1)
    };
    assert!(matches!(
        Exchange::new(now, &c, ExchangeRequest::range(HOST, empty), Link::Dial),
        Err(ExchangeConfigError::Zero {
            field: "range.len",
            ..
        })
    ));
    for target in ["objects/a", "/a b", "/a\r\nX: y"] {
        let bad = ObjectRange {
            target,
            ..range(0, 1)
        };
        assert!(matches!(
            Exchange::new(now, &c, ExchangeRequest::range(HOST, bad), Link::Dial),
            Err(ExchangeConfigError::Request(_))
        ));
    }
}

trait RangeOf {
    fn ending_range(&self) -> Option<&RangeAnswer>;
}

impl RangeOf for ExchangeOutcome {
    fn ending_range(&self) -> Option<&RangeAnswer> {
        match &self.ending {
            Ending::Range(r) => Some(r),
            _ => None,
        }
    }
}

mod props {
    use peerblock_core::client::{ContentRange, ContentRangeError};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_well_formed_content_range_parses_to_its_numbers(
            total in 1u64.., a in any::<u64>(), b in any::<u64>()
        ) {
            let (first, last) = (a % total, b % total);
            let (first, last) = (first.min(last), first.max(last));
            let v = format!("bytes {first}-{last}/{total}");
            prop_assert_eq!(
                ContentRange::parse(v.as_bytes()),
                Ok(ContentRange::Bytes { first, last, total })
            );
        }

        #[test]
        fn no_content_range_makes_the_parser_panic_or_accept_an_inconsistent_range(
            v in proptest::collection::vec(any::<u8>(), 0..64)
        ) {
            match ContentRange::parse(&v) {
                Ok(ContentRange::Bytes { first, last, total }) => {
                    prop_assert!(first <= last && last < total)
                }
                Ok(ContentRange::Unsatisfied { .. }) | Err(_) => {}
            }
        }

        #[test]
        fn any_number_past_u64_is_an_overflow(extra in 1u64..1000) {
            let big = u128::from(u64::MAX) + u128::from(extra);
            let v = format!("bytes 0-1/{big}");
            prop_assert_eq!(ContentRange::parse(v.as_bytes()), Err(ContentRangeError::Overflow));
        }
    }
}
