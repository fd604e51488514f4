//! The malformed-input and smuggling table: every vector names the rule it breaks
//! (RFC 9112 section unless marked otherwise) and the exact rejection it must get,
//! whole and split at every byte. Request vectors also pin the status the server answers.

use peerblock_core::http::{
    BodyLimit, ChunkedError, LengthError, Rejection, RequestDecoder, RequestError, ResponseDecoder,
    ResponseError, ResponseEvent, MAX_REQUEST_HEADERS, MAX_REQUEST_HEAD_BYTES,
};
use peerblock_core::wire::{HopError, PathError};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    /// The decoder fails: the server answers the status and closes.
    Fatal(RequestError),
    /// The request is well framed but not served: the server answers the status.
    Reject(Rejection),
}

use RequestError as E;
use Want::{Fatal, Reject};

fn request_cases() -> Vec<(&'static str, Vec<u8>, Want, u16)> {
    let k = "/peer/v1/block/ab/1";
    let r = |s: &str| s.as_bytes().to_vec();
    let mut big = r("GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\nX-Pad: ");
    big.extend(std::iter::repeat_n(b'p', MAX_REQUEST_HEAD_BYTES));
    big.extend_from_slice(b"\r\n\r\n");
    let mut many = r("GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\n");
    for _ in 0..MAX_REQUEST_HEADERS {
        many.extend_from_slice(b"X-A: 1\r\n");
    }
    many.extend_from_slice(b"\r\n");
    vec![
        // Smuggling: requests never carry a body (§6.1, §6.2, §6.3, §11.2).
        ("§6.3 CL.TE smuggling", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n")), Fatal(E::UnexpectedBody { content_length: 5 }), 400),
        ("§6.3 TE.CL smuggling", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n")), Fatal(E::TransferEncoding), 400),
        ("§6.1 Transfer-Encoding on a request", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")), Fatal(E::TransferEncoding), 400),
        ("§6.1 Transfer-Encoding: identity", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n")), Fatal(E::TransferEncoding), 400),
        ("§6.1 lower-case transfer-encoding", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\n\r\n")), Fatal(E::TransferEncoding), 400),
        ("§6.1 Transfer-Encoding after HTAB OWS", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n")), Fatal(E::TransferEncoding), 400),
        ("§6.1 Transfer-Encoding list", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")), Fatal(E::TransferEncoding), 400),
        ("§5.1 whitespace before colon hides Transfer-Encoding", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n")), Fatal(E::MalformedHeaderName), 400),
        ("§5.2 obs-fold hides Transfer-Encoding", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n")), Fatal(E::MalformedHeaderName), 400),
        ("§6.3 request with a body", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")), Fatal(E::UnexpectedBody { content_length: 1 }), 400),
        ("§6.3 duplicate identical Content-Length", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n")), Fatal(E::DuplicateContentLength), 400),
        ("§6.3 conflicting Content-Length", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n")), Fatal(E::DuplicateContentLength), 400),
        ("§6.2 Content-Length with plus sign", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: +0\r\n\r\n")), Fatal(E::InvalidContentLength), 400),
        ("§6.2 negative Content-Length", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n")), Fatal(E::InvalidContentLength), 400),
        ("§6.2 hex Content-Length", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 0x0\r\n\r\n")), Fatal(E::InvalidContentLength), 400),
        ("§6.2 Content-Length list", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 0, 0\r\n\r\n")), Fatal(E::InvalidContentLength), 400),
        ("§6.2 empty Content-Length", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n")), Fatal(E::InvalidContentLength), 400),
        ("§6.2 Content-Length with inner space", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 1 0\r\n\r\n")), Fatal(E::InvalidContentLength), 400),
        ("§6.2 Content-Length overflowing u64", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n")), Fatal(E::InvalidContentLength), 400),
        // Line endings and field syntax (§2.2, §5).
        ("§2.2 bare LF ends the request line", r(&format!("GET {k} HTTP/1.1\nHost: a\r\n\r\n")), Fatal(E::BareLineFeed), 400),
        ("§2.2 bare LF ends a field line", r(&format!("GET {k} HTTP/1.1\r\nHost: a\n\r\n")), Fatal(E::BareLineFeed), 400),
        ("§2.2 bare LF ends the head", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\n\n")), Fatal(E::BareLineFeed), 400),
        ("§2.2 bare CR inside a value", r(&format!("GET {k} HTTP/1.1\r\nHost: a\rb\r\n\r\n")), Fatal(E::MalformedHeaderValue), 400),
        ("§5.5 (RFC 9110) NUL in a value", r(&format!("GET {k} HTTP/1.1\r\nHost: a\0b\r\n\r\n")), Fatal(E::MalformedHeaderValue), 400),
        ("§5.5 (RFC 9110) control byte in a value", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Origin: a\x01b\r\n\r\n")), Fatal(E::MalformedHeaderValue), 400),
        ("§5.5 (RFC 9110) DEL in a value", r(&format!("GET {k} HTTP/1.1\r\nHost: a\x7f\r\n\r\n")), Fatal(E::MalformedHeaderValue), 400),
        ("§5.1 whitespace before colon", r(&format!("GET {k} HTTP/1.1\r\nHost : a\r\n\r\n")), Fatal(E::MalformedHeaderName), 400),
        ("§5.1 tab before colon", r(&format!("GET {k} HTTP/1.1\r\nHost\t: a\r\n\r\n")), Fatal(E::MalformedHeaderName), 400),
        ("§5.2 obs-fold continuation line", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Hop: 1\r\n 2\r\n\r\n")), Fatal(E::MalformedHeaderName), 400),
        ("§5.1 empty field name", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n")), Fatal(E::MalformedHeaderName), 400),
        ("§5.1 non-token byte in field name", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX(a): x\r\n\r\n")), Fatal(E::MalformedHeaderName), 400),
        ("§5.1 field line without colon", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Hop 1\r\n\r\n")), Fatal(E::MalformedHeaderName), 400),
        // Host (§3.2).
        ("§3.2 HTTP/1.1 without Host", r(&format!("GET {k} HTTP/1.1\r\n\r\n")), Fatal(E::MissingHost), 400),
        ("§3.2 duplicate Host", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n")), Fatal(E::DuplicateHost), 400),
        ("§3.2 conflicting Host", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n")), Fatal(E::DuplicateHost), 400),
        // Request line (§3, §2.3, §3.2).
        ("§2.3 HTTP/2.0 on an HTTP/1 connection", r(&format!("GET {k} HTTP/2.0\r\nHost: a\r\n\r\n")), Fatal(E::UnsupportedVersion), 505),
        ("§2.3 HTTP/1.2", r(&format!("GET {k} HTTP/1.2\r\nHost: a\r\n\r\n")), Fatal(E::UnsupportedVersion), 505),
        ("§2.3 version is case-sensitive", r(&format!("GET {k} http/1.1\r\nHost: a\r\n\r\n")), Fatal(E::MalformedRequestLine), 400),
        ("§3 double space in request line", r(&format!("GET  {k} HTTP/1.1\r\nHost: a\r\n\r\n")), Fatal(E::MalformedRequestLine), 400),
        ("§3 space inside target", r("GET /peer/v1/block/ab /1 HTTP/1.1\r\nHost: a\r\n\r\n"), Fatal(E::MalformedRequestLine), 400),
        ("§3 trailing space after version", r(&format!("GET {k} HTTP/1.1 \r\nHost: a\r\n\r\n")), Fatal(E::MalformedLineEnding), 400),
        ("§3.1 (RFC 9110 §5.6.2) non-token method", r(&format!("G@T {k} HTTP/1.1\r\nHost: a\r\n\r\n")), Fatal(E::MalformedRequestLine), 400),
        ("§3.2.2 absolute-form target refused", r("GET http://a/peer/v1/roster HTTP/1.1\r\nHost: a\r\n\r\n"), Fatal(E::InvalidTarget), 400),
        ("§3.2.4 asterisk-form target refused", r("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"), Fatal(E::InvalidTarget), 400),
        ("§3.2.1 fragment in target", r("GET /peer/v1/roster#x HTTP/1.1\r\nHost: a\r\n\r\n"), Fatal(E::InvalidTarget), 400),
        ("§3.2.1 non-ASCII byte in target", r("GET /peer/v1/roster\u{e9} HTTP/1.1\r\nHost: a\r\n\r\n"), Fatal(E::InvalidTarget), 400),
        // Bounds.
        ("§5 head over MAX_REQUEST_HEAD_BYTES (RFC 6585 §5)", big, Fatal(E::HeadTooLarge { limit: MAX_REQUEST_HEAD_BYTES }), 431),
        ("§5 more than MAX_REQUEST_HEADERS fields (RFC 6585 §5)", many, Fatal(E::TooManyHeaders { limit: MAX_REQUEST_HEADERS }), 431),
        // Well framed, not served: the wire form's own rules.
        ("wire: X-DART-Hop -0", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Hop: -0\r\n\r\n")), Reject(Rejection::BadHop(HopError::Signed)), 400),
        ("wire: X-DART-Hop +1", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Hop: +1\r\n\r\n")), Reject(Rejection::BadHop(HopError::Signed)), 400),
        ("wire: empty X-DART-Hop", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Hop: \r\n\r\n")), Reject(Rejection::BadHop(HopError::Empty)), 400),
        ("wire: X-DART-Hop out of range", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Hop: 4294967296\r\n\r\n")), Reject(Rejection::BadHop(HopError::OutOfRange)), 400),
        ("wire: duplicate X-DART-Hop", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Hop: 0\r\nX-DART-Hop: 9\r\n\r\n")), Reject(Rejection::BadHop(HopError::Duplicate)), 400),
        ("wire: duplicate X-DART-Origin", r(&format!("GET {k} HTTP/1.1\r\nHost: a\r\nX-DART-Origin: a\r\nX-DART-Origin: b\r\n\r\n")), Reject(Rejection::DuplicateOrigin), 400),
        ("wire: no // normalisation", r("GET //peer/v1/block/ab/1 HTTP/1.1\r\nHost: a\r\n\r\n"), Reject(Rejection::UnknownPath), 404),
        ("wire: non-GET on a block path", r(&format!("POST {k} HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")), Reject(Rejection::MethodNotAllowed), 405),
        ("RFC 9110 §9.1 methods are case-sensitive", r(&format!("get {k} HTTP/1.1\r\nHost: a\r\n\r\n")), Reject(Rejection::MethodNotAllowed), 405),
        ("wire: padded block index", r("GET /peer/v1/block/ab/01 HTTP/1.1\r\nHost: a\r\n\r\n"), Reject(Rejection::BadPath(PathError::IndexLeadingZero)), 400),
        ("wire: percent-encoding is not decoded", r("GET /peer/v1/block/a%62/1 HTTP/1.1\r\nHost: a\r\n\r\n"), Reject(Rejection::BadPath(PathError::KeyNotHex { at: 1 })), 400),
    ]
}

fn decode_request(input: &[u8], split: Option<usize>) -> Option<Want> {
    let mut d = RequestDecoder::new();
    let pieces: Vec<&[u8]> = match split {
        Some(at) => vec![&input[..at], &input[at..]],
        None => vec![input],
    };
    for piece in pieces {
        let mut rest = piece;
        while !rest.is_empty() {
            let n = d.feed(rest);
            rest = &rest[n..];
            loop {
                match d.decode() {
                    Ok(Some(req)) => {
                        if let Err(rejection) = req.route() {
                            return Some(Reject(rejection));
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return Some(Fatal(e)),
                }
            }
        }
    }
    None
}

#[test]
fn malformed_request_table_has_forty_tagged_vectors() {
    let cases = request_cases();
    assert!(cases.len() >= 40, "{} vectors", cases.len());
    for (rule, _, _, _) in &cases {
        assert!(rule.starts_with('§') || rule.starts_with("wire") || rule.starts_with("RFC"));
    }
}

#[test]
fn every_malformed_request_gets_its_exact_rejection_whole_and_split() {
    for (rule, input, want, status) in request_cases() {
        assert_eq!(decode_request(&input, None), Some(want), "{rule}");
        let got_status = match want {
            Fatal(e) => e.status().code(),
            Reject(r) => r.status().code(),
        };
        assert_eq!(got_status, status, "{rule}: status");
        // Split invariance on the same vector, at every byte of short vectors.
        let step = if input.len() > 512 { 97 } else { 1 };
        for at in (0..=input.len()).step_by(step) {
            assert_eq!(
                decode_request(&input, Some(at)),
                Some(want),
                "{rule} split at {at}"
            );
        }
    }
}

fn decode_response(limit: BodyLimit, input: &[u8]) -> Result<(), ResponseError> {
    let mut d = ResponseDecoder::new();
    d.expect(limit).expect("idle");
    d.feed(input);
    d.handle_eof();
    loop {
        match d.poll()? {
            Some(ResponseEvent::Body(_)) => return Ok(()),
            Some(ResponseEvent::Head(_)) => {}
            None => return Ok(()),
        }
    }
}

#[test]
fn malformed_response_table() {
    let e5 = BodyLimit::Exact(5);
    let big = BodyLimit::AtMost(u64::MAX);
    let cases: Vec<(&str, BodyLimit, &[u8], ResponseError)> = vec![
        ("§6.3 CL and TE together", e5, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", ResponseError::ContentLengthAndTransferEncoding),
        ("§6.1 unknown coding", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", ResponseError::UnsupportedTransferEncoding),
        ("§6.3 chunked not final", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", ResponseError::UnsupportedTransferEncoding),
        ("§6.1 two Transfer-Encoding fields", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ResponseError::UnsupportedTransferEncoding),
        ("§6.1 Transfer-Encoding on HTTP/1.0", e5, b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ResponseError::TransferEncodingOnHttp10),
        ("§6.3 duplicate Content-Length", e5, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", ResponseError::DuplicateContentLength),
        ("§6.2 signed Content-Length", e5, b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", ResponseError::InvalidContentLength),
        ("§2.2 bare LF in response head", e5, b"HTTP/1.1 200 OK\nContent-Length: 5\r\n\r\nhello", ResponseError::MalformedLineEnding),
        ("§5.2 obs-fold in response", e5, b"HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 5\r\n\r\nhello", ResponseError::MalformedHeader),
        ("§4 four-digit status", e5, b"HTTP/1.1 2000 OK\r\n\r\n", ResponseError::MalformedStatusLine),
        ("§7.1 empty chunk-size line", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", ResponseError::Chunked(ChunkedError::MissingSize)),
        ("§7.1.1 extension-only chunk-size line", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;ext\r\n", ResponseError::Chunked(ChunkedError::MissingSize)),
        ("§7.1.1 bare LF in chunk extension", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a\nb\r\nhello\r\n0\r\n\r\n", ResponseError::Chunked(ChunkedError::BareLineEnding)),
        ("§7.1 chunk size overflow", big, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", ResponseError::Chunked(ChunkedError::SizeOverflow)),
        ("§7.1 chunk larger than expected", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n", ResponseError::Length(LengthError::Long { limit: 5 })),
        ("§7.1 chunk data without CRLF", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n", ResponseError::Chunked(ChunkedError::MissingDataCrlf)),
        ("§7.1.2 obs-fold in trailer", e5, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nT: 1\r\n 2\r\n\r\n", ResponseError::Chunked(ChunkedError::InvalidTrailer)),
        ("§6.3 Content-Length above expected", e5, b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n", ResponseError::Length(LengthError::ContentLengthAboveLimit { limit: 5, content_length: 6 })),
        ("§6.3 Content-Length below expected", e5, b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", ResponseError::Length(LengthError::ContentLengthBelowExpected { expected: 5, content_length: 4 })),
        ("§6.3 short complete close-delimited body", e5, b"HTTP/1.1 200 OK\r\n\r\nhell", ResponseError::Length(LengthError::Short { expected: 5, received: 4 })),
        ("§6.3 close-delimited body too long", e5, b"HTTP/1.1 200 OK\r\n\r\nhello!", ResponseError::Length(LengthError::Long { limit: 5 })),
        ("§8 incomplete body at close", e5, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", ResponseError::Truncated),
        ("§15.2 (RFC 9110) 101 without Upgrade request", e5, b"HTTP/1.1 101 Switching Protocols\r\n\r\n", ResponseError::UnexpectedInformational { status: 101 }),
    ];
    for (rule, limit, input, want) in cases {
        assert_eq!(decode_response(limit, input), Err(want), "{rule}");
    }
}

/// The zero-copy path: `decode_slice` on each piece first, `feed` + `decode` for what it
/// leaves.
fn decode_request_zero_copy(input: &[u8], split: Option<usize>) -> Option<Want> {
    let mut d = RequestDecoder::new();
    let pieces: Vec<&[u8]> = match split {
        Some(at) => vec![&input[..at], &input[at..]],
        None => vec![input],
    };
    for piece in pieces {
        let mut rest = piece;
        loop {
            match d.decode_slice(rest) {
                Ok(Some(req)) => {
                    if let Err(rejection) = req.route() {
                        return Some(Reject(rejection));
                    }
                    rest = &rest[req.head_len()..];
                }
                Ok(None) => break,
                Err(e) => return Some(Fatal(e)),
            }
        }
        while !rest.is_empty() {
            let n = d.feed(rest);
            rest = &rest[n..];
            loop {
                match d.decode() {
                    Ok(Some(req)) => {
                        if let Err(rejection) = req.route() {
                            return Some(Reject(rejection));
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return Some(Fatal(e)),
                }
            }
        }
    }
    None
}

#[test]
fn every_malformed_request_gets_its_exact_rejection_through_decode_slice_too() {
    for (rule, input, want, _) in request_cases() {
        assert_eq!(decode_request_zero_copy(&input, None), Some(want), "{rule}");
        let step = if input.len() > 512 { 97 } else { 1 };
        for at in (0..=input.len()).step_by(step) {
            assert_eq!(
                decode_request_zero_copy(&input, Some(at)),
                Some(want),
                "{rule} split at {at}"
            );
        }
    }
}
