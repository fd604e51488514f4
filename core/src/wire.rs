//! The peer wire form: paths, header names, hop values and status codes.
//!
//! peerblock speaks the plain HTTP/1.1 wire form of the reference block transport so that a
//! peer speaking that form interoperates byte for byte:
//!
//! ```text
//! GET /peer/v1/block/<chunk-key-hex>/<block-index>   X-DART-Origin, X-DART-Hop
//! GET /peer/v1/roster                                X-DART-Node, X-DART-Peer-Addr
//! ```
//!
//! This module holds the grammar of those pieces and nothing about framing (that is
//! [`crate::http`]). Every parser here is strict and allocation-free: it either returns a
//! typed value or an error naming what was wrong, and every error has exactly one HTTP
//! status the server answers with (see [`PathError::status`], [`HopError::status`] and the
//! table in `docs/wire.md`).
//!
//! # Accepted forms (decided here, documented in `docs/wire.md`)
//!
//! * **Chunk key**: base-16, an even number of digits between 2 and
//!   [`MAX_CHUNK_KEY_HEX_DIGITS`] (1 to 64 bytes). Upper- and lower-case digits are both
//!   accepted (Go's `hex.DecodeString`, used by the reference peers, accepts both, and the
//!   key is identified by its bytes, so the two spellings cannot name different blocks);
//!   [`BlockPath`]'s `Display` always writes lower case, the canonical form.
//! * **Block index**: a `u64` in decimal, 1 to 20 digits, no sign, no leading zeros except
//!   the single digit `0`. The canonical form is the only accepted form, so a block has
//!   exactly one path (caches and logs never see two names for one block); conforming
//!   peers format with `strconv.FormatUint`, which never pads.
//! * **Hop**: absent means 0; otherwise one or more ASCII digits (leading zeros allowed,
//!   they do not change the value) whose value fits in a `u32`. Empty, signed (`+1`,
//!   `-0`), non-digit and overflowing values are errors.
//! * **Epoch** ([`parse_epoch`]): 1 to [`MAX_EPOCH_DIGITS`] ASCII digits (leading zeros
//!   allowed) whose value fits in a `u64`. The `X-DART-Epoch` header is decoded but no
//!   machine acts on it (the reference defines it and does not exchange it yet); the
//!   roster's epoch travels in its JSON body and is read by
//!   [`roster::parse_roster_epoch`](crate::roster::parse_roster_epoch), which uses this
//!   grammar and also reads Go's empty string as "no epoch".
//! * **Load** ([`parse_load`]): 1 to [`MAX_LOAD_DIGITS`] ASCII digits whose value fits in a
//!   `u32`; anything else is no hint (a hint, not a protocol field: never an error).

use core::fmt;

/// The prefix of every block path; the chunk key follows directly.
pub const BLOCK_PATH_PREFIX: &str = "/peer/v1/block/";

/// The roster (membership exchange) path.
pub const ROSTER_PATH: &str = "/peer/v1/roster";

/// Most hex digits a chunk key may have: 128 digits, 64 bytes.
///
/// Chunk keys are content hashes; 32 bytes (SHA-256, BLAKE3) is the usual size and 64 bytes
/// leaves room for 512-bit digests. The bound lets [`ChunkKey`] live inline (no heap), and
/// keeps a hostile path from costing more than a fixed amount to parse.
pub const MAX_CHUNK_KEY_HEX_DIGITS: usize = 128;

/// Most bytes a chunk key may have (half of [`MAX_CHUNK_KEY_HEX_DIGITS`]).
pub const MAX_CHUNK_KEY_BYTES: usize = MAX_CHUNK_KEY_HEX_DIGITS / 2;

/// Most decimal digits of a block index: `u64::MAX` has 20.
pub const MAX_BLOCK_INDEX_DIGITS: usize = 20;

/// Most decimal digits of an epoch: `u64::MAX` has 20 (a longer value is rejected before
/// any arithmetic, padded or not).
pub const MAX_EPOCH_DIGITS: usize = 20;

/// Most decimal digits of an `X-Peerblock-Load` value: `u32::MAX` has 10.
pub const MAX_LOAD_DIGITS: usize = 10;

/// Header names of the wire form. HTTP field names are case-insensitive; these are the
/// spellings we emit, and decoders compare ignoring ASCII case.
pub mod header {
    /// The requester's upstream URL; present, it lets a relay-capable source fetch a block
    /// it does not hold on the requester's behalf.
    pub const ORIGIN: &str = "X-DART-Origin";
    /// Relay depth (absent = 0). Bounds relay recursion; see [`super::parse_hop`].
    pub const HOP: &str = "X-DART-Hop";
    /// The responder's node ID, echoed on every response, and the caller's ID on a roster
    /// request. Liveness is credited to this ID, never to a dialed address.
    pub const NODE: &str = "X-DART-Node";
    /// On a `502`, the status the relay's origin answered: the origin refused the
    /// requester's credential, so the relay is not at fault.
    pub const UPSTREAM_STATUS: &str = "X-DART-Upstream-Status";
    /// The caller's advertised listen address on a roster request (the connection's source
    /// port is ephemeral, so it cannot be derived).
    pub const PEER_ADDR: &str = "X-DART-Peer-Addr";
    /// Caller → server on roster requests: the caller's signed member record
    /// (`<seq> <weight> <key hex> <sig hex>`, see `roster::record`). Ours: a reference
    /// peer neither sends nor reads it.
    pub const RECORD: &str = "X-Peerblock-Record";
    /// Membership epoch, a decimal `u64` carried as text ([`super::parse_epoch`]).
    /// Defined by the reference, which does not exchange it yet; core decodes it on a
    /// request ([`Request::epoch`](crate::http::Request::epoch), raw) and can
    /// write it on one, but no machine acts on it. The roster carries its own epoch in
    /// the JSON body.
    pub const EPOCH: &str = "X-DART-Epoch";
    /// peerblock's explicit refusal: a full node answers `503` with this header (its value
    /// is a reason token, e.g. `sessions`) and `Retry-After`, then closes. The client
    /// classifies the exchange as Refused: the peer is alive and is only skipped for the
    /// refusal cooldown. A plain `503` without it is an ordinary failure.
    pub const REFUSED: &str = "X-Peerblock-Refused";
    /// Seconds until a refused request may be retried (RFC 9110 §10.2.3).
    pub const RETRY_AFTER: &str = "Retry-After";
    /// peerblock's advertised load, on every block response (`200`, `404`, the `503`
    /// refusal): the node's admitted requests in progress when the head was written (an
    /// admitted request counts itself), as a decimal. Clients keep it per peer
    /// ([`LoadTable`](crate::load::LoadTable)) so load-aware spreading sees what other
    /// clients are doing to a holder. Absent or malformed, it is simply unknown.
    pub const LOAD: &str = "X-Peerblock-Load";
    /// peerblock's reason for a `404` that is not a plain miss: the holder had the block
    /// but its stored copy failed verification (value [`super::MISS_CORRUPT`]) and was
    /// quarantined. A reader learns that the block exists and that this holder has no
    /// valid copy: it asks another holder and never counts the answer as absence.
    pub const MISS: &str = "X-Peerblock-Miss";
}

/// The value of [`header::MISS`] for a quarantined copy: the holder's stored bytes failed
/// their hash, so it answers `404` rather than serve them.
pub const MISS_CORRUPT: &str = "corrupt";

/// The statuses a peer answers with. Closed set: the server never invents others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// `200`: the complete block (or roster) follows, with an explicit `Content-Length`.
    Ok,
    /// `400`: malformed path, invalid hop, or a request whose framing we refuse.
    BadRequest,
    /// `404`: unknown path, or the peer cannot provide the block.
    NotFound,
    /// `405`: any method other than `GET`.
    MethodNotAllowed,
    /// `431`: the request head is larger than the server accepts.
    HeaderFieldsTooLarge,
    /// `500`: the block source failed.
    InternalServerError,
    /// `502`: a relay's origin refused the requester's credential (with
    /// [`header::UPSTREAM_STATUS`]).
    BadGateway,
    /// `503`: the node is full and refuses explicitly (with [`header::REFUSED`] and
    /// `Retry-After`).
    ServiceUnavailable,
    /// `505`: the request line names an HTTP version other than 1.0 or 1.1.
    HttpVersionNotSupported,
}

impl Status {
    /// The numeric status code.
    pub const fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::HeaderFieldsTooLarge => 431,
            Status::InternalServerError => 500,
            Status::BadGateway => 502,
            Status::ServiceUnavailable => 503,
            Status::HttpVersionNotSupported => 505,
        }
    }

    /// The reason phrase we send (informational only; peers must not parse it).
    pub const fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "Bad Request",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::HeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::InternalServerError => "Internal Server Error",
            Status::BadGateway => "Bad Gateway",
            Status::ServiceUnavailable => "Service Unavailable",
            Status::HttpVersionNotSupported => "HTTP Version Not Supported",
        }
    }

    /// The status with numeric code `code`, if it is one of ours.
    pub const fn from_code(code: u16) -> Option<Status> {
        Some(match code {
            200 => Status::Ok,
            400 => Status::BadRequest,
            404 => Status::NotFound,
            405 => Status::MethodNotAllowed,
            431 => Status::HeaderFieldsTooLarge,
            500 => Status::InternalServerError,
            502 => Status::BadGateway,
            503 => Status::ServiceUnavailable,
            505 => Status::HttpVersionNotSupported,
            _ => return None,
        })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code(), self.reason())
    }
}

/// A chunk key: 1 to [`MAX_CHUNK_KEY_BYTES`] bytes, stored inline.
///
/// Equality, ordering and hashing consider only the key's bytes.
///
/// Layout: the bytes come first and the whole is 16-byte aligned, so the key's bytes
/// always sit at a 16-byte boundary of whatever holds them (a [`BlockPath`], a route, a
/// request). Decoding writes them in 16-byte stores, and every later move of the holder
/// then reads each of those stores back whole (an unaligned layout made every move of a
/// decoded route stall on store forwarding, a measurable share of request decoding).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct ChunkKey {
    bytes: [u8; MAX_CHUNK_KEY_BYTES],
    len: u8,
}

impl ChunkKey {
    /// A key from its bytes, or `None` if `bytes` is empty or longer than
    /// [`MAX_CHUNK_KEY_BYTES`].
    pub fn from_bytes(bytes: &[u8]) -> Option<ChunkKey> {
        if bytes.is_empty() || bytes.len() > MAX_CHUNK_KEY_BYTES {
            return None;
        }
        let mut key = ChunkKey {
            len: bytes.len() as u8,
            bytes: [0; MAX_CHUNK_KEY_BYTES],
        };
        key.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(key)
    }

    /// A 32-byte key (the size of a placement key), which always fits.
    pub fn from_array(bytes: [u8; 32]) -> ChunkKey {
        let mut key = ChunkKey {
            len: 32,
            bytes: [0; MAX_CHUNK_KEY_BYTES],
        };
        key.bytes[..32].copy_from_slice(&bytes);
        key
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Parses the hex form (see the module docs for the accepted forms).
    pub fn parse_hex(hex: &[u8]) -> Result<ChunkKey, PathError> {
        if hex.is_empty() {
            return Err(PathError::EmptyKey);
        }
        if hex.len() > MAX_CHUNK_KEY_HEX_DIGITS {
            return Err(PathError::KeyTooLong { digits: hex.len() });
        }
        if hex.len() % 2 != 0 {
            return Err(PathError::OddKeyLength { digits: hex.len() });
        }
        let mut key = ChunkKey {
            len: (hex.len() / 2) as u8,
            bytes: [0; MAX_CHUNK_KEY_BYTES],
        };
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0]).ok_or(PathError::KeyNotHex { at: 2 * i })?;
            let lo = hex_value(pair[1]).ok_or(PathError::KeyNotHex { at: 2 * i + 1 })?;
            key.bytes[i] = (hi << 4) | lo;
        }
        Ok(key)
    }

    /// Decodes a hex key already known to be well formed: an even number of hex digits,
    /// 2 to [`MAX_CHUNK_KEY_HEX_DIGITS`].
    #[inline(always)]
    pub(crate) fn from_valid_hex(hex: &[u8]) -> ChunkKey {
        debug_assert!(ChunkKey::parse_hex(hex).is_ok());
        let mut key = ChunkKey {
            len: (hex.len() / 2) as u8,
            bytes: [0; MAX_CHUNK_KEY_BYTES],
        };
        // 32 digits at a time (16 output bytes: one vector register, one store), then
        // one block of 16, then pairs.
        let mut blocks = hex.chunks_exact(32);
        for (out, block) in key.bytes.chunks_exact_mut(16).zip(&mut blocks) {
            decode_hex_block::<32, 16>(
                block.try_into().expect("32 digits"),
                out.try_into().expect("16 bytes"),
            );
        }
        let mut done = hex.len() / 32 * 16;
        let mut rest = blocks.remainder();
        if let (Some(block), Some(out)) = (rest.get(..16), key.bytes.get_mut(done..done + 8)) {
            decode_hex_block::<16, 8>(
                block.try_into().expect("16 digits"),
                out.try_into().expect("8 bytes"),
            );
            done += 8;
            rest = &rest[16..];
        }
        for (out, pair) in key.bytes[done..].iter_mut().zip(rest.chunks_exact(2)) {
            *out = (nibble(pair[0]) << 4) | nibble(pair[1]);
        }
        key
    }

    /// Writes the canonical (lower-case) hex form.
    pub fn write_hex(&self, out: &mut impl fmt::Write) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for &b in self.as_bytes() {
            out.write_char(char::from(DIGITS[usize::from(b >> 4)]))?;
            out.write_char(char::from(DIGITS[usize::from(b & 0x0f)]))?;
        }
        Ok(())
    }
}

/// Are all `N` bytes hex digits? Independent per-byte lanes without branches or tables,
/// so it compiles to a handful of 16-byte vector instructions per 16 digits (the chunk key
/// of every block request goes through it).
#[inline(always)]
fn all_hex<const N: usize>(digits: &[u8; N]) -> bool {
    let mut ok = true;
    for &b in digits {
        let digit = b.wrapping_sub(b'0') < 10;
        // `| 0x20` folds 'A'..='F' onto 'a'..='f' and maps nothing else there.
        let letter = (b | 0x20).wrapping_sub(b'a') < 6;
        ok &= digit | letter;
    }
    ok
}

/// Decodes `D` hex digits, already known valid, into `B = D / 2` bytes. Independent
/// per-byte lanes (nibbles, then even/odd pairs), which compile to a couple of dozen
/// 16-byte vector instructions per block and no branches or tables.
#[inline(always)]
fn decode_hex_block<const D: usize, const B: usize>(digits: &[u8; D], out: &mut [u8; B]) {
    debug_assert_eq!(D, 2 * B);
    let mut nibbles = [0u8; D];
    for (n, &b) in nibbles.iter_mut().zip(digits) {
        *n = nibble(b);
    }
    for (o, pair) in out.iter_mut().zip(nibbles.chunks_exact(2)) {
        *o = (pair[0] << 4) | pair[1];
    }
}

/// Hex digit value of a byte already known to be a hex digit.
#[inline(always)]
const fn nibble(b: u8) -> u8 {
    (b & 0x0f) + 9 * (b >> 6)
}

const fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

impl PartialEq for ChunkKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for ChunkKey {}
impl PartialOrd for ChunkKey {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ChunkKey {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}
impl core::hash::Hash for ChunkKey {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for ChunkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChunkKey(")?;
        self.write_hex(f)?;
        f.write_str(")")
    }
}

impl fmt::Display for ChunkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_hex(f)
    }
}

/// One block: a chunk key and the block's index within it. `Display` writes the canonical
/// path (`/peer/v1/block/<lower-hex>/<decimal>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockPath {
    /// The chunk the block belongs to.
    pub key: ChunkKey,
    /// The block's index in the chunk: any `u64` is valid on the wire (a source that does
    /// range arithmetic must bound it itself).
    pub index: u64,
}

impl BlockPath {
    /// Parses a request path (no query) that starts with [`BLOCK_PATH_PREFIX`].
    ///
    /// Returns [`PathError::NotBlockPath`] if the prefix is missing, so callers can tell an
    /// unknown path (404) from a malformed block path (400).
    #[inline]
    pub fn parse(path: &[u8]) -> Result<BlockPath, PathError> {
        let (hex, index) = split_block_path(path)?;
        Ok(BlockPath {
            key: ChunkKey::from_valid_hex(hex),
            index,
        })
    }
}

/// Validates a block path and splits it into the key's hex digits (known well formed) and
/// the index, so a caller can finish every check before it builds the 65-byte key (built
/// last, it lands in place instead of being copied through intermediate results).
#[inline]
pub(crate) fn split_block_path(path: &[u8]) -> Result<(&[u8], u64), PathError> {
    let rest = path
        .strip_prefix(BLOCK_PATH_PREFIX.as_bytes())
        .ok_or(PathError::NotBlockPath)?;
    // Fast path (every request runs it): measure the run of hex digits (32 at a time,
    // then 16, then one by one); if a well-formed key ends at the separator, that is the
    // key. Anything
    // unusual falls through to the precise path below, which names the error.
    let mut digits = 0;
    while digits + 32 <= MAX_CHUNK_KEY_HEX_DIGITS {
        match rest.get(digits..digits + 32).map(<&[u8; 32]>::try_from) {
            Some(Ok(block)) if all_hex(block) => digits += 32,
            _ => break,
        }
    }
    if digits + 16 <= MAX_CHUNK_KEY_HEX_DIGITS {
        if let Some(Ok(block)) = rest.get(digits..digits + 16).map(<&[u8; 16]>::try_from) {
            if all_hex(block) {
                digits += 16;
            }
        }
    }
    while digits < MAX_CHUNK_KEY_HEX_DIGITS
        && rest.get(digits).is_some_and(|&b| hex_value(b).is_some())
    {
        digits += 1;
    }
    if digits > 0 && digits % 2 == 0 && rest.get(digits) == Some(&b'/') {
        let index = parse_block_index(&rest[digits + 1..])?;
        return Ok((&rest[..digits], index));
    }
    let slash = rest
        .iter()
        .position(|&b| b == b'/')
        .ok_or(PathError::MissingIndex)?;
    ChunkKey::parse_hex(&rest[..slash])?;
    let index = parse_block_index(&rest[slash + 1..])?;
    Ok((&rest[..slash], index))
}

impl fmt::Display for BlockPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(BLOCK_PATH_PREFIX)?;
        self.key.write_hex(f)?;
        write!(f, "/{}", self.index)
    }
}

/// Parses a block index: canonical decimal `u64` (no sign, no leading zeros but `0`).
pub fn parse_block_index(digits: &[u8]) -> Result<u64, PathError> {
    if digits.is_empty() {
        return Err(PathError::EmptyIndex);
    }
    let mut value: u64 = 0;
    for (at, &b) in digits.iter().enumerate() {
        if !b.is_ascii_digit() {
            return Err(if b == b'/' {
                PathError::TrailingSegment
            } else {
                PathError::IndexNotDecimal { at }
            });
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(PathError::IndexOverflow)?;
    }
    if digits.len() > 1 && digits[0] == b'0' {
        return Err(PathError::IndexLeadingZero);
    }
    Ok(value)
}

/// What was wrong with a request path. Every variant except [`PathError::NotBlockPath`]
/// is the requester's malformed block path and answers `400`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path does not start with the block prefix (the server answers `404`).
    #[error("path is not a block path")]
    NotBlockPath,
    /// Nothing between the prefix and the index separator.
    #[error("block path has an empty chunk key")]
    EmptyKey,
    /// The key has an odd number of hex digits, so it is not whole bytes.
    #[error("chunk key has an odd number of hex digits ({digits})")]
    OddKeyLength {
        /// Digits found.
        digits: usize,
    },
    /// The key has more than [`MAX_CHUNK_KEY_HEX_DIGITS`] digits.
    #[error("chunk key has {digits} hex digits, more than {MAX_CHUNK_KEY_HEX_DIGITS}")]
    KeyTooLong {
        /// Digits found.
        digits: usize,
    },
    /// A byte of the key is not a hex digit.
    #[error("chunk key byte {at} is not a hex digit")]
    KeyNotHex {
        /// Offset of the bad byte within the key.
        at: usize,
    },
    /// No `/<index>` segment after the key.
    #[error("block path has no block index")]
    MissingIndex,
    /// The index segment is empty.
    #[error("block path has an empty block index")]
    EmptyIndex,
    /// A byte of the index is not a decimal digit (signs included).
    #[error("block index byte {at} is not a decimal digit")]
    IndexNotDecimal {
        /// Offset of the bad byte within the index.
        at: usize,
    },
    /// The index has leading zeros; only the canonical form is accepted.
    #[error("block index has a leading zero")]
    IndexLeadingZero,
    /// The index does not fit in a `u64`.
    #[error("block index overflows u64")]
    IndexOverflow,
    /// More path segments follow the index (including a trailing `/`).
    #[error("block path has segments after the index")]
    TrailingSegment,
}

impl PathError {
    /// The status the server answers for this path.
    pub const fn status(self) -> Status {
        match self {
            PathError::NotBlockPath => Status::NotFound,
            _ => Status::BadRequest,
        }
    }
}

/// A validated relay depth. Absent on the wire means `Hop(0)`.
///
/// Any value is valid at this layer, including one at or past the engine's relay bound:
/// the bound is enforced where relays are decided, not by the parser.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hop(pub u32);

/// Parses an `X-DART-Hop` value; `None` (header absent) is `Hop(0)`.
///
/// Accepted: one or more ASCII digits whose value fits in a `u32` (leading zeros do not
/// change the value). A negative hop would weaken the relay-loop bound (a negative start
/// delays the cutoff), so signs are refused outright, `-0` and `+1` included.
pub fn parse_hop(value: Option<&[u8]>) -> Result<Hop, HopError> {
    let Some(value) = value else {
        return Ok(Hop(0));
    };
    if value.is_empty() {
        return Err(HopError::Empty);
    }
    let mut hop: u32 = 0;
    for (at, &b) in value.iter().enumerate() {
        if !b.is_ascii_digit() {
            return Err(if at == 0 && (b == b'+' || b == b'-') {
                HopError::Signed
            } else {
                HopError::NotDecimal { at }
            });
        }
        hop = hop
            .checked_mul(10)
            .and_then(|v| v.checked_add(u32::from(b - b'0')))
            .ok_or(HopError::OutOfRange)?;
    }
    Ok(Hop(hop))
}

/// What was wrong with an `X-DART-Hop` value. All are the requester's fault and answer
/// `400`; the block source is never invoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HopError {
    /// The header is present with an empty value.
    #[error("X-DART-Hop is empty")]
    Empty,
    /// The value carries a sign (`+1`, `-0`, `-1`).
    #[error("X-DART-Hop is signed")]
    Signed,
    /// A byte is not a decimal digit.
    #[error("X-DART-Hop byte {at} is not a decimal digit")]
    NotDecimal {
        /// Offset of the bad byte.
        at: usize,
    },
    /// The value does not fit in a `u32`.
    #[error("X-DART-Hop is out of range")]
    OutOfRange,
    /// The header appears more than once, so the depth is ambiguous.
    #[error("X-DART-Hop appears more than once")]
    Duplicate,
}

impl HopError {
    /// The status the server answers: always `400`.
    pub const fn status(self) -> Status {
        Status::BadRequest
    }
}

/// Parses a membership epoch: 1 to [`MAX_EPOCH_DIGITS`] ASCII digits (leading zeros
/// allowed) whose value fits in a `u64`; `None` otherwise (empty, signed, non-digit, too
/// long or too large). A decimal `u64` carried as text because JSON numbers would corrupt
/// values above 2^53. Used for the `X-DART-Epoch` header and, through
/// [`roster::parse_roster_epoch`](crate::roster::parse_roster_epoch) (which adds Go's
/// empty string as "no epoch"), for the roster's `epoch` string.
pub fn parse_epoch(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > MAX_EPOCH_DIGITS {
        return None;
    }
    value.iter().try_fold(0u64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Parses an `X-Peerblock-Load` value ([`header::LOAD`]): 1 to [`MAX_LOAD_DIGITS`] ASCII
/// digits (leading zeros allowed) whose value fits in a `u32`. `None` for anything else:
/// the value is the peer's input and a malformed hint is no hint (consumers bound the
/// value too, see [`MAX_ADVERTISED_LOAD`](crate::load::MAX_ADVERTISED_LOAD)).
pub fn parse_load(value: &[u8]) -> Option<u32> {
    if value.is_empty() || value.len() > MAX_LOAD_DIGITS {
        return None;
    }
    value.iter().try_fold(0u32, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        acc.checked_mul(10)?.checked_add(u32::from(b - b'0'))
    })
}

/// Is `token` a valid HTTP token (RFC 9110 §5.6.2)? Used for refusal reasons.
pub fn is_token(token: &[u8]) -> bool {
    !token.is_empty() && token.iter().all(|&b| is_tchar(b))
}

pub(crate) const fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_'
        | b'`' | b'|' | b'~' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z')
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cmp::Ordering;

    fn key32() -> ChunkKey {
        let mut b = [0u8; 32];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 * 7;
        }
        ChunkKey::from_array(b)
    }

    #[test]
    fn block_path_round_trips_canonically() {
        let p = BlockPath {
            key: key32(),
            index: 42,
        };
        let s = p.to_string();
        assert!(s.starts_with("/peer/v1/block/00070e15"));
        assert!(s.ends_with("/42"));
        assert_eq!(BlockPath::parse(s.as_bytes()), Ok(p));
    }

    #[test]
    fn block_index_accepts_max_u64() {
        let p = BlockPath::parse(b"/peer/v1/block/ab/18446744073709551615").unwrap();
        assert_eq!(p.index, u64::MAX);
        assert_eq!(p.to_string(), "/peer/v1/block/ab/18446744073709551615");
    }

    #[test]
    fn block_index_rejects_max_u64_plus_one() {
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/ab/18446744073709551616"),
            Err(PathError::IndexOverflow)
        );
    }

    #[test]
    fn block_index_zero_is_valid_but_padded_zero_is_not() {
        assert_eq!(BlockPath::parse(b"/peer/v1/block/ab/0").unwrap().index, 0);
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/ab/00"),
            Err(PathError::IndexLeadingZero)
        );
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/ab/007"),
            Err(PathError::IndexLeadingZero)
        );
    }

    #[test]
    fn block_index_rejects_signs_and_non_digits() {
        for (idx, at) in [("+1", 0), ("-1", 0), ("1a", 1), ("1 ", 1), ("0x1", 1)] {
            let path = format!("/peer/v1/block/ab/{idx}");
            assert_eq!(
                BlockPath::parse(path.as_bytes()),
                Err(PathError::IndexNotDecimal { at }),
                "{idx}"
            );
        }
    }

    #[test]
    fn block_path_key_rules() {
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block//1"),
            Err(PathError::EmptyKey)
        );
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/abc/1"),
            Err(PathError::OddKeyLength { digits: 3 })
        );
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/a/1"),
            Err(PathError::OddKeyLength { digits: 1 })
        );
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/zz/1"),
            Err(PathError::KeyNotHex { at: 0 })
        );
        let long = format!("/peer/v1/block/{}/1", "a".repeat(130));
        assert_eq!(
            BlockPath::parse(long.as_bytes()),
            Err(PathError::KeyTooLong { digits: 130 })
        );
        let max = format!("/peer/v1/block/{}/1", "a".repeat(128));
        assert_eq!(
            BlockPath::parse(max.as_bytes())
                .unwrap()
                .key
                .as_bytes()
                .len(),
            64
        );
    }

    #[test]
    fn chunk_key_from_bytes_takes_1_to_64_bytes() {
        assert_eq!(ChunkKey::from_bytes(&[]), None, "empty");
        let max = ChunkKey::from_bytes(&[7; 64]).expect("64 bytes fit");
        assert_eq!(max.as_bytes(), &[7; 64][..]);
        assert_eq!(ChunkKey::from_bytes(&[7; 65]), None, "65 bytes");
        assert_eq!(ChunkKey::from_bytes(&[7]).unwrap().as_bytes(), &[7]);
    }

    #[test]
    fn chunk_key_parse_hex_decodes_each_digit_pair_into_one_byte() {
        let key = ChunkKey::parse_hex(b"0aF1").unwrap();
        assert_eq!(key.as_bytes(), &[0x0a, 0xf1]);
        assert_eq!(format!("{key:?}"), "ChunkKey(0af1)");
        assert_eq!(key.to_string(), "0af1");
        let max = ChunkKey::parse_hex("a5".repeat(64).as_bytes()).unwrap();
        assert_eq!(max.as_bytes(), &[0xa5; 64][..]);
    }

    #[test]
    fn chunk_key_equality_order_and_hash_follow_the_bytes() {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = |k: &ChunkKey| BuildHasherDefault::<DefaultHasher>::default().hash_one(k);
        let k = |b: &[u8]| ChunkKey::from_bytes(b).unwrap();
        assert_eq!(k(&[1, 2]), k(&[1, 2]));
        assert_ne!(k(&[1, 2]), k(&[1, 3]));
        assert_ne!(k(&[1]), k(&[1, 0]), "a shorter key is another key");
        assert_eq!(k(&[1, 2]).partial_cmp(&k(&[1, 3])), Some(Ordering::Less));
        assert_eq!(k(&[2]).partial_cmp(&k(&[1, 9])), Some(Ordering::Greater));
        assert_eq!(k(&[1]).cmp(&k(&[1, 0])), Ordering::Less);
        assert_eq!(hash(&k(&[1, 2])), hash(&k(&[1, 2])));
        assert_ne!(hash(&k(&[1, 2])), hash(&k(&[1, 3])));
        assert_ne!(hash(&k(&[1])), hash(&k(&[1, 0])));
    }

    #[test]
    fn status_displays_as_code_and_reason() {
        assert_eq!(Status::NotFound.to_string(), "404 Not Found");
        assert_eq!(
            Status::ServiceUnavailable.to_string(),
            "503 Service Unavailable"
        );
    }

    #[test]
    fn block_path_key_accepts_upper_case_and_formats_lower() {
        let p = BlockPath::parse(b"/peer/v1/block/ABcd/1").unwrap();
        assert_eq!(p.key.as_bytes(), &[0xab, 0xcd]);
        assert_eq!(p.to_string(), "/peer/v1/block/abcd/1");
    }

    #[test]
    fn block_path_structure_rejects() {
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/ab"),
            Err(PathError::MissingIndex)
        );
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/ab/"),
            Err(PathError::EmptyIndex)
        );
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/ab/1/"),
            Err(PathError::TrailingSegment)
        );
        assert_eq!(
            BlockPath::parse(b"/peer/v1/block/ab/1/2"),
            Err(PathError::TrailingSegment)
        );
        assert_eq!(
            BlockPath::parse(b"/peer/v1/blocks/ab/1"),
            Err(PathError::NotBlockPath)
        );
        assert_eq!(PathError::NotBlockPath.status(), Status::NotFound);
        assert_eq!(PathError::EmptyKey.status(), Status::BadRequest);
    }

    #[test]
    fn vector_hex_check_agrees_with_the_table_on_every_byte_at_every_lane() {
        for b in 0..=255u8 {
            for pos in 0..16 {
                let mut digits = *b"0123456789abCDEf";
                digits[pos] = b;
                let valid = digits.iter().all(|d| hex_value(*d).is_some());
                assert_eq!(all_hex(&digits), valid, "{digits:?}");
                for half in [0, 16] {
                    let mut wide = [b'a'; 32];
                    wide[half..half + 16].copy_from_slice(&digits);
                    assert_eq!(all_hex(&wide), valid, "{digits:?} at {half}");
                }
            }
        }
    }

    #[test]
    fn block_hex_decode_agrees_with_the_table_on_every_digit_at_every_lane() {
        let all: Vec<u8> = (0..=255u8).filter(|b| hex_value(*b).is_some()).collect();
        assert_eq!(all.len(), 22);
        for &d in &all {
            assert_eq!(nibble(d), hex_value(d).unwrap());
            for pos in 0..16 {
                let mut digits = *b"0a1B2c3D4e5F6789";
                digits[pos] = d;
                let want: Vec<u8> = digits
                    .chunks(2)
                    .map(|p| hex_value(p[0]).unwrap() << 4 | hex_value(p[1]).unwrap())
                    .collect();
                let mut got = [0u8; 8];
                decode_hex_block::<16, 8>(&digits, &mut got);
                assert_eq!(got.to_vec(), want, "{digits:?}");
            }
        }
    }

    #[test]
    fn block_path_key_of_every_length_decodes_through_every_fast_path() {
        // 2..=128 digits: the 16-digit blocks, the 8-digit step and the pair loop.
        let bytes: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for len in 1..=64 {
            let key = ChunkKey::from_bytes(&bytes[..len]).unwrap();
            let p = BlockPath { key, index: 9 };
            let lower = p.to_string();
            assert_eq!(BlockPath::parse(lower.as_bytes()), Ok(p), "{lower}");
            let upper = format!("/peer/v1/block/{}/9", key.to_string().to_uppercase());
            assert_eq!(BlockPath::parse(upper.as_bytes()), Ok(p), "{upper}");
            // A bad digit at each position is reported exactly there.
            for at in 0..2 * len {
                let mut hex = key.to_string().into_bytes();
                hex[at] = b'g';
                let path = [b"/peer/v1/block/".as_slice(), &hex, b"/9"].concat();
                assert_eq!(
                    BlockPath::parse(&path),
                    Err(PathError::KeyNotHex { at }),
                    "{len} bytes, bad digit at {at}"
                );
            }
        }
    }

    #[test]
    fn hop_absent_is_zero() {
        assert_eq!(parse_hop(None), Ok(Hop(0)));
    }

    #[test]
    fn hop_accepts_non_negative_decimal_including_large() {
        assert_eq!(parse_hop(Some(b"0")), Ok(Hop(0)));
        assert_eq!(parse_hop(Some(b"7")), Ok(Hop(7)));
        assert_eq!(parse_hop(Some(b"007")), Ok(Hop(7)));
        assert_eq!(parse_hop(Some(b"4294967295")), Ok(Hop(u32::MAX)));
    }

    #[test]
    fn hop_rejects_empty_signed_non_digit_and_overflow() {
        assert_eq!(parse_hop(Some(b"")), Err(HopError::Empty));
        assert_eq!(parse_hop(Some(b"+1")), Err(HopError::Signed));
        assert_eq!(parse_hop(Some(b"-0")), Err(HopError::Signed));
        assert_eq!(parse_hop(Some(b"-1")), Err(HopError::Signed));
        assert_eq!(parse_hop(Some(b"1-")), Err(HopError::NotDecimal { at: 1 }));
        assert_eq!(parse_hop(Some(b"one")), Err(HopError::NotDecimal { at: 0 }));
        assert_eq!(parse_hop(Some(b"1.0")), Err(HopError::NotDecimal { at: 1 }));
        assert_eq!(parse_hop(Some(b"4294967296")), Err(HopError::OutOfRange));
        assert_eq!(
            parse_hop(Some(b"99999999999999999999999")),
            Err(HopError::OutOfRange)
        );
        assert_eq!(HopError::Signed.status(), Status::BadRequest);
    }

    #[test]
    fn epoch_parses_full_u64_only() {
        assert_eq!(parse_epoch(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_epoch(b"18446744073709551616"), None);
        assert_eq!(parse_epoch(b""), None);
        assert_eq!(parse_epoch(b"-1"), None);
        assert_eq!(
            parse_epoch(b"00000000000000000001"),
            Some(1),
            "20 digits, padded"
        );
        assert_eq!(
            parse_epoch(b"000000000000000000001"),
            None,
            "21 digits: over the bound"
        );
    }

    #[test]
    fn load_parses_digits_that_fit_u32_only() {
        assert_eq!(parse_load(b"0"), Some(0));
        assert_eq!(parse_load(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_load(b"0000000007"), Some(7), "10 digits, padded");
        assert_eq!(parse_load(b"4294967296"), None, "over u32::MAX");
        assert_eq!(
            parse_load(b"00000000007"),
            None,
            "11 digits: over the bound"
        );
        for bad in [&b""[..], b"+1", b"-1", b"1 ", b" 1", b"0x1", b"1.0"] {
            assert_eq!(parse_load(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn status_codes_round_trip() {
        for s in [
            Status::Ok,
            Status::BadRequest,
            Status::NotFound,
            Status::MethodNotAllowed,
            Status::HeaderFieldsTooLarge,
            Status::InternalServerError,
            Status::BadGateway,
            Status::ServiceUnavailable,
            Status::HttpVersionNotSupported,
        ] {
            assert_eq!(Status::from_code(s.code()), Some(s));
        }
        assert_eq!(Status::from_code(418), None);
    }
}
