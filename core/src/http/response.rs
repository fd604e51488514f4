//! Client-side response decoding.

use core::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};

use super::chunked::ChunkedDecoder;
use super::error::{ChunkedError, LengthError, ResponseError, UsageError};
use super::recv::RecvBuf;
use super::{
    connection_options, has_bare_lf, open_head, parse_content_length, HeadOpening, Span, Version,
    MAX_ERROR_BODY_BYTES, MAX_INFORMATIONAL_RESPONSES, MAX_RESPONSE_HEADERS,
    MAX_RESPONSE_HEAD_BYTES, READ_WINDOW_BYTES, RESPONSE_BUFFER_BYTES,
};
use crate::time::Duration;

/// How long the body of the next `200` response may be, chosen by the caller per request.
///
/// Non-`200` responses are always bounded by [`MAX_ERROR_BODY_BYTES`] instead: the limit
/// describes the block, not error text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLimit {
    /// The body must be exactly this long (a validated whole-block read). Longer and
    /// shorter bodies are [`LengthError`]s; a `Content-Length` above or below it is refused
    /// at the head, before any body byte is read, and at most `expected + 1` body bytes
    /// are ever read.
    Exact(u64),
    /// The body may be at most this long (roster fetches, unvalidated reads).
    AtMost(u64),
}

impl BodyLimit {
    /// The largest acceptable body.
    pub const fn max(self) -> u64 {
        match self {
            BodyLimit::Exact(n) | BodyLimit::AtMost(n) => n,
        }
    }
}

/// How a response's body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body: `204`, `304`.
    Empty,
    /// `Content-Length: n`.
    ContentLength(u64),
    /// `Transfer-Encoding: chunked` (older peers).
    Chunked,
    /// Neither: the body runs until the peer closes; the connection cannot be reused.
    UntilClose,
}

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

/// What [`ResponseDecoder::poll`] produces: each response yields `Head` then exactly one
/// `Body` (possibly empty).
#[derive(Clone, Debug)]
pub enum ResponseEvent {
    /// The final response head arrived (interim `1xx` heads are skipped). Clients stop
    /// their response-header timer here.
    Head(ResponseHead),
    /// The complete body, length-validated against the [`BodyLimit`].
    Body(Bytes),
}

#[derive(Clone, Debug)]
enum State {
    /// No response expected.
    Idle,
    /// Reading a head.
    Head {
        limit: BodyLimit,
        interim: u32,
        /// The status whose body `limit` bounds (every other status's body is error text).
        success: u16,
        /// Emit every head whose status is not `success` before checking its framing
        /// against the error-body bound (a framing error then follows on the next poll).
        head_first: bool,
    },
    /// Reading a `Content-Length` body.
    Length {
        len: u64,
        limit: BodyLimit,
        keep_alive: bool,
    },
    /// Reading a chunked body.
    Chunked {
        decoder: ChunkedDecoder,
        body: BytesMut,
        limit: BodyLimit,
        keep_alive: bool,
    },
    /// Reading until the peer closes.
    UntilClose {
        limit: BodyLimit,
    },
    Closed,
    Failed(ResponseError),
}

/// Incremental client-side response decoder for one connection.
///
/// Driving contract: before each request's response, call [`expect`](Self::expect) with
/// that request's [`BodyLimit`]. Then [`feed`](Self::feed) received bytes (it takes what
/// fits, keep the rest), [`handle_eof`](Self::handle_eof) when the peer closes, and call
/// [`poll`](Self::poll) until it returns `Ok(None)`. Bytes arriving while no response is
/// expected are an error ([`ResponseError::Unsolicited`]). After an error, `poll` returns
/// it forever: close the connection. Any split of the input yields the same events.
#[derive(Debug)]
pub struct ResponseDecoder {
    buf: RecvBuf,
    state: State,
    eof: bool,
    consumed: u64,
}

impl Default for ResponseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

/// Most body bytes reserved up front from a `Content-Length`: reserving the whole
/// advertised length would let a peer make us allocate the full limit before sending a
/// byte; beyond this the buffer grows as data arrives.
const MAX_BODY_PRERESERVE: u64 = 1024 * 1024;

impl ResponseDecoder {
    /// An idle decoder with its head buffer allocated.
    pub fn new() -> Self {
        ResponseDecoder {
            buf: RecvBuf::with_capacity(RESPONSE_BUFFER_BYTES),
            state: State::Idle,
            eof: false,
            consumed: 0,
        }
    }

    /// Starts reading the response to a request just sent, bounded by `limit`.
    pub fn expect(&mut self, limit: BodyLimit) -> Result<(), UsageError> {
        match self.state {
            State::Idle if !self.eof => {
                self.state = State::Head {
                    limit,
                    interim: 0,
                    success: 200,
                    head_first: false,
                };
                Ok(())
            }
            State::Idle | State::Closed | State::Failed(_) => Err(UsageError::Closed),
            _ => Err(UsageError::ResponseInProgress),
        }
    }

    /// Like [`expect`](Self::expect), for a request whose success is `success` (a `206`
    /// to a `Range` request): `limit` bounds that status's body, and every other final
    /// head is handed out as [`ResponseEvent::Head`] *before* its framing is checked
    /// against [`MAX_ERROR_BODY_BYTES`], so the caller can classify it by its status (a
    /// `200` that ignored `Range` and announces a whole object) and close the connection
    /// without reading its body. A framing error of such a response is returned by the
    /// next [`poll`](Self::poll).
    pub fn expect_status(&mut self, limit: BodyLimit, success: u16) -> Result<(), UsageError> {
        self.expect(limit)?;
        self.state = State::Head {
            limit,
            interim: 0,
            success,
            head_first: true,
        };
        Ok(())
    }

    /// True when no response is in progress and the connection may carry a request.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle) && !self.eof && self.buf.is_empty()
    }

    /// True once the connection cannot carry another response (close, end, error).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed | State::Failed(_))
    }

    /// Bytes buffered and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Stream bytes decoded so far (heads, body framing and data). With
    /// [`buffered`](Self::buffered) and whatever `feed` discarded after close, it accounts
    /// for every byte fed.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// How many more bytes [`feed`](Self::feed) would accept now.
    pub fn room(&self) -> usize {
        let cap = match &self.state {
            State::Idle | State::Head { .. } | State::Chunked { .. } => RESPONSE_BUFFER_BYTES,
            State::Length { len, .. } => {
                RESPONSE_BUFFER_BYTES.max(usize::try_from(*len).unwrap_or(usize::MAX))
            }
            // limit + 1: one byte past the limit proves the body too long.
            State::UntilClose { limit } => {
                usize::try_from(limit.max().saturating_add(1)).unwrap_or(usize::MAX)
            }
            State::Closed | State::Failed(_) => return usize::MAX,
        };
        cap.saturating_sub(self.buf.len())
    }

    /// Buffers as much of `data` as fits and returns how many bytes were taken. Once
    /// closed or failed, input is discarded (reported as taken).
    pub fn feed(&mut self, data: &[u8]) -> usize {
        if self.is_closed() {
            return data.len();
        }
        let take = data.len().min(self.room());
        self.buf.extend(&data[..take]);
        take
    }

    /// A window to read received bytes into directly, instead of reading into a buffer of
    /// the driver's own and copying them in with [`feed`](Self::feed): at most
    /// [`room`](Self::room) and [`READ_WINDOW_BYTES`] bytes, initialised (zeroed the
    /// first time; the decoder reuses it afterwards). Write received bytes at its start,
    /// then call [`advance`](Self::advance) with their count. Empty when no byte can be
    /// taken now: [`poll`](Self::poll) first. Once closed or failed the bytes read are
    /// discarded, and the window keeps the buffer within [`RESPONSE_BUFFER_BYTES`].
    pub fn read_buf(&mut self) -> &mut [u8] {
        let want = if self.is_closed() {
            // Bytes read now are only discarded: lend a window that keeps the buffer
            // within RESPONSE_BUFFER_BYTES (one byte at least, so a read can still report
            // the peer's end of stream) instead of growing it for nothing.
            RESPONSE_BUFFER_BYTES
                .saturating_sub(self.buf.len())
                .clamp(1, READ_WINDOW_BYTES)
        } else {
            self.room().min(READ_WINDOW_BYTES)
        };
        self.buf.read_buf(want)
    }

    /// `n` bytes were written at the start of the last [`read_buf`](Self::read_buf)
    /// window: they count as fed (at most that window's length is taken). Returns how many
    /// were taken. Once closed or failed they are discarded (reported as taken), as
    /// [`feed`](Self::feed) discards.
    pub fn advance(&mut self, n: usize) -> usize {
        if self.is_closed() {
            self.buf.discard_lent();
            return n;
        }
        self.buf.commit(n)
    }

    /// The peer closed its sending side: completes a close-delimited body, and makes an
    /// incomplete message [`ResponseError::Truncated`].
    pub fn handle_eof(&mut self) {
        self.eof = true;
    }

    /// The next event, if the buffered bytes complete one.
    pub fn poll(&mut self) -> Result<Option<ResponseEvent>, ResponseError> {
        match self.poll_inner() {
            Err(e) => {
                self.state = State::Failed(e);
                Err(e)
            }
            ok => ok,
        }
    }

    fn poll_inner(&mut self) -> Result<Option<ResponseEvent>, ResponseError> {
        loop {
            match &mut self.state {
                State::Failed(e) => return Err(*e),
                State::Closed => return Ok(None),
                State::Idle => {
                    if !self.buf.is_empty() {
                        return Err(ResponseError::Unsolicited);
                    }
                    if self.eof {
                        self.state = State::Closed;
                    }
                    return Ok(None);
                }
                State::Head {
                    limit,
                    interim,
                    success,
                    head_first,
                } => {
                    let (limit, interim) = (*limit, *interim);
                    let (success, head_first) = (*success, *head_first);
                    match self.parse_head(limit, interim, success, head_first)? {
                        HeadOutcome::Partial => return Ok(None),
                        HeadOutcome::Interim => continue,
                        HeadOutcome::Final(head) => return Ok(Some(ResponseEvent::Head(head))),
                    }
                }
                State::Length {
                    len,
                    limit,
                    keep_alive,
                } => {
                    let (len, limit, keep_alive) = (*len, *limit, *keep_alive);
                    if (self.buf.len() as u64) < len {
                        if self.eof {
                            return Err(ResponseError::Truncated);
                        }
                        return Ok(None);
                    }
                    check_short(limit, len)?;
                    let body = self.buf.split_to(len as usize).freeze();
                    self.consumed += len;
                    self.finish(keep_alive);
                    return Ok(Some(ResponseEvent::Body(body)));
                }
                State::Chunked {
                    decoder,
                    body,
                    limit,
                    keep_alive,
                } => {
                    let progress = decoder.decode(self.buf.data(), body).map_err(|e| match e {
                        ChunkedError::ChunkExceedsLimit { .. } => {
                            ResponseError::Length(LengthError::Long { limit: limit.max() })
                        }
                        e => ResponseError::Chunked(e),
                    })?;
                    let _ = self.buf.split_to(progress.consumed);
                    self.consumed += progress.consumed as u64;
                    if !progress.done {
                        if self.eof {
                            return Err(ResponseError::Truncated);
                        }
                        return Ok(None);
                    }
                    let (limit, keep_alive) = (*limit, *keep_alive);
                    check_short(limit, decoder.received())?;
                    let body = body.split().freeze();
                    self.finish(keep_alive);
                    return Ok(Some(ResponseEvent::Body(body)));
                }
                State::UntilClose { limit } => {
                    let limit = *limit;
                    if self.buf.len() as u64 > limit.max() {
                        return Err(LengthError::Long { limit: limit.max() }.into());
                    }
                    if !self.eof {
                        return Ok(None);
                    }
                    check_short(limit, self.buf.len() as u64)?;
                    let body = self.buf.split_all().freeze();
                    self.consumed += body.len() as u64;
                    self.state = State::Closed;
                    return Ok(Some(ResponseEvent::Body(body)));
                }
            }
        }
    }

    fn finish(&mut self, keep_alive: bool) {
        self.state = if keep_alive {
            State::Idle
        } else {
            State::Closed
        };
    }

    fn parse_head(
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

enum HeadOutcome {
    Partial,
    Interim,
    Final(ResponseHead),
}

fn check_short(limit: BodyLimit, received: u64) -> Result<(), LengthError> {
    match limit {
        BodyLimit::Exact(expected) if received < expected => {
            Err(LengthError::Short { expected, received })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        limit: BodyLimit,
        input: &[u8],
        eof: bool,
    ) -> Result<(ResponseHead, Bytes), ResponseError> {
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
        let closed =
            after(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
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
        let head = |extra: &str| {
            format!("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n{extra}\r\n").into_bytes()
        };
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
        d.feed(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n",
        );
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
}
