//! Incremental, strict HTTP/1.1 codecs for the peer wire form.
//!
//! Sans-IO in the h11 sense: decoders take bytes with `feed`, hand back decoded items with
//! `decode`/`poll`, and never touch a socket; encoders write heads into a caller's
//! [`bytes::BytesMut`] while bodies stay separate [`bytes::Bytes`] so drivers can write
//! them without copying.
//!
//! * [`RequestDecoder`]: server side, buffered (`feed` + `decode`) or zero-copy
//!   (`decode_slice`). Pipelined requests in order, keep-alive and
//!   `Connection: close`, HTTP/1.0 and 1.1, and every framing rule that closes the door on
//!   request smuggling (requests in this protocol never carry a body).
//! * [`ResponseDecoder`]: client side. Status, headers and a `Content-Length`, chunked or
//!   close-delimited body, bounded by a caller-given [`BodyLimit`]. Bytes come in through
//!   `feed` or are read straight into its buffer (`read_buf` + `advance`).
//! * [`ChunkedDecoder`]: our own strict chunked transfer-coding decoder.
//! * [`OutgoingRequest`] / [`OutgoingResponse`]: head encoders with validated header values.
//!
//! httparse tokenises heads; it does not enforce framing (duplicate or conflicting
//! lengths, transfer codings, bare LF line endings, missing Host): those rules live here,
//! and the rule is always *reject, never guess*. Every bound is a named constant below.
//!
//! # Allocation
//!
//! Decoders own one receive buffer each, sized at construction. A decoded [`Request`]
//! holds its head as a [`bytes::Bytes`] split off that buffer plus offsets, so decoding
//! allocates nothing once the buffer exists, as long as the previous request's head has
//! been dropped before the buffer needs compacting (the `alloc_request` integration test
//! counts it). [`RequestDecoder::decode_slice`] skips the buffer altogether when the
//! caller's bytes hold a complete head: the [`RequestRef`] borrows them (no copy, no
//! reference count). Response bodies are the one per-response allocation.

mod chunked;
mod encode;
mod error;
mod recv;
mod request;
mod response;

pub use chunked::{ChunkedDecoder, ChunkedProgress};
pub use encode::{OutgoingRequest, OutgoingResponse, RangeRequest, RequestTarget, ResponseKind};
pub use error::{ChunkedError, EncodeError, LengthError, RequestError, ResponseError, UsageError};
pub use request::{Method, Rejection, Request, RequestDecoder, RequestRef, Route};
pub use response::{BodyFraming, BodyLimit, ResponseDecoder, ResponseEvent, ResponseHead};

/// Largest request head (request line, header fields, final empty line) we accept.
///
/// Our requests are a request line and a handful of fields; the largest legitimate one
/// carries a presigned `X-DART-Origin` URL (1 to 2 KiB). 8 KiB leaves room for that and
/// matches common server defaults, while bounding what one connection can make us buffer
/// before we know it is a request. Over it the server answers `431` and closes.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;

/// Most header fields in a request head. Our requests carry at most eight; 32 leaves room
/// for proxies' additions and bounds per-request parse work. Over it: `431`, close.
pub const MAX_REQUEST_HEADERS: usize = 32;

/// Receive-buffer capacity of a [`RequestDecoder`]: one maximal head plus as much again
/// for pipelined requests behind it. Because it exceeds [`MAX_REQUEST_HEAD_BYTES`], a full
/// buffer always holds either a complete request or an oversized head, so `feed`
/// accepting nothing can never stall a connection.
pub const REQUEST_BUFFER_BYTES: usize = 2 * MAX_REQUEST_HEAD_BYTES;

/// Largest response head we accept. Our heads are under 300 bytes; other peers' servers
/// add a few standard fields. 16 KiB is generous and bounds buffering before framing is
/// known.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 16 * 1024;

/// Most header fields in a response head (see [`MAX_REQUEST_HEADERS`]).
pub const MAX_RESPONSE_HEADERS: usize = 48;

/// Receive-buffer bound of a [`ResponseDecoder`] while it reads a head or a chunked body.
/// A `Content-Length` or close-delimited body may grow the buffer up to the body limit the
/// caller chose, never beyond it.
pub const RESPONSE_BUFFER_BYTES: usize = 2 * MAX_RESPONSE_HEAD_BYTES;

/// Most bytes one [`ResponseDecoder::read_buf`] window offers. A read of 64 KiB is what
/// socket reads commonly return at once; the bound keeps the spare bytes the decoder
/// zeroes and keeps at the end of its buffer to one such read.
pub const READ_WINDOW_BYTES: usize = 64 * 1024;

/// Largest body accepted on a non-`200` response (`404`, `400`, `502`, `503`, ...). Those
/// bodies are short human-readable text; the caller's expected length applies to the
/// block, not to error text, and error text must not cost a block's worth of memory.
pub const MAX_ERROR_BODY_BYTES: u64 = 16 * 1024;

/// Most interim (`1xx`) responses skipped before a final one. We never send `Expect`, so
/// a peer sending a stream of them is misbehaving; the cap stops it pinning a request.
pub const MAX_INFORMATIONAL_RESPONSES: u32 = 4;

/// Most hex digits in a chunk size. 16 digits hold any `u64`; more (even leading zeros)
/// is refused so a size line cannot be padded without bound.
pub const MAX_CHUNK_SIZE_DIGITS: u8 = 16;

/// Most bytes of chunk extensions on one chunk-size line. We use no extensions; the cap
/// bounds the work a peer can make us do per chunk (httparse does not cap them at all).
pub const MAX_CHUNK_EXTENSION_BYTES: usize = 1024;

/// Most bytes of trailer section after the last chunk: its field lines with their CRLFs
/// (the empty line that ends the body is not part of it). Trailers are read and discarded
/// (they never influence framing); the cap bounds that work.
pub const MAX_TRAILER_BYTES: usize = 4 * 1024;

/// HTTP version of a message. Only 1.0 and 1.1 exist on this wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// HTTP/1.0: connections close after one exchange unless `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: connections persist unless `Connection: close`.
    Http11,
}

/// How an httparse head parse opened, shared by the request and response decoders: the
/// head's length, not yet a whole head, or httparse's verdict against it.
pub(crate) enum HeadOpening {
    /// A complete head of this many bytes.
    Complete(usize),
    /// Not complete yet, and the window is still below the head bound: wait for more.
    Partial,
    /// Not complete within the head bound: the peer's head is too large.
    TooLarge,
    /// httparse rejected the head.
    Invalid(httparse::Error),
}

/// Classifies one httparse result over a `window` of `window_len` bytes under a head
/// bound of `max` bytes. Each decoder maps the outcome onto its own typed errors.
#[inline(always)]
pub(crate) fn open_head(
    parsed: Result<httparse::Status<usize>, httparse::Error>,
    window_len: usize,
    max: usize,
) -> HeadOpening {
    match parsed {
        Ok(httparse::Status::Complete(n)) => HeadOpening::Complete(n),
        Ok(httparse::Status::Partial) if window_len >= max => HeadOpening::TooLarge,
        Ok(httparse::Status::Partial) => HeadOpening::Partial,
        Err(e) => HeadOpening::Invalid(e),
    }
}

/// A byte range of a head, stored instead of a `Bytes` per field so decoding a head costs
/// one reference count, not one per field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Span {
    start: u32,
    end: u32,
}

impl Span {
    /// The span of `part` inside `base`; `part` must be a subslice of `base`.
    #[inline]
    pub(crate) fn of(base: &[u8], part: &[u8]) -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
        debug_assert!(start + part.len() <= base.len());
        Span {
            start: start as u32,
            end: (start + part.len()) as u32,
        }
    }

    #[inline]
    pub(crate) fn get(self, base: &[u8]) -> &[u8] {
        &base[self.start as usize..self.end as usize]
    }
}

/// Is there an LF in `head` not preceded by CR? (RFC 9112 §2.2: we do not take the
/// option of accepting a bare LF, which httparse does.) Branch-free so it vectorises.
pub(crate) fn has_bare_lf(head: &[u8]) -> bool {
    let Some(&first) = head.first() else {
        return false;
    };
    let mut bad = first == b'\n';
    for (prev, cur) in head.iter().zip(&head[1..]) {
        bad |= (*cur == b'\n') & (*prev != b'\r');
    }
    bad
}

/// A `Content-Length` value: one or more ASCII digits fitting in a `u64` (RFC 9110 §8.6).
/// Signs, whitespace inside, lists (`5, 5`) and empty values are refused.
pub(crate) fn parse_content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Scans a `Connection` value's comma-separated options: `(close, keep_alive)`.
pub(crate) fn connection_options(value: &[u8]) -> (bool, bool) {
    let mut close = false;
    let mut keep_alive = false;
    for option in value.split(|&b| b == b',') {
        let option = option.trim_ascii();
        close |= option.eq_ignore_ascii_case(b"close");
        keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
    }
    (close, keep_alive)
}

/// Is `value` a header value we can emit unchanged and read back identically: visible
/// ASCII, obs-text, SP and HTAB, with no leading or trailing whitespace (decoders trim
/// it) and, above all, no CR, LF, NUL or other control byte (header injection).
pub(crate) fn is_clean_value(value: &[u8]) -> bool {
    let ws = |b: &u8| *b == b' ' || *b == b'\t';
    if value.first().is_some_and(ws) || value.last().is_some_and(ws) {
        return false;
    }
    value
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response head of exactly `len` bytes (status `status`, no body), padded with one
    /// filler field.
    fn response_head(status: u16, content_length: u64, len: usize) -> Vec<u8> {
        let start = format!("HTTP/1.1 {status} X\r\nContent-Length: {content_length}\r\nX-Pad: ");
        let mut head = start.into_bytes();
        let pad = len - head.len() - 4;
        head.extend(std::iter::repeat_n(b'p', pad));
        head.extend_from_slice(b"\r\n\r\n");
        assert_eq!(head.len(), len);
        head
    }

    // The documented sizes (the constants' docs) are the rules, so these name the numbers
    // rather than the constants.
    #[test]
    fn buffers_hold_two_maximal_heads_and_a_read_window_is_64_kib() {
        assert_eq!(RequestDecoder::new().room(), 2 * 8 * 1024);
        assert_eq!(ResponseDecoder::new().room(), 2 * 16 * 1024);
        let mut d = ResponseDecoder::new();
        d.expect(BodyLimit::Exact(1 << 20)).unwrap();
        d.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n");
        assert!(matches!(d.poll(), Ok(Some(ResponseEvent::Head(_)))));
        assert_eq!(d.read_buf().len(), 64 * 1024);
    }

    #[test]
    fn a_response_head_of_16_kib_is_accepted_and_one_byte_more_refused() {
        for (len, ok) in [(16 * 1024, true), (16 * 1024 + 1, false)] {
            let mut d = ResponseDecoder::new();
            d.expect(BodyLimit::AtMost(0)).unwrap();
            assert_eq!(d.feed(&response_head(200, 0, len)), len);
            match d.poll() {
                Ok(Some(ResponseEvent::Head(_))) => assert!(ok, "{len}"),
                Err(ResponseError::HeadTooLarge { limit: 16384 }) => assert!(!ok, "{len}"),
                other => panic!("{len}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_error_body_of_16_kib_is_accepted_and_one_byte_more_refused() {
        for (body, ok) in [(16 * 1024, true), (16 * 1024 + 1, false)] {
            let mut d = ResponseDecoder::new();
            d.expect(BodyLimit::Exact(1 << 20)).unwrap();
            d.feed(&response_head(404, body, 100));
            let head = d.poll();
            assert_eq!(
                matches!(head, Ok(Some(ResponseEvent::Head(_)))),
                ok,
                "{body}: {head:?}"
            );
        }
    }

    #[test]
    fn bare_lf_detection() {
        assert!(!has_bare_lf(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(has_bare_lf(b"GET / HTTP/1.1\nHost: a\r\n\r\n"));
        assert!(has_bare_lf(b"\nGET"));
        assert!(has_bare_lf(b"GET / HTTP/1.1\r\nHost: a\r\n\n"));
        assert!(!has_bare_lf(b""));
    }

    #[test]
    fn content_length_values() {
        assert_eq!(parse_content_length(b"0"), Some(0));
        assert_eq!(
            parse_content_length(b"18446744073709551615"),
            Some(u64::MAX)
        );
        assert_eq!(parse_content_length(b"18446744073709551616"), None);
        for bad in [&b""[..], b"+1", b"-1", b"1 2", b"5, 5", b"0x10", b" 1"] {
            assert_eq!(parse_content_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn connection_option_scan() {
        assert_eq!(connection_options(b"close"), (true, false));
        assert_eq!(connection_options(b"Keep-Alive"), (false, true));
        assert_eq!(connection_options(b"upgrade, CLOSE"), (true, false));
        assert_eq!(connection_options(b"closed"), (false, false));
    }

    #[test]
    fn clean_values_exclude_injection() {
        assert!(is_clean_value(b"http://origin/x?sig=a b"));
        assert!(is_clean_value(b""));
        for bad in [
            &b"a\r\nX-Evil: 1"[..],
            b"a\nb",
            b"a\rb",
            b"a\0b",
            b" a",
            b"a\t",
            b"\x7f",
        ] {
            assert!(!is_clean_value(bad), "{bad:?}");
        }
    }
}
