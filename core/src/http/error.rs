//! Codec errors. Decoding errors are always the remote peer's fault (its bytes were
//! wrong); [`EncodeError`] and [`UsageError`] are local misuse. Every request decoding
//! error names the status the server answers before closing the connection.

use crate::wire::Status;

/// What was wrong with a request's framing or head. The server answers
/// [`RequestError::status`] and then closes the connection: after a framing error the
/// byte stream cannot be trusted to delimit another request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The head is larger than [`super::MAX_REQUEST_HEAD_BYTES`].
    #[error("request head exceeds {limit} bytes")]
    HeadTooLarge {
        /// The bound that was exceeded.
        limit: usize,
    },
    /// The head has more than [`super::MAX_REQUEST_HEADERS`] fields.
    #[error("request has more than {limit} header fields")]
    TooManyHeaders {
        /// The bound that was exceeded.
        limit: usize,
    },
    /// The request line's method or target is not a valid token / target.
    #[error("malformed request line (method or target)")]
    MalformedRequestLine,
    /// The request line names a version other than HTTP/1.0 or HTTP/1.1.
    #[error("unsupported HTTP version in request line")]
    UnsupportedVersion,
    /// A field name is malformed: whitespace before the colon, obs-fold continuation
    /// line, empty name, or a byte that is not a token character.
    #[error("malformed header field name (or obs-fold, or whitespace before colon)")]
    MalformedHeaderName,
    /// A field value holds a bare CR, NUL or another control byte.
    #[error("header field value holds a control byte or bare CR")]
    MalformedHeaderValue,
    /// A line ends in something other than CRLF.
    #[error("malformed line ending in request head")]
    MalformedLineEnding,
    /// A line ends in a bare LF (RFC 9112 §2.2 allows tolerating it; we refuse).
    #[error("bare LF line ending in request head")]
    BareLineFeed,
    /// The target is not origin-form (`/path[?query]`) of visible ASCII: absolute-form,
    /// asterisk-form, a fragment, or non-ASCII bytes.
    #[error("request target is not an origin-form path of visible ASCII")]
    InvalidTarget,
    /// `Content-Length` is not a plain decimal number (sign, list, space, overflow).
    #[error("Content-Length is not a decimal integer")]
    InvalidContentLength,
    /// `Content-Length` appears more than once (identical or not).
    #[error("Content-Length appears more than once")]
    DuplicateContentLength,
    /// The request declares a body; requests in this protocol never carry one.
    #[error("request declares a {content_length}-byte body; requests carry none")]
    UnexpectedBody {
        /// The declared length.
        content_length: u64,
    },
    /// The request carries `Transfer-Encoding`; requests in this protocol never carry a
    /// body, and refusing it closes the door on CL.TE / TE.CL smuggling.
    #[error("request carries Transfer-Encoding")]
    TransferEncoding,
    /// An HTTP/1.1 request without `Host` (RFC 9112 §3.2).
    #[error("HTTP/1.1 request without Host")]
    MissingHost,
    /// `Host` appears more than once (RFC 9112 §3.2).
    #[error("Host appears more than once")]
    DuplicateHost,
}

impl RequestError {
    /// The status the server answers before closing.
    pub const fn status(self) -> Status {
        match self {
            RequestError::HeadTooLarge { .. } | RequestError::TooManyHeaders { .. } => {
                Status::HeaderFieldsTooLarge
            }
            RequestError::UnsupportedVersion => Status::HttpVersionNotSupported,
            _ => Status::BadRequest,
        }
    }
}

/// What was wrong with a response, as seen by the client. All are the peer's fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    /// The head is larger than [`super::MAX_RESPONSE_HEAD_BYTES`].
    #[error("response head exceeds {limit} bytes")]
    HeadTooLarge {
        /// The bound that was exceeded.
        limit: usize,
    },
    /// The head has more than [`super::MAX_RESPONSE_HEADERS`] fields.
    #[error("response has more than {limit} header fields")]
    TooManyHeaders {
        /// The bound that was exceeded.
        limit: usize,
    },
    /// The status line is malformed (version, code or reason).
    #[error("malformed status line")]
    MalformedStatusLine,
    /// A field name or value is malformed (obs-fold, whitespace before colon, control
    /// bytes, bare CR).
    #[error("malformed header field")]
    MalformedHeader,
    /// A line ends in a bare LF or something else than CRLF.
    #[error("malformed line ending in response head")]
    MalformedLineEnding,
    /// `Content-Length` is not a plain decimal number.
    #[error("Content-Length is not a decimal integer")]
    InvalidContentLength,
    /// `Content-Length` appears more than once.
    #[error("Content-Length appears more than once")]
    DuplicateContentLength,
    /// Both `Content-Length` and `Transfer-Encoding` are present (RFC 9112 §6.3 calls
    /// it a possible smuggling attempt).
    #[error("response carries both Content-Length and Transfer-Encoding")]
    ContentLengthAndTransferEncoding,
    /// `Transfer-Encoding` is anything other than exactly one `chunked` (we decode no
    /// other coding, and a chunked coding that is not final cannot delimit the body).
    #[error("unsupported Transfer-Encoding")]
    UnsupportedTransferEncoding,
    /// `Transfer-Encoding` on an HTTP/1.0 response (RFC 9112 §6.1: faulty framing).
    #[error("Transfer-Encoding on an HTTP/1.0 response")]
    TransferEncodingOnHttp10,
    /// A `101` or more than [`super::MAX_INFORMATIONAL_RESPONSES`] interim responses.
    #[error("unexpected informational response {status}")]
    UnexpectedInformational {
        /// The interim status.
        status: u16,
    },
    /// The body's length is wrong for what the caller expected.
    #[error(transparent)]
    Length(#[from] LengthError),
    /// The chunked body is malformed.
    #[error(transparent)]
    Chunked(#[from] ChunkedError),
    /// The connection ended before the message was complete.
    #[error("connection closed before the response was complete")]
    Truncated,
    /// Bytes arrived while no response was expected.
    #[error("peer sent bytes while no response was expected")]
    Unsolicited,
}

/// A body whose length is wrong for the caller's [`super::BodyLimit`]: the distinct
/// "length" error the client classifies as a protocol violation (never transport).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LengthError {
    /// `Content-Length` exceeds the limit; detected before any body byte is read.
    #[error("Content-Length {content_length} exceeds the expected {limit}")]
    ContentLengthAboveLimit {
        /// The limit (expected length, or the maximum).
        limit: u64,
        /// The advertised length.
        content_length: u64,
    },
    /// `Content-Length` is below the exact expected length; detected at the head, before
    /// any body byte is read (the body could never be the block).
    #[error("Content-Length {content_length} is below the expected {expected}")]
    ContentLengthBelowExpected {
        /// The exact expected length.
        expected: u64,
        /// The advertised length.
        content_length: u64,
    },
    /// The complete body (chunked or close-delimited, whose length the head does not
    /// say) is shorter than the exact expected length.
    #[error("body is {received} bytes, expected {expected}")]
    Short {
        /// The exact expected length.
        expected: u64,
        /// The complete body's length.
        received: u64,
    },
    /// The body ran past the limit (read at most limit + 1 bytes to know).
    #[error("body exceeds the expected {limit} bytes")]
    Long {
        /// The limit (expected length, or the maximum).
        limit: u64,
    },
}

/// What was wrong with a chunked body (RFC 9112 §7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    /// A chunk-size line has no hex digits (empty line or extension only).
    #[error("chunk-size line has no size")]
    MissingSize,
    /// A chunk size has more than [`super::MAX_CHUNK_SIZE_DIGITS`] digits.
    #[error("chunk size has too many digits (overflow)")]
    SizeOverflow,
    /// A chunk size exceeds the bytes the body may still hold.
    #[error("chunk of {size} bytes exceeds the {remaining} bytes the body may still hold")]
    ChunkExceedsLimit {
        /// The declared chunk size.
        size: u64,
        /// What the body limit still allows.
        remaining: u64,
    },
    /// A byte in the chunk-size line is not allowed there.
    #[error("invalid byte in chunk-size line")]
    InvalidSizeLine,
    /// Chunk extensions exceed [`super::MAX_CHUNK_EXTENSION_BYTES`].
    #[error("chunk extensions exceed the bound")]
    ExtensionTooLong,
    /// Chunk data is not followed by CRLF.
    #[error("chunk data not followed by CRLF")]
    MissingDataCrlf,
    /// A line ends in a bare LF or bare CR.
    #[error("bare CR or LF in chunked framing")]
    BareLineEnding,
    /// A trailer field is malformed (name, colon, value, obs-fold).
    #[error("malformed trailer field")]
    InvalidTrailer,
    /// The trailer section exceeds [`super::MAX_TRAILER_BYTES`].
    #[error("trailer section exceeds the bound")]
    TrailersTooLong,
}

/// A header value or argument a caller asked us to encode is unsafe to send. Local
/// misuse: nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The value of `field` holds CR, LF, NUL or another control byte, or leading or
    /// trailing whitespace.
    #[error("value for {field} holds control bytes or surrounding whitespace")]
    InvalidValue {
        /// The header field the value was for.
        field: &'static str,
    },
    /// The refusal reason is not an HTTP token.
    #[error("refusal reason is not an HTTP token")]
    InvalidRefusalReason,
    /// The upstream status is not a three-digit code.
    #[error("upstream status {0} is not a three-digit code")]
    InvalidUpstreamStatus(u16),
}

/// A decoder method was called in a state where it makes no sense. Local misuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// `expect` was called while a response is still being decoded.
    #[error("a response is already in progress")]
    ResponseInProgress,
    /// The connection is closed (by `Connection: close`, end of input or an error).
    #[error("the connection is closed")]
    Closed,
}
