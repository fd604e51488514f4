//! The response head: [`ResponseHead`] and the fields a client reads from it, and parsing
//! it off the wire (status line, fields, body framing).

use core::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};

use super::{BodyFraming, BodyLimit, ResponseDecoder, State};
use crate::http::chunked::ChunkedDecoder;
use crate::http::error::{LengthError, ResponseError};
use crate::http::{
    connection_options, has_bare_lf, open_head, parse_content_length, HeadOpening, Span, Version,
    MAX_ERROR_BODY_BYTES, MAX_INFORMATIONAL_RESPONSES, MAX_RESPONSE_HEADERS,
    MAX_RESPONSE_HEAD_BYTES,
};
use crate::time::Duration;

/// A decoded response head: what the client machine needs to classify the exchange.
#[derive(Clone, Debug)]
pub struct ResponseHead {
    head: Bytes,
    version: Version,
    status: u16,
    keep_alive: bool,
    framing: BodyFraming,
    node: Option<Span>,
    upstream_status: Option<Span>,
    retry_after: Option<Span>,
    refused: Option<Span>,
    load: Option<Span>,
    miss: Option<Span>,
    content_range: Option<Span>,
    etag: Option<Span>,
    last_modified: Option<Span>,
}

impl ResponseHead {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The HTTP version of the status line.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Whether the connection can carry another request after this response's body:
    /// HTTP/1.1 without `Connection: close` (1.0 with `keep-alive`), and not
    /// close-delimited.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// How the body is delimited.
    pub fn framing(&self) -> BodyFraming {
        self.framing
    }

    /// `X-DART-Node`: the responder's node ID. Liveness is credited to this ID.
    pub fn node(&self) -> Option<&[u8]> {
        self.node.map(|s| s.get(&self.head))
    }

    /// `X-DART-Upstream-Status` parsed as a three-digit code (`None` if absent or not a
    /// three-digit number). On a `502` it means the relay's origin refused the
    /// requester's credential: the peer did its job.
    pub fn upstream_status(&self) -> Option<u16> {
        match self.upstream_status.map(|s| s.get(&self.head)) {
            Some(&[a, b, c]) if [a, b, c].iter().all(u8::is_ascii_digit) => {
                Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
            }
            _ => None,
        }
    }

    /// `Retry-After` in its delay-seconds form (RFC 9110 §10.2.3); `None` if absent or an
    /// HTTP-date (peers in this protocol send seconds).
    pub fn retry_after(&self) -> Option<Duration> {
        let raw = self.retry_after.map(|s| s.get(&self.head))?;
        if raw.is_empty() || raw.len() > 20 {
            return None;
        }
        raw.iter()
            .try_fold(0u64, |acc, &b| {
                if !b.is_ascii_digit() {
                    return None;
                }
                acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
            })
            .map(Duration::from_secs)
    }

    /// The refusal header's reason (`X-Peerblock-Refused`), if present.
    pub fn refused(&self) -> Option<&[u8]> {
        self.refused.map(|s| s.get(&self.head))
    }

    /// The `404` reason header's value (`X-Peerblock-Miss`), if present.
    pub fn miss_reason(&self) -> Option<&[u8]> {
        self.miss.map(|s| s.get(&self.head))
    }

    /// A quarantined copy: `404` with `X-Peerblock-Miss: corrupt` (any ASCII case). The
    /// holder had the block and its copy failed verification: not proof of absence.
    pub fn is_corrupt_miss(&self) -> bool {
        self.status == 404
            && self
                .miss_reason()
                .is_some_and(|r| r.eq_ignore_ascii_case(crate::wire::MISS_CORRUPT.as_bytes()))
    }

    /// `X-Peerblock-Load`: the responder's requests in progress when it wrote this head, as
    /// it advertised them. `None` if absent, not a plain decimal, or above `u32::MAX`: a
    /// malformed hint is no hint (the value is the peer's input; consumers bound it too).
    pub fn load(&self) -> Option<u32> {
        crate::wire::parse_load(self.load.map(|s| s.get(&self.head))?)
    }

    /// An explicit refusal: `503` with the refusal header. The peer is alive and full;
    /// skip it for the refusal cooldown, do not count a breaker failure.
    pub fn is_refusal(&self) -> bool {
        self.status == 503 && self.refused.is_some()
    }

    /// `Content-Range` (the first one), raw: a `206`'s range and total, or a `416`'s
    /// `bytes */TOTAL`. Parse it with [`crate::client::ContentRange::parse`].
    pub fn content_range(&self) -> Option<&[u8]> {
        self.content_range.map(|s| s.get(&self.head))
    }

    /// `ETag` (the first one), raw, quotes and any `W/` prefix included.
    pub fn etag(&self) -> Option<&[u8]> {
        self.etag.map(|s| s.get(&self.head))
    }

    /// `Last-Modified` (the first one), raw.
    pub fn last_modified(&self) -> Option<&[u8]> {
        self.last_modified.map(|s| s.get(&self.head))
    }

    /// The raw head bytes.
    pub fn head(&self) -> &Bytes {
        &self.head
    }
}

/// Most body bytes reserved up front from a `Content-Length`: reserving the whole
/// advertised length would let a peer make us allocate the full limit before sending a
/// byte; beyond this the buffer grows as data arrives.
const MAX_BODY_PRERESERVE: u64 = 1024 * 1024;

impl ResponseDecoder {
    pub(super) fn parse_head(
        &mut self,
        limit: BodyLimit,
        interim: u32,
        success: u16,
        head_first: bool,
    ) -> Result<HeadOutcome, ResponseError> {
        let window = &self.buf.data()[..self.buf.len().min(MAX_RESPONSE_HEAD_BYTES)];
        let mut headers =
            [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut res,
            window,
            &mut headers,
        );
        let head_len = match open_head(parsed, window.len(), MAX_RESPONSE_HEAD_BYTES) {
            HeadOpening::Complete(n) => n,
            HeadOpening::TooLarge => {
                return Err(ResponseError::HeadTooLarge {
                    limit: MAX_RESPONSE_HEAD_BYTES,
                })
            }
            HeadOpening::Partial if self.eof => return Err(ResponseError::Truncated),
            HeadOpening::Partial => return Ok(HeadOutcome::Partial),
            HeadOpening::Invalid(e) => {
                return Err(match e {
                    httparse::Error::HeaderName | httparse::Error::HeaderValue => {
                        ResponseError::MalformedHeader
                    }
                    httparse::Error::NewLine => ResponseError::MalformedLineEnding,
                    httparse::Error::TooManyHeaders => ResponseError::TooManyHeaders {
                        limit: MAX_RESPONSE_HEADERS,
                    },
                    httparse::Error::Token | httparse::Error::Status | httparse::Error::Version => {
                        ResponseError::MalformedStatusLine
                    }
                })
            }
        };
        let head = &window[..head_len];
        if has_bare_lf(head) {
            return Err(ResponseError::MalformedLineEnding);
        }
        let version = match res.version {
            Some(0) => Version::Http10,
            Some(1) => Version::Http11,
            _ => return Err(ResponseError::MalformedStatusLine),
        };
        let status = res.code.ok_or(ResponseError::MalformedStatusLine)?;
        if !(100..=599).contains(&status) {
            return Err(ResponseError::MalformedStatusLine);
        }

        let mut content_length = None;
        let mut transfer_encoding: Option<&[u8]> = None;
        let mut te_count = 0u32;
        let (mut close, mut keep_alive_opt) = (false, false);
        let (mut node, mut upstream, mut retry_after, mut refused) = (None, None, None, None);
        let (mut load, mut miss) = (None, None);
        let (mut content_range, mut etag, mut last_modified) = (None, None, None);
        for h in res.headers.iter() {
            let name = h.name.as_bytes();
            let value = h.value;
            match name.len() {
                10 if name.eq_ignore_ascii_case(b"connection") => {
                    let (c, k) = connection_options(value);
                    close |= c;
                    keep_alive_opt |= k;
                }
                11 if name.eq_ignore_ascii_case(b"x-dart-node") => {
                    node = node.or(Some(Span::of(head, value)))
                }
                11 if name.eq_ignore_ascii_case(b"retry-after") => {
                    retry_after = retry_after.or(Some(Span::of(head, value)))
                }
                14 if name.eq_ignore_ascii_case(b"content-length") => {
                    if content_length.is_some() {
                        return Err(ResponseError::DuplicateContentLength);
                    }
                    content_length = Some(
                        parse_content_length(value).ok_or(ResponseError::InvalidContentLength)?,
                    );
                }
                17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                    transfer_encoding = Some(value);
                    te_count += 1;
                }
                16 if name.eq_ignore_ascii_case(b"x-peerblock-load") => {
                    load = load.or(Some(Span::of(head, value)))
                }
                16 if name.eq_ignore_ascii_case(b"x-peerblock-miss") => {
                    miss = miss.or(Some(Span::of(head, value)))
                }
                19 if name.eq_ignore_ascii_case(b"x-peerblock-refused") => {
                    refused = refused.or(Some(Span::of(head, value)))
                }
                22 if name.eq_ignore_ascii_case(b"x-dart-upstream-status") => {
                    upstream = upstream.or(Some(Span::of(head, value)))
                }
                13 if name.eq_ignore_ascii_case(b"content-range") => {
                    content_range = content_range.or(Some(Span::of(head, value)))
                }
                13 if name.eq_ignore_ascii_case(b"last-modified") => {
                    last_modified = last_modified.or(Some(Span::of(head, value)))
                }
                4 if name.eq_ignore_ascii_case(b"etag") => {
                    etag = etag.or(Some(Span::of(head, value)))
                }
                _ => {}
            }
        }

        if (100..200).contains(&status) {
            // Interim response: no body; skip it (bounded), the final head follows.
            if status == 101 || interim + 1 > MAX_INFORMATIONAL_RESPONSES {
                return Err(ResponseError::UnexpectedInformational { status });
            }
            let _ = self.buf.split_to(head_len);
            self.consumed += head_len as u64;
            self.state = State::Head {
                limit,
                interim: interim + 1,
                success,
                head_first,
            };
            return Ok(HeadOutcome::Interim);
        }

        // With `head_first`, a head that is not the success is handed out even when its
        // framing is refused: the error waits for the next poll.
        let deferred = head_first && status != success;
        let checked = Self::framing(status, version, content_length, transfer_encoding, te_count);
        let (framing, limit) = match checked.and_then(|framing| {
            let limit = if status == success {
                limit
            } else {
                BodyLimit::AtMost(MAX_ERROR_BODY_BYTES)
            };
            Self::check_length(framing, limit).map(|()| (framing, limit))
        }) {
            Ok(ok) => ok,
            Err(e) if deferred => {
                let head_bytes = self.buf.split_to(head_len).freeze();
                self.consumed += head_len as u64;
                self.state = State::Failed(e);
                return Ok(HeadOutcome::Final(ResponseHead {
                    head: head_bytes,
                    version,
                    status,
                    keep_alive: false,
                    framing: BodyFraming::UntilClose,
                    node,
                    upstream_status: upstream,
                    retry_after,
                    refused,
                    load,
                    miss,
                    content_range,
                    etag,
                    last_modified,
                }));
            }
            Err(e) => return Err(e),
        };
        let keep_alive = framing != BodyFraming::UntilClose
            && !close
            && (version == Version::Http11 || keep_alive_opt);

        let head_bytes = self.buf.split_to(head_len).freeze();
        self.consumed += head_len as u64;
        self.state = match framing {
            BodyFraming::Empty => State::Length {
                len: 0,
                limit: BodyLimit::AtMost(0),
                keep_alive,
            },
            BodyFraming::ContentLength(len) => {
                let want = len
                    .saturating_sub(self.buf.len() as u64)
                    .min(MAX_BODY_PRERESERVE);
                self.buf.reserve(want as usize);
                State::Length {
                    len,
                    limit,
                    keep_alive,
                }
            }
            BodyFraming::Chunked => State::Chunked {
                decoder: ChunkedDecoder::new(limit.max()),
                body: BytesMut::new(),
                limit,
                keep_alive,
            },
            BodyFraming::UntilClose => State::UntilClose { limit },
        };
        Ok(HeadOutcome::Final(ResponseHead {
            head: head_bytes,
            version,
            status,
            keep_alive,
            framing,
            node,
            upstream_status: upstream,
            retry_after,
            refused,
            load,
            miss,
            content_range,
            etag,
            last_modified,
        }))
    }

    /// How a final response's body is delimited (RFC 9112 §6.3), or why its framing is
    /// refused.
    fn framing(
        status: u16,
        version: Version,
        content_length: Option<u64>,
        transfer_encoding: Option<&[u8]>,
        te_count: u32,
    ) -> Result<BodyFraming, ResponseError> {
        if transfer_encoding.is_some() && content_length.is_some() {
            return Err(ResponseError::ContentLengthAndTransferEncoding);
        }
        // RFC 9112 §6.3 rule 1: a 204 or 304 ends at its head whatever its fields say.
        Ok(if status == 204 || status == 304 {
            BodyFraming::Empty
        } else if let Some(te) = transfer_encoding {
            if version == Version::Http10 {
                return Err(ResponseError::TransferEncodingOnHttp10);
            }
            if te_count != 1 || !te.eq_ignore_ascii_case(b"chunked") {
                return Err(ResponseError::UnsupportedTransferEncoding);
            }
            BodyFraming::Chunked
        } else if let Some(n) = content_length {
            BodyFraming::ContentLength(n)
        } else {
            BodyFraming::UntilClose
        })
    }

    /// A `Content-Length` the head already proves wrong for `limit`: above it, or below an
    /// exact length (fail now, not after reading the body).
    fn check_length(framing: BodyFraming, limit: BodyLimit) -> Result<(), ResponseError> {
        if let BodyFraming::ContentLength(n) = framing {
            if n > limit.max() {
                return Err(LengthError::ContentLengthAboveLimit {
                    limit: limit.max(),
                    content_length: n,
                }
                .into());
            }
            if let BodyLimit::Exact(expected) = limit {
                if n < expected {
                    return Err(LengthError::ContentLengthBelowExpected {
                        expected,
                        content_length: n,
                    }
                    .into());
                }
            }
        }
        Ok(())
    }
}

pub(super) enum HeadOutcome {
    Partial,
    Interim,
    Final(ResponseHead),
}
