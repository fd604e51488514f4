//! Client-side response decoding.
//!
//! This file holds the decoder and its driving contract, the body limits and the events;
//! the response head and its parsing are in `head.rs`.

mod head;
#[cfg(test)]
mod tests;

pub use head::ResponseHead;

use bytes::{Bytes, BytesMut};

use super::chunked::ChunkedDecoder;
use super::error::{ChunkedError, LengthError, ResponseError, UsageError};
use super::recv::RecvBuf;
#[cfg(doc)]
use super::MAX_ERROR_BODY_BYTES;
use super::{READ_WINDOW_BYTES, RESPONSE_BUFFER_BYTES};

use head::HeadOutcome;

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
}

fn check_short(limit: BodyLimit, received: u64) -> Result<(), LengthError> {
    match limit {
        BodyLimit::Exact(expected) if received < expected => {
            Err(LengthError::Short { expected, received })
        }
        _ => Ok(()),
    }
}
