//! Head encoders. Heads are written into a caller's `BytesMut`; bodies stay separate
//! [`Bytes`] so a driver can write them (vectored) without copying.
//!
//! Every caller-supplied value is validated before anything is written: a value holding
//! CR, LF, NUL or another control byte (header injection), or leading/trailing
//! whitespace (which a decoder would strip, so it would not round-trip), is an
//! [`EncodeError`] and leaves `out` untouched.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::EncodeError;
use super::is_clean_value;
use crate::wire::{self, header, BlockPath, Hop, Status};

/// What an outgoing request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestTarget {
    /// A block.
    Block(BlockPath),
    /// The roster.
    Roster,
}

/// A request head to encode (`GET`, HTTP/1.1). Requests never carry a body.
#[derive(Clone, Copy, Debug)]
pub struct OutgoingRequest<'a> {
    /// What to ask for.
    pub target: RequestTarget,
    /// The `Host` value (the peer's `host:port`).
    pub host: &'a str,
    /// `X-DART-Hop`; `None` omits the header (meaning 0).
    pub hop: Option<Hop>,
    /// `X-DART-Origin`: the upstream URL a relay may fetch from.
    pub origin: Option<&'a str>,
    /// `X-DART-Node`: our node ID (roster requests identify the caller).
    pub node: Option<&'a str>,
    /// `X-DART-Peer-Addr`: our advertised listen address (roster requests).
    pub peer_addr: Option<&'a str>,
    /// `X-Peerblock-Record`: our signed member record (roster requests).
    pub record: Option<&'a str>,
    /// `X-DART-Epoch`.
    pub epoch: Option<u64>,
    /// Send `Connection: close` (no further request on this connection).
    pub close: bool,
}

impl<'a> OutgoingRequest<'a> {
    /// A plain block request to `host` with no optional headers.
    pub fn block(host: &'a str, path: BlockPath) -> Self {
        OutgoingRequest {
            target: RequestTarget::Block(path),
            host,
            hop: None,
            origin: None,
            node: None,
            peer_addr: None,
            record: None,
            epoch: None,
            close: false,
        }
    }

    /// A roster request to `host` identifying us by `node` and `peer_addr`.
    pub fn roster(host: &'a str, node: &'a str, peer_addr: &'a str) -> Self {
        OutgoingRequest {
            target: RequestTarget::Roster,
            host,
            hop: None,
            origin: None,
            node: Some(node),
            peer_addr: Some(peer_addr),
            record: None,
            epoch: None,
            close: false,
        }
    }

    /// Appends the head to `out`, or returns which value is unsafe (writing nothing).
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        check("Host", Some(self.host))?;
        check(header::ORIGIN, self.origin)?;
        check(header::NODE, self.node)?;
        check(header::PEER_ADDR, self.peer_addr)?;
        check(header::RECORD, self.record)?;
        out.reserve(
            160 + self.host.len()
                + opt_len(self.origin)
                + opt_len(self.node)
                + opt_len(self.record),
        );
        out.put_slice(b"GET ");
        match &self.target {
            RequestTarget::Block(path) => {
                out.put_slice(wire::BLOCK_PATH_PREFIX.as_bytes());
                put_hex(out, path.key.as_bytes());
                out.put_u8(b'/');
                put_decimal(out, path.index);
            }
            RequestTarget::Roster => out.put_slice(wire::ROSTER_PATH.as_bytes()),
        }
        out.put_slice(b" HTTP/1.1\r\nHost: ");
        out.put_slice(self.host.as_bytes());
        out.put_slice(b"\r\n");
        if let Some(hop) = self.hop {
            put_name(out, header::HOP);
            put_decimal(out, u64::from(hop.0));
            out.put_slice(b"\r\n");
        }
        put_field(out, header::ORIGIN, self.origin);
        put_field(out, header::NODE, self.node);
        put_field(out, header::PEER_ADDR, self.peer_addr);
        put_field(out, header::RECORD, self.record);
        if let Some(epoch) = self.epoch {
            put_name(out, header::EPOCH);
            put_decimal(out, epoch);
            out.put_slice(b"\r\n");
        }
        if self.close {
            out.put_slice(b"Connection: close\r\n");
        }
        out.put_slice(b"\r\n");
        Ok(())
    }
}

/// A `Range` request head for one byte range of an object on a plain HTTP/1.1 server
/// (an object URL's origin: nginx, an object store, a presigned link): `GET <target>
/// HTTP/1.1`, `Host`, `Range: bytes=<first>-<last>`, and the precondition that pins the
/// object's version (`If-Match` for a strong ETag, `If-Unmodified-Since` for a
/// `Last-Modified` date; a weak ETag cannot be sent as `If-Match`, which compares
/// strongly, so it is only compared on the answer).
#[derive(Clone, Copy, Debug)]
pub struct RangeRequest<'a> {
    /// The request target as sent: the URL's path and query (`/p/o.bin?X-Sig=..`).
    pub target: &'a str,
    /// The `Host` value (`host` or `host:port`, as the URL has it).
    pub host: &'a str,
    /// The first byte.
    pub first: u64,
    /// The last byte (inclusive), at least `first`.
    pub last: u64,
    /// `If-Match`: a strong ETag (`"..."`).
    pub if_match: Option<&'a str>,
    /// `If-Unmodified-Since`: an HTTP date.
    pub if_unmodified_since: Option<&'a str>,
}

impl RangeRequest<'_> {
    /// Appends the head to `out`, or returns which value cannot be sent (writing nothing):
    /// a target that is not an origin-form target (it must start with `/` and hold only
    /// visible ASCII, no space), a header value with control bytes, or `last < first`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let target = self.target.as_bytes();
        if target.first() != Some(&b'/') || !target.iter().all(|b| (0x21..0x7f).contains(b)) {
            return Err(EncodeError::InvalidValue {
                field: "request target",
            });
        }
        if self.last < self.first {
            return Err(EncodeError::InvalidValue { field: "Range" });
        }
        check("Host", Some(self.host))?;
        check("If-Match", self.if_match)?;
        check("If-Unmodified-Since", self.if_unmodified_since)?;
        out.reserve(
            96 + target.len()
                + self.host.len()
                + opt_len(self.if_match)
                + opt_len(self.if_unmodified_since),
        );
        out.put_slice(b"GET ");
        out.put_slice(target);
        out.put_slice(b" HTTP/1.1\r\nHost: ");
        out.put_slice(self.host.as_bytes());
        out.put_slice(b"\r\nRange: bytes=");
        put_decimal(out, self.first);
        out.put_u8(b'-');
        put_decimal(out, self.last);
        out.put_slice(b"\r\n");
        put_field(out, "If-Match", self.if_match);
        put_field(out, "If-Unmodified-Since", self.if_unmodified_since);
        out.put_slice(b"\r\n");
        Ok(())
    }
}

/// The kind of response, which fixes its status and the headers that status requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseKind<'a> {
    /// `200`: the block follows (`Content-Length`, body written separately).
    Block {
        /// The block's length.
        content_length: u64,
    },
    /// `200`: the roster JSON follows.
    Roster {
        /// The JSON document's length.
        content_length: u64,
    },
    /// `400`: malformed path, invalid hop, refused framing.
    BadRequest,
    /// `404`: unknown path, or the block is not held.
    NotFound,
    /// `404` with `X-Peerblock-Miss: corrupt`: the block was held but its stored copy
    /// failed verification and was quarantined.
    Corrupt,
    /// `405` with `Allow: GET`.
    MethodNotAllowed,
    /// `431`: head too large (the connection closes).
    HeaderFieldsTooLarge,
    /// `500`: the block source failed.
    InternalServerError,
    /// `502` with `X-DART-Upstream-Status`: the relay's origin refused the credential.
    UpstreamRefused {
        /// The origin's status code (three digits).
        upstream_status: u16,
    },
    /// `503` with the refusal header and `Retry-After`: the node is full (closes).
    Refused {
        /// Why, as an HTTP token (e.g. `sessions`, `source-quota`).
        reason: &'a str,
        /// Seconds until a retry may succeed.
        retry_after_secs: u64,
    },
    /// `505`: unsupported HTTP version (the connection closes).
    HttpVersionNotSupported,
}

impl ResponseKind<'_> {
    /// The status this kind answers with.
    pub const fn status(&self) -> Status {
        match self {
            ResponseKind::Block { .. } | ResponseKind::Roster { .. } => Status::Ok,
            ResponseKind::BadRequest => Status::BadRequest,
            ResponseKind::NotFound | ResponseKind::Corrupt => Status::NotFound,
            ResponseKind::MethodNotAllowed => Status::MethodNotAllowed,
            ResponseKind::HeaderFieldsTooLarge => Status::HeaderFieldsTooLarge,
            ResponseKind::InternalServerError => Status::InternalServerError,
            ResponseKind::UpstreamRefused { .. } => Status::BadGateway,
            ResponseKind::Refused { .. } => Status::ServiceUnavailable,
            ResponseKind::HttpVersionNotSupported => Status::HttpVersionNotSupported,
        }
    }

    /// The short static text body sent with an error status (empty for `200`s, whose
    /// body the caller supplies).
    pub const fn error_body(&self) -> &'static [u8] {
        match self {
            ResponseKind::Block { .. } | ResponseKind::Roster { .. } => b"",
            ResponseKind::BadRequest => b"bad request\n",
            ResponseKind::NotFound => b"not found\n",
            ResponseKind::Corrupt => b"not found: the stored copy failed verification\n",
            ResponseKind::MethodNotAllowed => b"method not allowed\n",
            ResponseKind::HeaderFieldsTooLarge => b"request header fields too large\n",
            ResponseKind::InternalServerError => b"internal server error\n",
            ResponseKind::UpstreamRefused { .. } => b"upstream refused\n",
            ResponseKind::Refused { .. } => b"refused: node is full\n",
            ResponseKind::HttpVersionNotSupported => b"http version not supported\n",
        }
    }

    /// Whether the connection must close after this response regardless of the request:
    /// a refusal frees its slot at once, and after `431`/`505` the stream is untrusted.
    pub const fn forces_close(&self) -> bool {
        matches!(
            self,
            ResponseKind::Refused { .. }
                | ResponseKind::HeaderFieldsTooLarge
                | ResponseKind::HttpVersionNotSupported
        )
    }

    /// The `Content-Length` this response carries.
    pub const fn content_length(&self) -> u64 {
        match self {
            ResponseKind::Block { content_length } | ResponseKind::Roster { content_length } => {
                *content_length
            }
            _ => self.error_body().len() as u64,
        }
    }
}

/// A response head to encode (HTTP/1.1, always with an explicit `Content-Length`).
#[derive(Clone, Copy, Debug)]
pub struct OutgoingResponse<'a> {
    /// Status and status-specific headers.
    pub kind: ResponseKind<'a>,
    /// `X-DART-Node`: our node ID, echoed on every response.
    pub node: Option<&'a str>,
    /// Send `Connection: close` (also implied by [`ResponseKind::forces_close`]).
    pub close: bool,
    /// `X-Peerblock-Load`: our requests in progress, if the server advertises it.
    pub load: Option<u32>,
}

impl<'a> OutgoingResponse<'a> {
    /// A response of `kind` naming us as `node`, keeping the connection open unless the
    /// kind forces a close.
    pub fn new(kind: ResponseKind<'a>, node: Option<&'a str>) -> Self {
        OutgoingResponse {
            kind,
            node,
            close: false,
            load: None,
        }
    }

    /// Whether the head says `Connection: close`.
    pub fn closes(&self) -> bool {
        self.close || self.kind.forces_close()
    }

    /// The body to send after the head: the static error text for error kinds, empty for
    /// `200`s (the caller sends the block or roster itself).
    pub fn error_body(&self) -> Bytes {
        Bytes::from_static(self.kind.error_body())
    }

    /// Appends the head to `out`, or returns which value is unsafe (writing nothing).
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        check(header::NODE, self.node)?;
        match self.kind {
            ResponseKind::Refused { reason, .. } if !wire::is_token(reason.as_bytes()) => {
                return Err(EncodeError::InvalidRefusalReason)
            }
            ResponseKind::UpstreamRefused { upstream_status }
                if !(100..=999).contains(&upstream_status) =>
            {
                return Err(EncodeError::InvalidUpstreamStatus(upstream_status))
            }
            _ => {}
        }
        let status = self.kind.status();
        out.reserve(192 + opt_len(self.node));
        out.put_slice(b"HTTP/1.1 ");
        put_decimal(out, u64::from(status.code()));
        out.put_u8(b' ');
        out.put_slice(status.reason().as_bytes());
        out.put_slice(b"\r\nContent-Length: ");
        put_decimal(out, self.kind.content_length());
        out.put_slice(b"\r\n");
        match self.kind {
            ResponseKind::Block { .. } => {
                out.put_slice(b"Content-Type: application/octet-stream\r\n")
            }
            ResponseKind::Roster { .. } => out.put_slice(b"Content-Type: application/json\r\n"),
            _ => out.put_slice(b"Content-Type: text/plain; charset=utf-8\r\n"),
        }
        put_field(out, header::NODE, self.node);
        if let Some(load) = self.load {
            put_name(out, header::LOAD);
            put_decimal(out, u64::from(load));
            out.put_slice(b"\r\n");
        }
        match self.kind {
            ResponseKind::MethodNotAllowed => out.put_slice(b"Allow: GET\r\n"),
            ResponseKind::Corrupt => put_field(out, header::MISS, Some(wire::MISS_CORRUPT)),
            ResponseKind::UpstreamRefused { upstream_status } => {
                put_name(out, header::UPSTREAM_STATUS);
                put_decimal(out, u64::from(upstream_status));
                out.put_slice(b"\r\n");
            }
            ResponseKind::Refused {
                reason,
                retry_after_secs,
            } => {
                put_field(out, header::REFUSED, Some(reason));
                put_name(out, header::RETRY_AFTER);
                put_decimal(out, retry_after_secs);
                out.put_slice(b"\r\n");
            }
            _ => {}
        }
        if self.closes() {
            out.put_slice(b"Connection: close\r\n");
        }
        out.put_slice(b"\r\n");
        Ok(())
    }
}

fn check(field: &'static str, value: Option<&str>) -> Result<(), EncodeError> {
    match value {
        Some(v) if !is_clean_value(v.as_bytes()) => Err(EncodeError::InvalidValue { field }),
        _ => Ok(()),
    }
}

fn opt_len(v: Option<&str>) -> usize {
    v.map_or(0, str::len)
}

fn put_name(out: &mut BytesMut, name: &str) {
    out.put_slice(name.as_bytes());
    out.put_slice(b": ");
}

fn put_field(out: &mut BytesMut, name: &str, value: Option<&str>) {
    if let Some(v) = value {
        put_name(out, name);
        out.put_slice(v.as_bytes());
        out.put_slice(b"\r\n");
    }
}

fn put_hex(out: &mut BytesMut, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.put_u8(DIGITS[usize::from(b >> 4)]);
        out.put_u8(DIGITS[usize::from(b & 0x0f)]);
    }
}

/// Writes `n` in decimal without going through `fmt` (no allocation, no formatter).
fn put_decimal(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{BodyLimit, RequestDecoder, ResponseDecoder, ResponseEvent, Route};
    use crate::wire::ChunkKey;

    #[test]
    fn request_head_round_trips_through_decoder() {
        let path = BlockPath {
            key: ChunkKey::from_array([0xab; 32]),
            index: u64::MAX,
        };
        let mut req = OutgoingRequest::block("10.0.0.1:7000", path);
        req.hop = Some(Hop(3));
        req.origin = Some("https://origin/x?sig=abc");
        let mut out = BytesMut::new();
        req.encode(&mut out).unwrap();
        let mut d = RequestDecoder::new();
        d.feed(&out);
        let r = d.decode().unwrap().unwrap();
        assert_eq!(r.route(), Ok(Route::Block { path, hop: Hop(3) }));
        assert_eq!(r.origin(), Some(&b"https://origin/x?sig=abc"[..]));
    }

    #[test]
    fn a_field_longer_than_the_rest_of_the_head_is_encoded_whole() {
        // Each field alone is longer than everything before it in the head's size
        // estimate, so the estimate must add it, never take it away.
        let long = "a".repeat(2000);
        let decode = |req: &OutgoingRequest| {
            let mut out = BytesMut::new();
            req.encode(&mut out).unwrap();
            let mut d = RequestDecoder::new();
            assert_eq!(d.feed(&out), out.len());
            d.decode().unwrap().expect("one whole request")
        };
        let r = decode(&OutgoingRequest::roster(&long, "n", "a:1"));
        assert_eq!(r.node(), Some(&b"n"[..]));
        let mut req = OutgoingRequest::roster("h", "n", "a:1");
        req.origin = Some(&long);
        assert_eq!(decode(&req).origin(), Some(long.as_bytes()));
        let r = decode(&OutgoingRequest::roster("h", &long, "a:1"));
        assert_eq!(r.node(), Some(long.as_bytes()));
        let mut req = OutgoingRequest::roster("h", "n", "a:1");
        req.record = Some(&long);
        assert_eq!(decode(&req).record(), Some(long.as_bytes()));
    }

    #[test]
    fn an_upstream_status_outside_100_to_999_is_refused_and_nothing_written() {
        for (upstream_status, ok) in [(99, false), (100, true), (999, true), (1000, false)] {
            let mut out = BytesMut::new();
            let got =
                OutgoingResponse::new(ResponseKind::UpstreamRefused { upstream_status }, None)
                    .encode(&mut out);
            if ok {
                assert_eq!(got, Ok(()), "{upstream_status}");
            } else {
                assert_eq!(
                    got,
                    Err(EncodeError::InvalidUpstreamStatus(upstream_status))
                );
                assert!(out.is_empty(), "{upstream_status}");
            }
        }
    }

    #[test]
    fn each_kind_of_response_names_its_content_type() {
        let long = "n".repeat(1000);
        for (kind, content_type) in [
            (
                ResponseKind::Block { content_length: 7 },
                "application/octet-stream",
            ),
            (
                ResponseKind::Roster { content_length: 7 },
                "application/json",
            ),
            (ResponseKind::NotFound, "text/plain; charset=utf-8"),
        ] {
            // A node id longer than the rest of the head: the size estimate adds it.
            let mut out = BytesMut::new();
            OutgoingResponse::new(kind, Some(&long))
                .encode(&mut out)
                .unwrap();
            let head = String::from_utf8(out.to_vec()).unwrap();
            assert!(
                head.contains(&format!("\r\nContent-Type: {content_type}\r\n")),
                "{head}"
            );
            assert!(head.contains(&format!("\r\nX-DART-Node: {long}\r\n")));
        }
    }

    #[test]
    fn injected_crlf_is_refused_and_nothing_written() {
        let path = BlockPath {
            key: ChunkKey::from_array([1; 32]),
            index: 1,
        };
        let mut req = OutgoingRequest::block("h", path);
        req.origin = Some("http://x\r\nX-DART-Hop: 0");
        let mut out = BytesMut::new();
        assert_eq!(
            req.encode(&mut out),
            Err(EncodeError::InvalidValue {
                field: header::ORIGIN
            })
        );
        assert!(out.is_empty());
        let resp = OutgoingResponse::new(ResponseKind::NotFound, Some("n\n1"));
        assert!(resp.encode(&mut out).is_err());
        let resp = OutgoingResponse::new(
            ResponseKind::Refused {
                reason: "a b",
                retry_after_secs: 1,
            },
            None,
        );
        assert_eq!(
            resp.encode(&mut out),
            Err(EncodeError::InvalidRefusalReason)
        );
        assert!(out.is_empty());
    }

    #[test]
    fn every_response_kind_decodes_with_its_headers() {
        let kinds = [
            ResponseKind::Block { content_length: 3 },
            ResponseKind::Roster { content_length: 2 },
            ResponseKind::BadRequest,
            ResponseKind::NotFound,
            ResponseKind::MethodNotAllowed,
            ResponseKind::HeaderFieldsTooLarge,
            ResponseKind::InternalServerError,
            ResponseKind::UpstreamRefused {
                upstream_status: 403,
            },
            ResponseKind::Refused {
                reason: "sessions",
                retry_after_secs: 15,
            },
            ResponseKind::HttpVersionNotSupported,
        ];
        for kind in kinds {
            let resp = OutgoingResponse::new(kind, Some("node-1"));
            let mut out = BytesMut::new();
            resp.encode(&mut out).unwrap();
            let body: &[u8] = match kind {
                ResponseKind::Block { .. } => b"abc",
                ResponseKind::Roster { .. } => b"{}",
                _ => kind.error_body(),
            };
            out.extend_from_slice(body);
            let mut d = ResponseDecoder::new();
            // A roster is read up to a bound; a block exactly.
            let limit = match kind {
                ResponseKind::Roster { .. } => BodyLimit::AtMost(3),
                _ => BodyLimit::Exact(3),
            };
            d.expect(limit).unwrap();
            d.feed(&out);
            let Ok(Some(ResponseEvent::Head(h))) = d.poll() else {
                panic!("{kind:?}")
            };
            assert_eq!(h.status(), kind.status().code());
            assert_eq!(h.node(), Some(&b"node-1"[..]));
            assert_eq!(h.keep_alive(), !kind.forces_close());
            match kind {
                ResponseKind::Refused { .. } => {
                    assert!(h.is_refusal());
                    assert_eq!(h.retry_after(), Some(crate::time::Duration::from_secs(15)));
                }
                ResponseKind::UpstreamRefused { .. } => assert_eq!(h.upstream_status(), Some(403)),
                _ => assert!(!h.is_refusal()),
            }
            let Ok(Some(ResponseEvent::Body(b))) = d.poll() else {
                panic!("{kind:?}")
            };
            assert_eq!(&b[..], body);
        }
    }
}
