//! Server-side request decoding.

use core::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};

use super::error::RequestError;
use super::{
    connection_options, parse_content_length, request_lines_end_in_crlf, Span, Version,
    MAX_REQUEST_HEADERS, MAX_REQUEST_HEAD_BYTES, REQUEST_BUFFER_BYTES,
};
use crate::wire::{self, BlockPath, Hop, HopError, PathError, Status};

/// The request method, reduced to what the server distinguishes: `GET` is served,
/// anything else answers `405` (methods are case-sensitive, so `get` is "other").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`.
    Get,
    /// Any other method token.
    Other,
}

/// What a well-framed request asks for, once its method, path and wire headers are
/// validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /peer/v1/block/<key>/<index>` with a valid hop.
    Block {
        /// The requested block.
        path: BlockPath,
        /// The relay depth (`X-DART-Hop`, absent = 0).
        hop: Hop,
    },
    /// `GET /peer/v1/roster`.
    Roster,
}

/// Why a well-framed request is not served. Unlike a [`RequestError`], the connection
/// stays usable: the server answers [`Rejection::status`] and reads the next request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The path is neither a block path nor the roster path.
    #[error("unknown path")]
    UnknownPath,
    /// A known path with a method other than `GET`.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A malformed block path.
    #[error("malformed block path: {0}")]
    BadPath(PathError),
    /// An invalid `X-DART-Hop` (the block source is never invoked).
    #[error("invalid X-DART-Hop: {0}")]
    BadHop(HopError),
    /// `X-DART-Origin` appears more than once, so the relay target is ambiguous.
    #[error("X-DART-Origin appears more than once")]
    DuplicateOrigin,
}

impl Rejection {
    /// The status the server answers.
    pub const fn status(self) -> Status {
        match self {
            Rejection::UnknownPath => Status::NotFound,
            Rejection::MethodNotAllowed => Status::MethodNotAllowed,
            Rejection::BadPath(_) | Rejection::BadHop(_) | Rejection::DuplicateOrigin => {
                Status::BadRequest
            }
        }
    }
}

/// One decoded request head. Owns its bytes (a [`Bytes`] split off the decoder's buffer),
/// so it can outlive the decoder's next call; field accessors are offsets into it.
#[derive(Clone, Debug)]
pub struct Request {
    head: Bytes,
    method: Method,
    version: Version,
    keep_alive: bool,
    target: Span,
    path: Span,
    origin: Option<Span>,
    node: Option<Span>,
    peer_addr: Option<Span>,
    epoch: Option<Span>,
    route: Result<Route, Rejection>,
}

impl Request {
    /// The method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The HTTP version of the request line.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Whether the connection stays open after the answer: HTTP/1.1 unless
    /// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// The full request target (path and query), as sent.
    pub fn target(&self) -> &[u8] {
        self.target.get(&self.head)
    }

    /// The target's path: everything before `?`. Routes are matched on this only.
    pub fn path(&self) -> &[u8] {
        self.path.get(&self.head)
    }

    /// What the request asks for, or why it is not served (and with which status).
    ///
    /// Order of checks: unknown path (404), method (405), block path syntax (400),
    /// duplicate `X-DART-Origin` (400), hop (400).
    pub fn route(&self) -> Result<Route, Rejection> {
        self.route
    }

    /// `X-DART-Origin`, if present: the upstream URL a relay may fetch from.
    pub fn origin(&self) -> Option<&[u8]> {
        self.origin.map(|s| s.get(&self.head))
    }

    /// `X-DART-Origin` as a zero-copy [`Bytes`] slice of the head.
    pub fn origin_bytes(&self) -> Option<Bytes> {
        self.origin.map(|s| self.head.slice(s.range()))
    }

    /// `X-DART-Node`: the caller's node ID (roster requests identify the caller).
    pub fn node(&self) -> Option<&[u8]> {
        self.node.map(|s| s.get(&self.head))
    }

    /// `X-DART-Peer-Addr`: the caller's advertised listen address.
    pub fn peer_addr(&self) -> Option<&[u8]> {
        self.peer_addr.map(|s| s.get(&self.head))
    }

    /// `X-DART-Epoch`, raw (see [`wire::parse_epoch`]).
    pub fn epoch(&self) -> Option<&[u8]> {
        self.epoch.map(|s| s.get(&self.head))
    }

    /// The raw head bytes, request line through the final empty line.
    pub fn head(&self) -> &Bytes {
        &self.head
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    /// A request asked to close; nothing after it is decoded.
    Closed,
    Failed(RequestError),
}

/// Incremental server-side request decoder for one connection.
///
/// Driving contract: call [`feed`](Self::feed) with received bytes (it accepts up to
/// [`REQUEST_BUFFER_BYTES`] buffered; keep the rest and feed it after decoding), then call
/// [`decode`](Self::decode) until it returns `Ok(None)`. Requests come out in order;
/// any split of the input yields the same requests as one whole buffer. After a request
/// with `keep_alive() == false` the decoder is closed: `decode` returns `Ok(None)` and
/// `feed` discards input. After an error, `decode` returns the same error forever: answer
/// its [`RequestError::status`] and close the connection.
#[derive(Debug)]
pub struct RequestDecoder {
    buf: BytesMut,
    state: State,
}

impl Default for RequestDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestDecoder {
    /// A decoder with its receive buffer allocated ([`REQUEST_BUFFER_BYTES`]).
    pub fn new() -> Self {
        RequestDecoder {
            buf: BytesMut::with_capacity(REQUEST_BUFFER_BYTES),
            state: State::Open,
        }
    }

    /// Buffers as much of `data` as fits and returns how many bytes were taken; the
    /// caller keeps `data[taken..]` for later. Once closed or failed, input is discarded
    /// (reported as taken).
    pub fn feed(&mut self, data: &[u8]) -> usize {
        if self.state != State::Open {
            return data.len();
        }
        let take = data.len().min(self.room());
        self.buf.extend_from_slice(&data[..take]);
        take
    }

    /// How many more bytes [`feed`](Self::feed) would accept now.
    pub fn room(&self) -> usize {
        REQUEST_BUFFER_BYTES.saturating_sub(self.buf.len())
    }

    /// Bytes buffered and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// True once a request asked to close the connection or an error occurred.
    pub fn is_closed(&self) -> bool {
        self.state != State::Open
    }

    /// Decodes the next complete request, if one is buffered.
    pub fn decode(&mut self) -> Result<Option<Request>, RequestError> {
        match self.state {
            State::Open => {}
            State::Closed => return Ok(None),
            State::Failed(e) => return Err(e),
        }
        match self.decode_inner() {
            Ok(Some(req)) => {
                if !req.keep_alive {
                    self.state = State::Closed;
                }
                Ok(Some(req))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.state = State::Failed(e);
                Err(e)
            }
        }
    }

    #[inline(always)]
    fn decode_inner(&mut self) -> Result<Option<Request>, RequestError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        // Parse only the first MAX_REQUEST_HEAD_BYTES: the outcome then depends on those
        // bytes alone, whatever else is buffered, which keeps decoding split-invariant.
        let window = &self.buf[..self.buf.len().min(MAX_REQUEST_HEAD_BYTES)];
        let mut headers =
            [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_REQUEST_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(
            &mut req,
            window,
            &mut headers,
        );
        let head_len = match parsed {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if window.len() >= MAX_REQUEST_HEAD_BYTES {
                    return Err(RequestError::HeadTooLarge {
                        limit: MAX_REQUEST_HEAD_BYTES,
                    });
                }
                return Ok(None);
            }
            Err(httparse::Error::Version) if !names_a_version(window) => {
                return Err(RequestError::MalformedRequestLine)
            }
            Err(e) => return Err(map_parse_error(e)),
        };
        let head = &window[..head_len];
        let method_bytes = req
            .method
            .ok_or(RequestError::MalformedRequestLine)?
            .as_bytes();
        if !request_lines_end_in_crlf(
            head,
            method_bytes,
            req.headers.iter().map(|h| h.name.as_bytes()),
        ) {
            return Err(RequestError::BareLineFeed);
        }
        let version = match req.version {
            Some(0) => Version::Http10,
            Some(1) => Version::Http11,
            _ => return Err(RequestError::UnsupportedVersion),
        };
        let method = match req.method {
            Some("GET") => Method::Get,
            Some(_) => Method::Other,
            None => return Err(RequestError::MalformedRequestLine),
        };
        let target = req
            .path
            .ok_or(RequestError::MalformedRequestLine)?
            .as_bytes();
        // Origin-form only (RFC 9112 §3.2.1), visible ASCII, no fragment. One
        // non-short-circuiting pass so it vectorises (it runs on every request).
        let (visible, query) = target.iter().fold((true, false), |(ok, q), &b| {
            (ok & (b > 0x20) & (b < 0x7f) & (b != b'#'), q | (b == b'?'))
        });
        if target.first() != Some(&b'/') || !visible {
            return Err(RequestError::InvalidTarget);
        }
        let path = if query {
            let q = target
                .iter()
                .position(|&b| b == b'?')
                .unwrap_or(target.len());
            &target[..q]
        } else {
            target
        };

        let mut fields = Fields::default();
        for h in req.headers.iter() {
            fields.take(h.name.as_bytes(), h.value)?;
        }
        if version == Version::Http11 && !fields.host {
            return Err(RequestError::MissingHost);
        }
        let keep_alive = !fields.close && (version == Version::Http11 || fields.keep_alive);
        let route = route(method, path, &fields);
        let spans = (
            Span::of(head, target),
            Span::of(head, path),
            fields.origin.map(|v| Span::of(head, v)),
            fields.node.map(|v| Span::of(head, v)),
            fields.peer_addr.map(|v| Span::of(head, v)),
            fields.epoch.map(|v| Span::of(head, v)),
        );
        let head = self.buf.split_to(head_len).freeze();
        Ok(Some(Request {
            head,
            method,
            version,
            keep_alive,
            target: spans.0,
            path: spans.1,
            origin: spans.2,
            node: spans.3,
            peer_addr: spans.4,
            epoch: spans.5,
            route,
        }))
    }
}

#[inline]
fn route(method: Method, path: &[u8], fields: &Fields<'_>) -> Result<Route, Rejection> {
    if path == wire::ROSTER_PATH.as_bytes() {
        return match method {
            Method::Get => Ok(Route::Roster),
            Method::Other => Err(Rejection::MethodNotAllowed),
        };
    }
    if !path.starts_with(wire::BLOCK_PATH_PREFIX.as_bytes()) {
        return Err(Rejection::UnknownPath);
    }
    if method != Method::Get {
        return Err(Rejection::MethodNotAllowed);
    }
    let block = BlockPath::parse(path).map_err(Rejection::BadPath)?;
    if fields.origin_count > 1 {
        return Err(Rejection::DuplicateOrigin);
    }
    let hop = if fields.hop_count > 1 {
        Err(HopError::Duplicate)
    } else {
        wire::parse_hop(fields.hop)
    }
    .map_err(Rejection::BadHop)?;
    Ok(Route::Block { path: block, hop })
}

/// The header fields the decoder looks at, gathered in one pass.
#[derive(Default)]
struct Fields<'a> {
    host: bool,
    close: bool,
    keep_alive: bool,
    content_length: bool,
    hop: Option<&'a [u8]>,
    hop_count: u8,
    origin: Option<&'a [u8]>,
    origin_count: u8,
    node: Option<&'a [u8]>,
    peer_addr: Option<&'a [u8]>,
    epoch: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    fn take(&mut self, name: &[u8], value: &'a [u8]) -> Result<(), RequestError> {
        // Dispatch on length first: one comparison rules out most names.
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                if self.host {
                    return Err(RequestError::DuplicateHost);
                }
                self.host = true;
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                let (close, keep_alive) = connection_options(value);
                self.close |= close;
                self.keep_alive |= keep_alive;
            }
            10 if name.eq_ignore_ascii_case(b"x-dart-hop") => {
                self.hop = Some(value);
                self.hop_count = self.hop_count.saturating_add(1);
            }
            11 if name.eq_ignore_ascii_case(b"x-dart-node") => self.node = Some(value),
            12 if name.eq_ignore_ascii_case(b"x-dart-epoch") => self.epoch = Some(value),
            13 if name.eq_ignore_ascii_case(b"x-dart-origin") => {
                self.origin = Some(value);
                self.origin_count = self.origin_count.saturating_add(1);
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                if self.content_length {
                    return Err(RequestError::DuplicateContentLength);
                }
                self.content_length = true;
                match parse_content_length(value) {
                    None => return Err(RequestError::InvalidContentLength),
                    Some(0) => {}
                    Some(content_length) => {
                        return Err(RequestError::UnexpectedBody { content_length })
                    }
                }
            }
            16 if name.eq_ignore_ascii_case(b"x-dart-peer-addr") => self.peer_addr = Some(value),
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                return Err(RequestError::TransferEncoding)
            }
            _ => {}
        }
        Ok(())
    }
}

/// Does the request line read `<method> <target> HTTP/...`? httparse reports any
/// request-line shape it cannot split as a version error; only a line whose third part
/// really is a version earns `505`, the rest is a malformed line (`400`). Only the bytes
/// up to `HTTP/` are looked at, which httparse has seen whenever it reports the error, so
/// the classification does not depend on how the input was split.
fn names_a_version(window: &[u8]) -> bool {
    let mut parts = window.splitn(3, |&b| b == b' ');
    parts.next();
    parts.next();
    parts.next().is_some_and(|v| v.starts_with(b"HTTP/"))
}

fn map_parse_error(e: httparse::Error) -> RequestError {
    match e {
        httparse::Error::HeaderName => RequestError::MalformedHeaderName,
        httparse::Error::HeaderValue => RequestError::MalformedHeaderValue,
        httparse::Error::NewLine => RequestError::MalformedLineEnding,
        httparse::Error::Version => RequestError::UnsupportedVersion,
        httparse::Error::TooManyHeaders => RequestError::TooManyHeaders {
            limit: MAX_REQUEST_HEADERS,
        },
        httparse::Error::Token | httparse::Error::Status => RequestError::MalformedRequestLine,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ChunkKey;

    fn decode_all(input: &[u8]) -> (Vec<Request>, Option<RequestError>) {
        let mut d = RequestDecoder::new();
        assert_eq!(d.feed(input), input.len());
        let mut out = Vec::new();
        loop {
            match d.decode() {
                Ok(Some(r)) => out.push(r),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    #[test]
    fn decodes_block_request_with_wire_headers() {
        let (reqs, err) = decode_all(
            b"GET /peer/v1/block/abCD/7?x=1 HTTP/1.1\r\nHost: p:1\r\nX-DART-Hop: 2\r\n\
              X-DART-Origin: http://o/x\r\nx-dart-node: n1\r\nX-DART-Peer-Addr: a:1\r\n\
              X-DART-Epoch: 9\r\n\r\n",
        );
        assert_eq!(err, None);
        let r = &reqs[0];
        assert_eq!(r.method(), Method::Get);
        assert_eq!(r.path(), b"/peer/v1/block/abCD/7");
        assert_eq!(r.target(), b"/peer/v1/block/abCD/7?x=1");
        assert_eq!(
            r.route(),
            Ok(Route::Block {
                path: BlockPath {
                    key: ChunkKey::from_bytes(&[0xab, 0xcd]).unwrap(),
                    index: 7
                },
                hop: Hop(2)
            })
        );
        assert_eq!(r.origin(), Some(&b"http://o/x"[..]));
        assert_eq!(r.origin_bytes().as_deref(), Some(&b"http://o/x"[..]));
        assert_eq!(r.node(), Some(&b"n1"[..]));
        assert_eq!(r.peer_addr(), Some(&b"a:1"[..]));
        assert_eq!(r.epoch(), Some(&b"9"[..]));
        assert!(r.keep_alive());
    }

    #[test]
    fn pipelined_requests_come_out_in_order_and_close_stops_decoding() {
        let (reqs, err) = decode_all(
            b"GET /peer/v1/block/01/1 HTTP/1.1\r\nHost: a\r\n\r\n\
              GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n\
              GET /peer/v1/block/01/3 HTTP/1.1\r\nHost: a\r\n\r\n",
        );
        assert_eq!(err, None);
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].path(), b"/peer/v1/block/01/1");
        assert_eq!(reqs[1].route(), Ok(Route::Roster));
        assert!(!reqs[1].keep_alive());
    }

    #[test]
    fn http10_closes_unless_keep_alive() {
        let (reqs, _) = decode_all(b"GET /peer/v1/roster HTTP/1.0\r\n\r\n");
        assert_eq!(reqs[0].version(), Version::Http10);
        assert!(!reqs[0].keep_alive());
        let (reqs, _) = decode_all(
            b"GET /peer/v1/roster HTTP/1.0\r\nConnection: keep-alive\r\n\r\n\
              GET /peer/v1/roster HTTP/1.0\r\n\r\n",
        );
        assert_eq!(reqs.len(), 2);
        assert!(reqs[0].keep_alive());
    }

    #[test]
    fn route_rejections_map_to_statuses() {
        let cases: [(&[u8], Rejection); 6] = [
            (b"GET /nope HTTP/1.1\r\nHost: a\r\n\r\n", Rejection::UnknownPath),
            (b"POST /nope HTTP/1.1\r\nHost: a\r\n\r\n", Rejection::UnknownPath),
            (
                b"PUT /peer/v1/block/ab/1 HTTP/1.1\r\nHost: a\r\n\r\n",
                Rejection::MethodNotAllowed,
            ),
            (
                b"GET /peer/v1/block/abc/1 HTTP/1.1\r\nHost: a\r\n\r\n",
                Rejection::BadPath(PathError::OddKeyLength { digits: 3 }),
            ),
            (
                b"GET /peer/v1/block/ab/1 HTTP/1.1\r\nHost: a\r\nX-DART-Hop: -1\r\n\r\n",
                Rejection::BadHop(HopError::Signed),
            ),
            (
                b"GET /peer/v1/block/ab/1 HTTP/1.1\r\nHost: a\r\nX-DART-Hop: 1\r\nX-DART-Hop: 1\r\n\r\n",
                Rejection::BadHop(HopError::Duplicate),
            ),
        ];
        for (input, want) in cases {
            let (reqs, err) = decode_all(input);
            assert_eq!(err, None);
            assert_eq!(
                reqs[0].route(),
                Err(want),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
        assert_eq!(Rejection::UnknownPath.status(), Status::NotFound);
        assert_eq!(
            Rejection::MethodNotAllowed.status(),
            Status::MethodNotAllowed
        );
        assert_eq!(
            Rejection::BadHop(HopError::Empty).status(),
            Status::BadRequest
        );
    }

    #[test]
    fn head_over_bound_is_431_even_when_split() {
        let mut big = b"GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\nX-Pad: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_REQUEST_HEAD_BYTES));
        big.extend_from_slice(b"\r\n\r\n");
        let (_, err) = decode_all(&big[..REQUEST_BUFFER_BYTES.min(big.len())]);
        assert_eq!(
            err,
            Some(RequestError::HeadTooLarge {
                limit: MAX_REQUEST_HEAD_BYTES
            })
        );
        assert_eq!(err.unwrap().status(), Status::HeaderFieldsTooLarge);
    }

    #[test]
    fn errors_are_sticky_and_input_after_is_discarded() {
        let mut d = RequestDecoder::new();
        d.feed(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
        assert_eq!(d.decode().unwrap_err(), RequestError::DuplicateHost);
        assert_eq!(d.decode().unwrap_err(), RequestError::DuplicateHost);
        assert!(d.is_closed());
        assert_eq!(d.feed(b"more"), 4);
    }

    #[test]
    fn version_errors_distinguish_505_from_malformed_lines() {
        let (_, err) = decode_all(b"GET / HTTP/2.0\r\n\r\n");
        assert_eq!(err, Some(RequestError::UnsupportedVersion));
        let (_, err) = decode_all(b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(err, Some(RequestError::MalformedRequestLine));
    }
}
