//! Server-side request decoding.

use core::mem::MaybeUninit;

use bytes::Bytes;

use super::error::RequestError;
use super::recv::RecvBuf;
use super::{
    connection_options, has_bare_lf, open_head, parse_content_length, HeadOpening, Span, Version,
    MAX_REQUEST_HEADERS, MAX_REQUEST_HEAD_BYTES, REQUEST_BUFFER_BYTES,
};
use crate::wire::{self, BlockPath, ChunkKey, Hop, HopError, PathError, Status};

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

/// One decoded request head, generic over where its bytes live.
///
/// `H` is [`Bytes`] for a request from [`RequestDecoder::decode`]: the head is split off the
/// decoder's buffer, so the request owns it and can outlive the decoder's next call. `H` is
/// `&[u8]` for a [`RequestRef`] from [`RequestDecoder::decode_slice`]: the head is the
/// caller's own input, borrowed, never copied. Either way the decoded fields are offsets
/// into the head plus the route, so a request is small and cheap to move.
#[derive(Clone, Debug)]
pub struct Request<H = Bytes> {
    head: H,
    decoded: Decoded,
}

/// A request decoded straight from the caller's input by
/// [`RequestDecoder::decode_slice`]: the head is borrowed, nothing was copied.
pub type RequestRef<'a> = Request<&'a [u8]>;

/// Everything a head decodes to except the head's bytes: offsets, counts and flags, no
/// copies (the route, chunk key included, is decoded from the head when asked for).
#[derive(Clone, Copy, Debug)]
struct Decoded {
    target: Place,
    /// The path is the target up to here (the target without its query).
    path_end: u16,
    origin: Option<Place>,
    node: Option<Place>,
    peer_addr: Option<Place>,
    record: Option<Place>,
    epoch: Option<Place>,
    hop: Option<Place>,
    hop_count: u8,
    origin_count: u8,
    method: Method,
    version: Version,
    keep_alive: bool,
}

/// Where a part of a request head lies in it. Two `u16`s (a head is at most
/// [`MAX_REQUEST_HEAD_BYTES`]) keep [`Decoded`] small: it is moved with every request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    start: u16,
    end: u16,
}

const _: () = assert!(MAX_REQUEST_HEAD_BYTES <= u16::MAX as usize);

impl Place {
    /// The place of `part` inside `head`; `part` must be a subslice of `head`.
    #[inline(always)]
    fn of(head: &[u8], part: &[u8]) -> Place {
        let start = Span::of(head, part).start as usize;
        Place {
            start: start as u16,
            end: (start + part.len()) as u16,
        }
    }

    #[inline(always)]
    fn range(self) -> core::ops::Range<usize> {
        usize::from(self.start)..usize::from(self.end)
    }

    #[inline(always)]
    fn get(self, head: &[u8]) -> &[u8] {
        &head[self.range()]
    }
}

impl<H: AsRef<[u8]>> Request<H> {
    /// The method.
    pub fn method(&self) -> Method {
        self.decoded.method
    }

    /// The HTTP version of the request line.
    pub fn version(&self) -> Version {
        self.decoded.version
    }

    /// Whether the connection stays open after the answer: HTTP/1.1 unless
    /// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`.
    pub fn keep_alive(&self) -> bool {
        self.decoded.keep_alive
    }

    /// The full request target (path and query), as sent.
    pub fn target(&self) -> &[u8] {
        self.decoded.target.get(self.head.as_ref())
    }

    /// The target's path: everything before `?`. Routes are matched on this only.
    pub fn path(&self) -> &[u8] {
        let start = usize::from(self.decoded.target.start);
        &self.head.as_ref()[start..usize::from(self.decoded.path_end)]
    }

    /// What the request asks for, or why it is not served (and with which status).
    ///
    /// Order of checks: unknown path (404), method (405), block path syntax (400),
    /// duplicate `X-DART-Origin` (400), hop (400).
    ///
    /// Computed from the head on each call (the chunk key is decoded then, into the
    /// returned value, rather than copied along with the request): tens of nanoseconds,
    /// so call it once per request.
    #[inline(always)] // see `RequestDecoder::decode`
    pub fn route(&self) -> Result<Route, Rejection> {
        let d = &self.decoded;
        route(
            d.method,
            self.path(),
            d.hop.map(|s| s.get(self.head.as_ref())),
            d.hop_count,
            d.origin_count,
        )
    }

    /// `X-DART-Origin`, if present: the upstream URL a relay may fetch from.
    pub fn origin(&self) -> Option<&[u8]> {
        self.decoded.origin.map(|s| s.get(self.head.as_ref()))
    }

    /// `X-DART-Node`: the caller's node ID (roster requests identify the caller).
    pub fn node(&self) -> Option<&[u8]> {
        self.decoded.node.map(|s| s.get(self.head.as_ref()))
    }

    /// `X-DART-Peer-Addr`: the caller's advertised listen address.
    pub fn peer_addr(&self) -> Option<&[u8]> {
        self.decoded.peer_addr.map(|s| s.get(self.head.as_ref()))
    }

    /// `X-Peerblock-Record`: the caller's signed member record, raw (see
    /// `roster::Attestation::from_header`).
    pub fn record(&self) -> Option<&[u8]> {
        self.decoded.record.map(|s| s.get(self.head.as_ref()))
    }

    /// `X-DART-Epoch`, raw (see [`wire::parse_epoch`]).
    pub fn epoch(&self) -> Option<&[u8]> {
        self.decoded.epoch.map(|s| s.get(self.head.as_ref()))
    }

    /// Bytes of input this request took: its head, request line through the final empty
    /// line (including any empty lines skipped before the request line).
    pub fn head_len(&self) -> usize {
        self.head.as_ref().len()
    }
}

impl Request<Bytes> {
    /// `X-DART-Origin` as a zero-copy [`Bytes`] slice of the head.
    pub fn origin_bytes(&self) -> Option<Bytes> {
        self.decoded.origin.map(|s| self.head.slice(s.range()))
    }

    /// The raw head bytes, request line through the final empty line.
    pub fn head(&self) -> &Bytes {
        &self.head
    }
}

impl<'a> Request<&'a [u8]> {
    /// The raw head bytes, request line through the final empty line: the first
    /// [`head_len`](Self::head_len) bytes of the input given to
    /// [`RequestDecoder::decode_slice`].
    pub fn head(&self) -> &'a [u8] {
        self.head
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
///
/// Zero-copy fast path: before feeding received bytes, a driver may call
/// [`decode_slice`](Self::decode_slice) on them. While nothing is buffered and the input
/// starts with a complete head, it decodes that request straight from the input (a
/// [`RequestRef`] borrowing it); the driver skips [`head_len`](Request::head_len) bytes
/// and calls it again. When it returns `Ok(None)` the driver feeds the rest as usual.
/// Mixing the two paths yields exactly the requests and errors that `feed` + `decode`
/// alone would.
#[derive(Debug)]
pub struct RequestDecoder {
    buf: RecvBuf,
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
            buf: RecvBuf::with_capacity(REQUEST_BUFFER_BYTES),
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
        self.buf.extend(&data[..take]);
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

    /// A window to read received bytes into directly instead of copying them in with
    /// [`feed`](Self::feed): at most [`room`](Self::room) bytes, initialised (zeroed the
    /// first time, reused afterwards). Write received bytes at its start, then call
    /// [`advance`](Self::advance) with their count. Empty when no byte can be taken now:
    /// [`decode`](Self::decode) first.
    pub fn read_buf(&mut self) -> &mut [u8] {
        let want = self.room();
        self.buf.read_buf(want)
    }

    /// `n` bytes were written at the start of the last [`read_buf`](Self::read_buf)
    /// window: they count as fed (at most that window's length is taken). Returns how many
    /// were taken. Once closed or failed they are discarded (reported as taken), as
    /// [`feed`](Self::feed) discards.
    pub fn advance(&mut self, n: usize) -> usize {
        if self.state != State::Open {
            self.buf.discard_lent();
            return n;
        }
        self.buf.commit(n)
    }

    /// Decodes the next complete request, if one is buffered.
    // Inlined (like `decode_slice` and `Request::route`) so the decoded request is built
    // where the caller keeps it, mostly in registers: returned through memory, its small
    // field stores were read back by wide copies and stalled on store forwarding
    // (docs/benchmarks.md has the figures).
    #[inline(always)]
    pub fn decode(&mut self) -> Result<Option<Request>, RequestError> {
        match self.state {
            State::Open if !self.buf.is_empty() => {}
            State::Open | State::Closed => return Ok(None),
            State::Failed(e) => return Err(e),
        }
        let outcome = parse(window(self.buf.data()));
        Ok(self.settle(outcome)?.map(|(head_len, decoded)| Request {
            head: self.buf.split_to(head_len).freeze(),
            decoded,
        }))
    }

    /// Decodes the next request straight from `input`, without copying it, when nothing
    /// is buffered and `input` starts with a complete head. The request borrows `input`;
    /// its [`head_len`](Request::head_len) bytes are consumed, the rest is the caller's.
    ///
    /// `Ok(None)` means "feed instead": bytes are already buffered (they come first), the
    /// head in `input` is incomplete, or the decoder is closed. Errors are exactly those
    /// `feed` + [`decode`](Self::decode) would report for the same bytes, and sticky.
    #[inline(always)] // see `decode`
    pub fn decode_slice<'a>(
        &mut self,
        input: &'a [u8],
    ) -> Result<Option<RequestRef<'a>>, RequestError> {
        match self.state {
            State::Open if self.buf.is_empty() && !input.is_empty() => {}
            State::Open | State::Closed => return Ok(None),
            State::Failed(e) => return Err(e),
        }
        Ok(self
            .settle(parse(window(input)))?
            .map(|(head_len, decoded)| Request {
                head: &input[..head_len],
                decoded,
            }))
    }

    /// Moves the state on after a parse: closed after a request that does not keep the
    /// connection alive, failed (for good) after an error.
    #[inline(always)]
    fn settle(
        &mut self,
        outcome: Result<Option<(usize, Decoded)>, RequestError>,
    ) -> Result<Option<(usize, Decoded)>, RequestError> {
        match &outcome {
            Ok(Some((_, decoded))) if !decoded.keep_alive => self.state = State::Closed,
            Err(e) => self.state = State::Failed(*e),
            Ok(_) => {}
        }
        outcome
    }
}

/// The part of `input` a head must lie in: its first [`MAX_REQUEST_HEAD_BYTES`]. The
/// outcome then depends on those bytes alone, whatever else follows, which keeps decoding
/// split-invariant.
#[inline(always)]
fn window(input: &[u8]) -> &[u8] {
    &input[..input.len().min(MAX_REQUEST_HEAD_BYTES)]
}

/// Parses and validates one request head at the start of `window`: `Ok(None)` if it is
/// incomplete, else its length and everything decoded from it.
///
/// httparse tokenises; every rule it does not enforce is checked here, in one pass over
/// the fields. Errors keep a fixed precedence (request line, line endings, version,
/// target, then the first bad field, then `Host`) so the error never depends on the
/// order of checks inside the pass.
#[inline(always)]
fn parse(window: &[u8]) -> Result<Option<(usize, Decoded)>, RequestError> {
    let mut headers =
        [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_REQUEST_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        window,
        &mut headers,
    );
    let head_len = match open_head(parsed, window.len(), MAX_REQUEST_HEAD_BYTES) {
        HeadOpening::Complete(n) => n,
        HeadOpening::Partial => return Ok(None),
        HeadOpening::TooLarge => {
            return Err(RequestError::HeadTooLarge {
                limit: MAX_REQUEST_HEAD_BYTES,
            })
        }
        HeadOpening::Invalid(httparse::Error::Version) if !names_a_version(window) => {
            return Err(RequestError::MalformedRequestLine)
        }
        HeadOpening::Invalid(e) => return Err(map_parse_error(e)),
    };
    let head = &window[..head_len];
    let method = req
        .method
        .ok_or(RequestError::MalformedRequestLine)?
        .as_bytes();

    // Line endings (RFC 9112 §2.2: no bare LF) are checked only where httparse allows a
    // line to end: before the request line (skipped empty lines), before each field name,
    // and the final empty line. Same verdict as scanning every byte for an LF without a
    // CR before it (debug builds, and so the fuzzers, assert it), at a fraction of the cost.
    let start = Span::of(head, method).start as usize;
    let mut crlf = start % 2 == 0
        && head[..start].chunks_exact(2).all(|p| p == b"\r\n")
        && head.ends_with(b"\r\n\r\n");
    let mut fields = Fields::default();
    let mut field_error = None;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let at = Span::of(head, name).start as usize;
        crlf &= head[..at].ends_with(b"\r\n");
        if let Err(e) = fields.take(name, h.value) {
            field_error.get_or_insert(e);
        }
    }
    debug_assert_eq!(crlf, !has_bare_lf(head), "line-ending shortcut disagrees");
    if !crlf {
        return Err(RequestError::BareLineFeed);
    }
    let version = match req.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        _ => return Err(RequestError::UnsupportedVersion),
    };
    let method = if method == b"GET" {
        Method::Get
    } else {
        Method::Other
    };
    let target = req
        .path
        .ok_or(RequestError::MalformedRequestLine)?
        .as_bytes();
    // Origin-form only (RFC 9112 §3.2.1), visible ASCII, no fragment. httparse already
    // refused control bytes, space and DEL in the target (its URI byte class); what it
    // lets through and we refuse is non-ASCII and `#`.
    debug_assert!(target.iter().all(|&b| b > 0x20 && b != 0x7f));
    let (visible, query) = scan_target(target);
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
    if let Some(e) = field_error {
        return Err(e);
    }
    if version == Version::Http11 && !fields.host {
        return Err(RequestError::MissingHost);
    }
    let target_place = Place::of(head, target);
    let span = |v: &[u8]| Place::of(head, v);
    Ok(Some((
        head_len,
        Decoded {
            target: target_place,
            path_end: target_place.start + path.len() as u16,
            origin: fields.origin.map(span),
            node: fields.node.map(span),
            peer_addr: fields.peer_addr.map(span),
            record: fields.record.map(span),
            epoch: fields.epoch.map(span),
            hop: fields.hop.map(span),
            hop_count: fields.hop_count,
            origin_count: fields.origin_count,
            method,
            version,
            keep_alive: !fields.close && (version == Version::Http11 || fields.keep_alive),
        },
    )))
}

/// Is `target` free of non-ASCII bytes and `#`, and does it hold a `?`? (httparse has
/// already refused control bytes, space and DEL.) Runs
/// on every request, so it works in 16-byte blocks of independent lanes (vector
/// instructions), the last block overlapping the one before instead of a byte-wise tail.
#[inline(always)]
fn scan_target(target: &[u8]) -> (bool, bool) {
    #[inline(always)]
    fn block(bytes: &[u8; 16]) -> (bool, bool) {
        bytes.iter().fold((true, false), |(ok, q), &b| {
            (ok & (b < 0x80) & (b != b'#'), q | (b == b'?'))
        })
    }
    if target.len() < 16 {
        let mut padded = [b'/'; 16];
        padded[..target.len()].copy_from_slice(target);
        return block(&padded);
    }
    let (mut visible, mut query) = (true, false);
    let mut blocks = target.chunks_exact(16);
    for b in &mut blocks {
        let (v, q) = block(b.try_into().expect("16 bytes"));
        visible &= v;
        query |= q;
    }
    if !blocks.remainder().is_empty() {
        let last = &target[target.len() - 16..];
        let (v, q) = block(last.try_into().expect("16 bytes"));
        visible &= v;
        query |= q;
    }
    (visible, query)
}

#[inline(always)]
fn route(
    method: Method,
    path: &[u8],
    hop: Option<&[u8]>,
    hop_count: u8,
    origin_count: u8,
) -> Result<Route, Rejection> {
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
    let (key, index) = wire::split_block_path(path).map_err(Rejection::BadPath)?;
    if origin_count > 1 {
        return Err(Rejection::DuplicateOrigin);
    }
    let hop = if hop_count > 1 {
        Err(HopError::Duplicate)
    } else {
        wire::parse_hop(hop)
    }
    .map_err(Rejection::BadHop)?;
    // Built last, once every check has passed, so the key is decoded in place.
    Ok(Route::Block {
        path: BlockPath {
            key: ChunkKey::from_valid_hex(key),
            index,
        },
        hop,
    })
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
    record: Option<&'a [u8]>,
    epoch: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    #[inline(always)]
    fn take(&mut self, name: &[u8], value: &'a [u8]) -> Result<(), RequestError> {
        // Dispatch on length first: one comparison rules out most names, then a word
        // compare or two per candidate.
        match name.len() {
            4 if name_is(name, b"host") => {
                if self.host {
                    return Err(RequestError::DuplicateHost);
                }
                self.host = true;
            }
            10 if name_is(name, b"x-dart-hop") => {
                self.hop = Some(value);
                self.hop_count = self.hop_count.saturating_add(1);
            }
            10 if name_is(name, b"connection") => {
                let (close, keep_alive) = connection_options(value);
                self.close |= close;
                self.keep_alive |= keep_alive;
            }
            11 if name_is(name, b"x-dart-node") => self.node = Some(value),
            12 if name_is(name, b"x-dart-epoch") => self.epoch = Some(value),
            13 if name_is(name, b"x-dart-origin") => {
                self.origin = Some(value);
                self.origin_count = self.origin_count.saturating_add(1);
            }
            14 if name_is(name, b"content-length") => {
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
            16 if name_is(name, b"x-dart-peer-addr") => self.peer_addr = Some(value),
            18 if name_is(name, b"x-peerblock-record") => self.record = Some(value),
            17 if name_is(name, b"transfer-encoding") => {
                return Err(RequestError::TransferEncoding)
            }
            _ => {}
        }
        Ok(())
    }
}

/// Is `name` (a field name httparse accepted, of length `N`) the lower-case `lower`,
/// ignoring ASCII case? Compares whole words with bit 5 forced on instead of byte by
/// byte. Exact for these names: `lower` holds only letters and `-`, and the only other
/// byte that maps onto one of those under `| 0x20` is CR (onto `-`), which is not a token
/// character, so httparse never hands it over in a name.
#[inline(always)]
fn name_is<const N: usize>(name: &[u8], lower: &[u8; N]) -> bool {
    debug_assert_eq!(name.len(), N);
    debug_assert!(lower.iter().all(|&b| b.is_ascii_lowercase() || b == b'-'));
    if N < 8 {
        return name.eq_ignore_ascii_case(lower);
    }
    const FOLD: u64 = 0x2020_2020_2020_2020;
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    };
    // Words at 0, 8, ..., and one ending at N (overlapping the previous one).
    let mut same = true;
    let mut at = 0;
    loop {
        let a = at.min(N - 8);
        same &= word(name, a) | FOLD == word(lower, a);
        if a == N - 8 {
            return same;
        }
        at += 8;
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
              X-DART-Epoch: 9\r\nX-Peerblock-Record: rec\r\n\r\n",
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
        assert_eq!(r.record(), Some(&b"rec"[..]));
        assert!(r.keep_alive());
    }

    #[test]
    fn a_field_as_long_as_a_wire_header_but_named_otherwise_is_not_that_header() {
        // Each name has the length of one the decoder takes (host, connection,
        // x-dart-node, x-dart-epoch, x-dart-origin, content-length, x-dart-peer-addr,
        // transfer-encoding, x-peerblock-record), which it tells apart by length first.
        let (reqs, err) = decode_all(
            b"GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\nDate: b\r\n\
              X-Custom-A: close\r\nX-Other-Abc: n\r\nX-Other-Abcd: 1\r\n\
              X-Other-Abcde: http://o/\r\nAccept-Charset: 5\r\n\
              X-Other-Abcdefgh: a:1\r\nX-Other-Abcdefghi: chunked\r\n\
              X-Other-Abcdefghij: r\r\n\r\n",
        );
        assert_eq!(err, None);
        let r = &reqs[0];
        assert!(r.keep_alive(), "X-Custom-A is not Connection");
        assert_eq!(r.node(), None);
        assert_eq!(r.epoch(), None);
        assert_eq!(r.origin(), None);
        assert_eq!(r.peer_addr(), None);
        assert_eq!(r.record(), None);
    }

    #[test]
    fn a_target_with_two_question_marks_in_one_block_still_has_a_query() {
        assert_eq!(scan_target(b"/a?b?c"), (true, true));
        assert_eq!(scan_target(b"/peer/v1/roster?a?b?c"), (true, true));
        let (reqs, err) = decode_all(b"GET /peer/v1/roster?x=?y HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(err, None);
        assert_eq!(reqs[0].path(), b"/peer/v1/roster");
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
    fn decode_slice_borrows_complete_heads_and_leaves_partial_ones_to_feed() {
        let first = b"GET /peer/v1/block/ab/1 HTTP/1.1\r\nHost: a\r\nX-DART-Origin: o\r\n\r\n";
        let second = b"GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut input = first.to_vec();
        input.extend_from_slice(&second[..10]);
        let mut d = RequestDecoder::new();
        let r = d.decode_slice(&input).unwrap().unwrap();
        // Borrowed: the head is the caller's own bytes, not a copy.
        assert_eq!(r.head().as_ptr(), input.as_ptr());
        assert_eq!(r.head_len(), first.len());
        assert_eq!(r.origin(), Some(&b"o"[..]));
        assert_eq!(r.path(), b"/peer/v1/block/ab/1");
        let rest = &input[r.head_len()..];
        // An incomplete head: "feed instead".
        assert!(d.decode_slice(rest).unwrap().is_none());
        assert_eq!(d.feed(rest), rest.len());
        // Buffered bytes come first: decode_slice defers even to a complete head.
        assert!(d.decode_slice(second).unwrap().is_none());
        assert_eq!(d.feed(&second[10..]), second.len() - 10);
        assert_eq!(d.decode().unwrap().unwrap().route(), Ok(Route::Roster));
        assert!(d.decode().unwrap().is_none());
    }

    #[test]
    fn decode_slice_closes_and_fails_like_decode() {
        let mut d = RequestDecoder::new();
        let close = b"GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
        assert!(!d.decode_slice(close).unwrap().unwrap().keep_alive());
        assert!(d.is_closed());
        assert!(d.decode_slice(close).unwrap().is_none());
        assert_eq!(d.feed(close), close.len(), "closed: input discarded");

        let mut d = RequestDecoder::new();
        let bad = b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
        assert_eq!(
            d.decode_slice(bad).unwrap_err(),
            RequestError::DuplicateHost
        );
        assert_eq!(
            d.decode_slice(b"").unwrap_err(),
            RequestError::DuplicateHost
        );
        assert_eq!(d.decode().unwrap_err(), RequestError::DuplicateHost);

        let mut big = b"GET /peer/v1/roster HTTP/1.1\r\nX-Pad: ".to_vec();
        big.resize(MAX_REQUEST_HEAD_BYTES + 10, b'a');
        let mut d = RequestDecoder::new();
        assert_eq!(
            d.decode_slice(&big).unwrap_err(),
            RequestError::HeadTooLarge {
                limit: MAX_REQUEST_HEAD_BYTES
            }
        );
    }

    #[test]
    fn field_names_match_in_any_case_and_only_exactly() {
        for (name, want) in [
            (&b"X-DART-HOP"[..], true),
            (b"x-dart-hop", true),
            (b"X-dArT-hOp", true),
            (b"x_dart-hop", false),
            (b"x-dart-hoq", false),
            (b"y-dart-hop", false),
        ] {
            assert_eq!(name_is(name, b"x-dart-hop"), want, "{name:?}");
        }
        assert!(name_is(b"TRANSFER-encoding", b"transfer-encoding"));
        // Every byte counts, the ones between the overlapping words included.
        for at in 0..17 {
            let mut name = *b"transfer-encoding";
            name[at] = b'!';
            assert!(!name_is(&name, b"transfer-encoding"), "{at}");
        }
        assert!(!name_is(b"transfer_encoding", b"transfer-encoding"));
        assert!(name_is(b"HoSt", b"host"));
    }

    #[test]
    fn target_scan_checks_every_byte_whatever_the_length() {
        for len in 1..80 {
            let mut target = vec![b'a'; len];
            target[0] = b'/';
            assert_eq!(scan_target(&target), (true, false), "{len}");
            for at in 0..len {
                for (bad, query) in [(b'#', false), (0x80, false), (0xff, false)] {
                    let mut t = target.clone();
                    t[at] = bad;
                    assert_eq!(scan_target(&t), (false, query), "{len} {at} {bad}");
                }
                let mut t = target.clone();
                t[at] = b'?';
                assert_eq!(scan_target(&t), (true, true), "{len} {at}");
            }
        }
    }

    #[test]
    fn target_must_be_visible_ascii_without_fragment_whoever_checks_which_byte() {
        // Control bytes, space and DEL are httparse's to refuse, non-ASCII and `#` ours:
        // every one is refused, at any position of a long or short target.
        for target in [
            &b"/peer/v1/roster"[..],
            b"/peer/v1/block/abcd/1?x=0123456789abcdef",
        ] {
            for at in 1..target.len() {
                for bad in [0x00, 0x01, b'\t', 0x1f, b' ', 0x7f, 0x80, 0xc3, 0xff, b'#'] {
                    let mut t = target.to_vec();
                    t[at] = bad;
                    let req = [b"GET ".as_slice(), &t, b" HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
                    let (reqs, err) = decode_all(&req);
                    assert!(
                        reqs.is_empty() && err.is_some(),
                        "{bad:#x} at {at}: {err:?}"
                    );
                    if bad == b'#' {
                        assert_eq!(err, Some(RequestError::InvalidTarget));
                    }
                }
                // Non-ASCII that is valid UTF-8 gets past httparse (which wants a `str`);
                // it is ours to refuse.
                let t = [&target[..at], "\u{e9}".as_bytes(), &target[at..]].concat();
                let req = [b"GET ".as_slice(), &t, b" HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
                assert_eq!(
                    decode_all(&req).1,
                    Some(RequestError::InvalidTarget),
                    "at {at}"
                );
            }
        }
    }

    #[test]
    fn reading_into_read_buf_decodes_what_feed_decodes() {
        let input = b"GET /peer/v1/roster HTTP/1.1\r\nHost: s\r\n\r\nGET /x HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\nGET /after HTTP/1.1\r\n\r\n";
        let (fed, _) = decode_all(input);
        for step in [1, 7, 64, input.len()] {
            let mut d = RequestDecoder::new();
            let mut got = Vec::new();
            for chunk in input.chunks(step) {
                let window = d.read_buf();
                assert!(window.len() <= REQUEST_BUFFER_BYTES);
                window[..chunk.len()].copy_from_slice(chunk);
                assert_eq!(
                    d.advance(chunk.len()),
                    chunk.len(),
                    "closed: discarded as taken"
                );
                while let Ok(Some(r)) = d.decode() {
                    got.push(r);
                }
            }
            let paths = |v: &[Request]| v.iter().map(|r| r.target().to_vec()).collect::<Vec<_>>();
            assert_eq!(paths(&got), paths(&fed), "step {step}");
            assert_eq!(got.len(), 2, "nothing after the close request");
        }
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
