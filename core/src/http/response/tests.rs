//! Tests of the response decoder: framing, limits, wire headers, interim and close-delimited
//! responses, reading in place.

use super::*;
use crate::http::MAX_INFORMATIONAL_RESPONSES;
use crate::time::Duration;

fn run(limit: BodyLimit, input: &[u8], eof: bool) -> Result<(ResponseHead, Bytes), ResponseError> {
    let mut d = ResponseDecoder::new();
    d.expect(limit).unwrap();
    assert_eq!(d.feed(input), input.len());
    if eof {
        d.handle_eof();
    }
    let head = match d.poll()? {
        Some(ResponseEvent::Head(h)) => h,
        other => panic!("expected head, got {other:?}"),
    };
    match d.poll()? {
        Some(ResponseEvent::Body(b)) => Ok((head, b)),
        other => panic!("expected body, got {other:?}"),
    }
}

/// The decoded head of a bodiless `status` response carrying `name: value`.
fn head_with(status: u16, name: &[u8], value: &[u8]) -> ResponseHead {
    let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n").into_bytes();
    for part in [name, b": ", value, b"\r\n\r\n"] {
        head.extend_from_slice(part);
    }
    run(BodyLimit::Exact(5), &head, false).unwrap().0
}

/// Drives `d` with `input` through `read_buf` + `advance` only, `chunk` bytes per
/// "socket read", polling between reads; returns the events.
fn read_into(d: &mut ResponseDecoder, input: &[u8], chunk: usize) -> Vec<ResponseEvent> {
    let mut events = Vec::new();
    let mut rest = input;
    loop {
        while let Ok(Some(ev)) = d.poll() {
            events.push(ev);
        }
        if rest.is_empty() {
            return events;
        }
        let window = d.read_buf();
        let n = window.len().min(rest.len()).min(chunk);
        assert!(n > 0, "no room and no event: stalled");
        window[..n].copy_from_slice(&rest[..n]);
        assert_eq!(d.advance(n), n);
        rest = &rest[n..];
    }
}

#[test]
fn reading_into_the_decoder_gives_what_feeding_gives_and_respects_the_limit() {
    let mut wire = b"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n".to_vec();
    wire.extend((0..70_000u32).map(|i| i as u8));
    let body_at = wire.len() - 70_000;
    for chunk in [1, 7, 4096, usize::MAX] {
        let mut d = ResponseDecoder::new();
        d.expect(BodyLimit::Exact(70_000)).unwrap();
        let events = read_into(&mut d, &wire, chunk);
        let [ResponseEvent::Head(h), ResponseEvent::Body(b)] = &events[..] else {
            panic!("{chunk}: {events:?}")
        };
        assert_eq!(h.status(), 200);
        assert_eq!(&b[..], &wire[body_at..], "{chunk}");
        assert!(d.is_idle());
    }
    // The window never exceeds the limit + 1 that `room` allows for a length-less body.
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::AtMost(10)).unwrap();
    let head = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
    assert_eq!(read_into(&mut d, head, usize::MAX).len(), 1);
    assert_eq!(d.read_buf().len(), 11);
    // Advancing past the window takes the window only.
    assert_eq!(d.advance(50), 11);
    assert_eq!(
        d.poll().unwrap_err(),
        ResponseError::Length(LengthError::Long { limit: 10 })
    );
    // Closed: what is read is discarded, as `feed` discards.
    let _ = d.read_buf();
    assert_eq!(d.advance(3), 3);
    assert_eq!(d.buffered(), 11);
}

#[test]
fn read_window_is_reused_not_reallocated_between_reads() {
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::Exact(2)).unwrap();
    let first = d.read_buf().as_ptr();
    let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    d.read_buf()[..10].copy_from_slice(&wire[..10]);
    assert_eq!(d.advance(10), 10);
    // The next window starts right after the bytes just read, in the same memory.
    assert_eq!(d.read_buf().as_ptr(), first.wrapping_add(10));
    assert!(d.read_buf().len() <= READ_WINDOW_BYTES);
    let events = read_into(&mut d, &wire[10..], usize::MAX);
    assert!(
        matches!(&events[..], [ResponseEvent::Head(_), ResponseEvent::Body(b)] if &b[..] == b"ok")
    );
}

#[test]
fn content_length_body_and_wire_headers() {
    let (h, body) = run(
        BodyLimit::Exact(5),
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-DART-Node: n9\r\n\r\nhello",
        false,
    )
    .unwrap();
    assert_eq!(h.status(), 200);
    assert_eq!(h.node(), Some(&b"n9"[..]));
    assert!(h.keep_alive());
    assert_eq!(&body[..], b"hello");
}

#[test]
fn refusal_and_upstream_headers() {
    let (h, _) = run(
        BodyLimit::Exact(5),
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\
          X-Peerblock-Refused: sessions\r\nRetry-After: 15\r\nConnection: close\r\n\r\n",
        false,
    )
    .unwrap();
    assert!(h.is_refusal());
    assert_eq!(h.refused(), Some(&b"sessions"[..]));
    assert_eq!(h.retry_after(), Some(Duration::from_secs(15)));
    assert!(!h.keep_alive());
    let (h, _) = run(
        BodyLimit::Exact(5),
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nX-DART-Upstream-Status: 403\r\n\r\n",
        false,
    )
    .unwrap();
    assert_eq!(h.upstream_status(), Some(403));
}

#[test]
fn retry_after_is_1_to_20_decimal_digits_or_no_delay() {
    for (value, want) in [
        (&b"7"[..], Some(7)),
        (b"00000000000000000007", Some(7)),
        (b"000000000000000000007", None),
        (b"", None),
        (b"7s", None),
    ] {
        let h = head_with(503, b"Retry-After", value);
        let got = h.retry_after().map(|d| d.as_secs());
        assert_eq!(got, want, "{:?}", String::from_utf8_lossy(value));
    }
}

#[test]
fn head_gives_the_raw_head_bytes() {
    let raw = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    let (h, _) = run(BodyLimit::Exact(5), raw, false).unwrap();
    assert_eq!(&h.head()[..], &raw[..]);
}

#[test]
fn expect_on_a_decoder_that_can_carry_no_more_responses_is_closed() {
    // A decoder idle at end of stream, one closed by its response, one failed.
    let mut at_eof = ResponseDecoder::new();
    at_eof.handle_eof();
    let after = |input: &[u8]| {
        let mut d = ResponseDecoder::new();
        d.expect(BodyLimit::AtMost(10)).unwrap();
        d.feed(input);
        while let Ok(Some(_)) = d.poll() {}
        d
    };
    let closed = after(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let failed = after(b"garbage\r\n\r\n");
    assert!(closed.is_closed() && failed.is_closed());
    for (mut d, what) in [
        (at_eof, "idle, at eof"),
        (closed, "closed"),
        (failed, "failed"),
    ] {
        assert_eq!(
            d.expect(BodyLimit::AtMost(1)),
            Err(UsageError::Closed),
            "{what}"
        );
    }
}

#[test]
fn a_field_as_long_as_a_wire_header_but_named_otherwise_is_not_that_header() {
    // Each name has the length of one the decoder takes (connection, retry-after,
    // content-length, transfer-encoding, x-peerblock-load, x-peerblock-refused,
    // x-dart-upstream-status), which it tells apart by length first.
    let (h, body) = run(
        BodyLimit::AtMost(10),
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\
          X-Custom-A: close\r\nX-Other-Abc: 5\r\nAccept-Charset: 9\r\n\
          X-Other-Abcdefghi: chunked\r\nX-Other-Abcdefgh: 3\r\n\
          X-Other-Abcdefghijk: sessions\r\nX-Other-Abcdefghijklmn: 403\r\n\r\nok",
        false,
    )
    .unwrap();
    assert_eq!(&body[..], b"ok");
    assert!(h.keep_alive(), "X-Custom-A is not Connection");
    assert_eq!(h.retry_after(), None);
    assert_eq!(h.framing(), BodyFraming::ContentLength(2));
    assert_eq!(h.load(), None);
    assert_eq!(h.refused(), None);
    assert!(!h.is_refusal());
    assert_eq!(h.upstream_status(), None);
}

#[test]
fn a_close_delimited_body_of_exactly_the_limit_is_whole_and_counted() {
    let input = b"HTTP/1.0 200 OK\r\n\r\n0123456789";
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::AtMost(10)).unwrap();
    d.feed(input);
    d.handle_eof();
    assert!(matches!(d.poll(), Ok(Some(ResponseEvent::Head(_)))));
    let Ok(Some(ResponseEvent::Body(body))) = d.poll() else {
        panic!("a body of exactly the limit is accepted")
    };
    assert_eq!(&body[..], b"0123456789");
    assert_eq!(d.consumed(), input.len() as u64, "head and body counted");
    assert_eq!(d.buffered(), 0);
}

#[test]
fn the_stream_ending_inside_a_head_is_truncated() {
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::AtMost(10)).unwrap();
    d.feed(b"HTTP/1.1 200 OK\r\nContent-Le");
    assert!(
        matches!(d.poll(), Ok(None)),
        "a partial head waits for more"
    );
    d.handle_eof();
    assert!(matches!(d.poll(), Err(ResponseError::Truncated)));
}

#[test]
fn an_http10_response_stays_open_only_with_connection_keep_alive() {
    let head =
        |extra: &str| format!("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n{extra}\r\n").into_bytes();
    let (h, _) = run(
        BodyLimit::AtMost(1),
        &head("Connection: keep-alive\r\n"),
        false,
    )
    .unwrap();
    assert!(h.keep_alive());
    let (h, _) = run(BodyLimit::AtMost(1), &head(""), false).unwrap();
    assert!(!h.keep_alive());
}

#[test]
fn up_to_max_informational_responses_are_skipped_and_one_more_is_refused() {
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
    let last = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let mut input = interim.repeat(MAX_INFORMATIONAL_RESPONSES as usize);
    input.extend_from_slice(last);
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::AtMost(2)).unwrap();
    d.feed(&input);
    let Ok(Some(ResponseEvent::Head(h))) = d.poll() else {
        panic!("the final head after {MAX_INFORMATIONAL_RESPONSES} interim ones")
    };
    assert_eq!(h.status(), 200);
    assert!(matches!(d.poll(), Ok(Some(ResponseEvent::Body(b))) if &b[..] == b"ok"));
    assert_eq!(
        d.consumed(),
        input.len() as u64,
        "interim heads are counted"
    );
    let mut input = interim.repeat(MAX_INFORMATIONAL_RESPONSES as usize + 1);
    input.extend_from_slice(last);
    assert_eq!(
        run(BodyLimit::AtMost(2), &input, false).unwrap_err(),
        ResponseError::UnexpectedInformational { status: 100 }
    );
}

#[test]
fn upstream_status_is_three_digits_or_nothing() {
    for (value, want) in [
        (&b"401"[..], Some(401)),
        (b"4x3", None),
        (b"40", None),
        (b"4031", None),
        (b" 40", None),
    ] {
        let h = head_with(502, b"X-DART-Upstream-Status", value);
        assert_eq!(
            h.upstream_status(),
            want,
            "{:?}",
            String::from_utf8_lossy(value)
        );
    }
}

#[test]
fn content_length_above_expected_is_rejected_before_body() {
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::Exact(4)).unwrap();
    d.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(
        d.poll().unwrap_err(),
        ResponseError::Length(LengthError::ContentLengthAboveLimit {
            limit: 4,
            content_length: 5
        })
    );
}

#[test]
fn content_length_below_expected_is_rejected_at_the_head() {
    // Rule: the head alone proves the body short: the error comes before any body
    // byte arrived, and none is read.
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::Exact(6)).unwrap();
    d.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(
        d.poll().unwrap_err(),
        ResponseError::Length(LengthError::ContentLengthBelowExpected {
            expected: 6,
            content_length: 5
        })
    );
}

#[test]
fn short_body_is_a_length_error() {
    assert_eq!(
        run(
            BodyLimit::Exact(6),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            false
        )
        .unwrap_err(),
        ResponseError::Length(LengthError::Short {
            expected: 6,
            received: 5
        })
    );
}

#[test]
fn chunked_body_and_chunk_over_expected() {
    let (h, body) = run(
        BodyLimit::Exact(5),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
        false,
    )
    .unwrap();
    assert_eq!(h.framing(), BodyFraming::Chunked);
    assert_eq!(&body[..], b"hello");
    assert_eq!(
        run(
            BodyLimit::Exact(4),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            false
        )
        .unwrap_err(),
        ResponseError::Length(LengthError::Long { limit: 4 })
    );
}

#[test]
fn close_delimited_body_reads_at_most_expected_plus_one() {
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::Exact(3)).unwrap();
    // Once the head is known, at most expected + 1 body bytes are accepted.
    d.feed(b"HTTP/1.1 200 OK\r\n\r\n");
    assert!(matches!(d.poll(), Ok(Some(ResponseEvent::Head(_)))));
    assert_eq!(d.feed(b"abcdefgh"), 4);
    assert_eq!(d.buffered(), 4);
    assert_eq!(
        d.poll().unwrap_err(),
        ResponseError::Length(LengthError::Long { limit: 3 })
    );
    // u64::MAX never overflows.
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::Exact(u64::MAX)).unwrap();
    d.feed(b"HTTP/1.1 200 OK\r\n\r\nabc");
    d.handle_eof();
    assert!(matches!(d.poll(), Ok(Some(ResponseEvent::Head(_)))));
    assert!(matches!(
        d.poll(),
        Err(ResponseError::Length(LengthError::Short { .. }))
    ));
}

#[test]
fn truncated_content_length_body() {
    assert_eq!(
        run(
            BodyLimit::Exact(5),
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
            true
        )
        .unwrap_err(),
        ResponseError::Truncated
    );
}

#[test]
fn interim_responses_are_skipped_and_keep_alive_reuses() {
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::AtMost(10)).unwrap();
    d.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n");
    let Ok(Some(ResponseEvent::Head(h))) = d.poll() else {
        panic!()
    };
    assert_eq!(h.status(), 404);
    assert!(matches!(d.poll(), Ok(Some(ResponseEvent::Body(_)))));
    assert!(d.is_idle());
    d.expect(BodyLimit::AtMost(10)).unwrap();
    assert_eq!(
        d.expect(BodyLimit::AtMost(1)),
        Err(UsageError::ResponseInProgress)
    );
}

#[test]
fn no_content_and_not_modified_end_at_their_head() {
    for head in [
        &b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
    ] {
        let mut d = ResponseDecoder::new();
        d.expect(BodyLimit::AtMost(100)).unwrap();
        d.feed(head);
        let Ok(Some(ResponseEvent::Head(h))) = d.poll() else {
            panic!()
        };
        assert_eq!(h.framing(), BodyFraming::Empty);
        let Ok(Some(ResponseEvent::Body(b))) = d.poll() else {
            panic!()
        };
        assert!(b.is_empty());
        assert!(d.is_idle());
    }
}

#[test]
fn unsolicited_bytes_are_an_error() {
    let mut d = ResponseDecoder::new();
    d.feed(b"HTTP/1.1 200 OK\r\n");
    assert_eq!(d.poll().unwrap_err(), ResponseError::Unsolicited);
}
