//! The `Range` request kind: one byte range of an object on a plain HTTP/1.1 server (an
//! object URL's origin), and how its answer is classified.
//!
//! The classification table is on [`RangeAnswer`].

use bytes::Bytes;

/// One byte range of an object, as the exchange asks for it.
#[derive(Clone, Copy, Debug)]
pub struct ObjectRange<'a> {
    /// The request target as sent: the URL's path and query (`/p/o.bin?X-Sig=..`), never
    /// its fragment.
    pub target: &'a str,
    /// The first byte.
    pub start: u64,
    /// How many bytes (at least 1): the range is `[start, start + len)`.
    pub len: u64,
    /// The object's size, if known (from the identity probe): an answer naming another
    /// total is [`ObjectChange::Size`].
    pub total: Option<u64>,
    /// The object's validator, if known: a strong ETag (`"..."`, sent as `If-Match`), a
    /// weak one (`W/"..."`, compared only) or a `Last-Modified` date (sent as
    /// `If-Unmodified-Since`). An answer with another one is [`ObjectChange::Validator`].
    pub validator: Option<&'a str>,
}

impl ObjectRange<'_> {
    /// The identity probe: `bytes=0-0` with nothing known. Its answer gives the size
    /// (`Content-Range` total, or `Empty` for an empty object) and the validator.
    pub fn probe(target: &str) -> ObjectRange<'_> {
        ObjectRange {
            target,
            start: 0,
            len: 1,
            total: None,
            validator: None,
        }
    }

    /// The last byte, or `None` if `len` is zero or the range overflows `u64`.
    pub fn last(&self) -> Option<u64> {
        self.start.checked_add(self.len.checked_sub(1)?)
    }
}

/// A parsed `Content-Range` value (RFC 9110 §14.4) in one of the two forms a single-range
/// answer uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentRange {
    /// `bytes first-last/total` (a `206`): `first <= last < total`.
    Bytes {
        /// The first byte sent.
        first: u64,
        /// The last byte sent (inclusive).
        last: u64,
        /// The object's size.
        total: u64,
    },
    /// `bytes */total` (a `416`): the range was unsatisfiable; the object has `total`
    /// bytes.
    Unsatisfied {
        /// The object's size.
        total: u64,
    },
}

/// Why a `Content-Range` is refused. The origin's bad answer, never guessed around.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContentRangeError {
    /// A `206` without `Content-Range` (or a multipart answer to one range).
    #[error("206 without a Content-Range")]
    Missing,
    /// Not `bytes first-last/total` or `bytes */total` (unit, separators, digits).
    #[error("Content-Range is not `bytes first-last/total`")]
    Malformed,
    /// A number does not fit in 64 bits (more than 20 digits, or above `u64::MAX`).
    #[error("Content-Range number overflows 64 bits")]
    Overflow,
    /// `first > last`, or `last >= total`.
    #[error("Content-Range {first}-{last}/{total} is not a range of the object")]
    Inconsistent {
        /// The first byte named.
        first: u64,
        /// The last byte named.
        last: u64,
        /// The total named.
        total: u64,
    },
    /// The total is `*` (unknown): an object whose size the server does not know cannot
    /// be read by ranges.
    #[error("Content-Range total is unknown (`*`)")]
    UnknownTotal,
    /// The range sent is not the range asked for.
    #[error(
        "Content-Range names bytes {first}-{last}, bytes {asked_first}-{asked_last} were asked for"
    )]
    OtherRange {
        /// The first byte asked for.
        asked_first: u64,
        /// The last byte asked for.
        asked_last: u64,
        /// The first byte sent.
        first: u64,
        /// The last byte sent.
        last: u64,
    },
}

/// Most digits in a `Content-Range` number: `u64::MAX` has 20.
const MAX_RANGE_DIGITS: usize = 20;

fn number(s: &[u8]) -> Result<u64, ContentRangeError> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return Err(ContentRangeError::Malformed);
    }
    if s.len() > MAX_RANGE_DIGITS {
        return Err(ContentRangeError::Overflow);
    }
    s.iter().try_fold(0u64, |acc, &b| {
        acc.checked_mul(10)
            .and_then(|a| a.checked_add(u64::from(b - b'0')))
            .ok_or(ContentRangeError::Overflow)
    })
}

impl ContentRange {
    /// Parses a `Content-Range` value: `bytes` (any ASCII case), one space, then
    /// `first-last/total` or `*/total`; digits only, no sign, no whitespace inside.
    pub fn parse(value: &[u8]) -> Result<ContentRange, ContentRangeError> {
        let rest = match value.split_at_checked(6) {
            Some((unit, rest)) if unit.eq_ignore_ascii_case(b"bytes ") => rest,
            _ => return Err(ContentRangeError::Malformed),
        };
        let slash = rest
            .iter()
            .position(|&b| b == b'/')
            .ok_or(ContentRangeError::Malformed)?;
        let (range, total) = (&rest[..slash], &rest[slash + 1..]);
        if total == b"*" {
            return Err(ContentRangeError::UnknownTotal);
        }
        let total = number(total)?;
        if range == b"*" {
            return Ok(ContentRange::Unsatisfied { total });
        }
        let dash = range
            .iter()
            .position(|&b| b == b'-')
            .ok_or(ContentRangeError::Malformed)?;
        let (first, last) = (number(&range[..dash])?, number(&range[dash + 1..])?);
        if first > last || last >= total {
            return Err(ContentRangeError::Inconsistent { first, last, total });
        }
        Ok(ContentRange::Bytes { first, last, total })
    }
}

/// What changed about the object since its identity was taken: the read must stop, and
/// nothing read so far may be kept as this object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectChange {
    /// `412`: the server says the precondition (`If-Match` / `If-Unmodified-Since`) failed.
    Precondition,
    /// The object's size is not the expected one.
    Size {
        /// The size the read expected.
        expected: u64,
        /// The size the answer names.
        got: u64,
    },
    /// The object's validator is not the expected one (or the answer has none).
    Validator {
        /// The validator the read expected.
        expected: String,
        /// The validator the answer carries.
        got: Option<String>,
    },
}

impl std::fmt::Display for ObjectChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectChange::Precondition => {
                f.write_str("the validator differs (412: the precondition failed)")
            }
            ObjectChange::Size { expected, got } => {
                write!(f, "the size differs ({got} bytes, {expected} expected)")
            }
            ObjectChange::Validator { expected, got } => match got {
                Some(got) => write!(f, "the validator differs ({got}, {expected} expected)"),
                None => write!(f, "the validator differs (none sent, {expected} expected)"),
            },
        }
    }
}

/// How a `Range` exchange ended when the origin answered it meaningfully (`404`,
/// `401`/`403` and failures use the ordinary endings). Every answer:
///
/// | answer | ending |
/// |---|---|
/// | `206` whose `Content-Range` is exactly `bytes first-last/total` (`total` the expected one when known), validator unchanged, body exactly `len` bytes | `Range(Part { body, total, validator })` |
/// | `206` with a `total` other than the expected one | `Range(Changed(Size))` |
/// | `206` whose ETag (or `Last-Modified`) differs from the expected validator, or is missing | `Range(Changed(Validator))` |
/// | `206` whose `Content-Range` is missing, malformed, overflowing, `*` for the total, or names other bytes | `Failed(Protocol(ContentRange))` |
/// | `206` whose body is not exactly `len` bytes | `Failed(Length)` |
/// | `200` (the server ignored `Range` and sends the whole object) | `Range(Ignored)`, at the head: the body is never read, the connection is closed |
/// | `412` (the precondition failed: the object is another version now) | `Range(Changed(Precondition))` |
/// | `416` with `Content-Range: bytes */0` to a range starting at 0 | `Range(Empty { validator })`: the object has no bytes |
/// | `416` with `bytes */N` (N > 0) when the total is known and differs | `Range(Changed(Size))` |
/// | `404` | `Miss` (absent at the origin) |
/// | `401`, `403` | `UpstreamRefused { status }`: the origin refused the credential in the URL |
/// | anything else | `Failed(Status)` |
///
/// Every non-`206` answer is classified at its head and its connection closed: an error
/// body is never worth a round trip of reuse, and a `200`'s body may be the whole object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeAnswer {
    /// The bytes asked for, exactly.
    Part {
        /// Exactly `len` bytes.
        body: Bytes,
        /// The object's size (`Content-Range` total).
        total: u64,
        /// The object's validator: its ETag, else its `Last-Modified`, if it sent one.
        validator: Option<String>,
    },
    /// `416` with `bytes */0` to a range from byte 0: the object is empty.
    Empty {
        /// The object's validator, if it sent one.
        validator: Option<String>,
    },
    /// `200`: the server ignored `Range` and sent (or started to send) the whole object.
    /// Nothing was read past the head; the connection is closed.
    Ignored,
    /// The object is not the version the read started with.
    Changed(ObjectChange),
}

impl RangeAnswer {
    /// Whether this answer is a failure of the read (`Ignored`, `Changed`).
    pub fn is_error(&self) -> bool {
        matches!(self, RangeAnswer::Ignored | RangeAnswer::Changed(_))
    }
}

/// The validator a response head carries: its ETag, else its `Last-Modified` (as text;
/// `None` if neither, or not UTF-8).
pub fn head_validator(etag: Option<&[u8]>, last_modified: Option<&[u8]>) -> Option<String> {
    etag.or(last_modified)
        .and_then(|v| core::str::from_utf8(v).ok())
        .map(str::to_owned)
}

/// Whether `validator` is an ETag (strong `"..."` or weak `W/"..."`) rather than a date.
pub fn is_etag(validator: &str) -> bool {
    validator.starts_with('"') || validator.starts_with("W/\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_range_is_bytes_first_last_total() {
        assert_eq!(
            ContentRange::parse(b"bytes 0-0/5"),
            Ok(ContentRange::Bytes {
                first: 0,
                last: 0,
                total: 5
            })
        );
        assert_eq!(
            ContentRange::parse(b"BYTES 2-4/5"),
            Ok(ContentRange::Bytes {
                first: 2,
                last: 4,
                total: 5
            })
        );
        assert_eq!(
            ContentRange::parse(b"bytes */0"),
            Ok(ContentRange::Unsatisfied { total: 0 })
        );
    }

    #[test]
    fn a_malformed_content_range_is_refused_never_guessed() {
        for bad in [
            &b""[..],
            b"bytes",
            b"bytes 0-1",
            b"bytes 0-1/",
            b"bytes -1/5",
            b"bytes 0-/5",
            b"bytes +0-1/5",
            b"bytes 0 - 1/5",
            b"bytes  0-1/5",
            b"items 0-1/5",
            b"bytes 0-1/5 ",
            b"bytes 0x1-2/5",
        ] {
            assert_eq!(
                ContentRange::parse(bad),
                Err(ContentRangeError::Malformed),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn an_overflowing_content_range_number_is_refused() {
        assert_eq!(
            ContentRange::parse(b"bytes 0-1/18446744073709551616"),
            Err(ContentRangeError::Overflow)
        );
        assert_eq!(
            ContentRange::parse(b"bytes 0-1/000000000000000000001"),
            Err(ContentRangeError::Overflow)
        );
        assert_eq!(
            ContentRange::parse(b"bytes 0-18446744073709551614/18446744073709551615"),
            Ok(ContentRange::Bytes {
                first: 0,
                last: u64::MAX - 1,
                total: u64::MAX
            })
        );
    }

    #[test]
    fn a_content_range_outside_its_own_total_is_inconsistent() {
        assert_eq!(
            ContentRange::parse(b"bytes 5-5/5"),
            Err(ContentRangeError::Inconsistent {
                first: 5,
                last: 5,
                total: 5
            })
        );
        assert_eq!(
            ContentRange::parse(b"bytes 3-2/5"),
            Err(ContentRangeError::Inconsistent {
                first: 3,
                last: 2,
                total: 5
            })
        );
    }

    #[test]
    fn an_unknown_total_is_refused() {
        assert_eq!(
            ContentRange::parse(b"bytes 0-1/*"),
            Err(ContentRangeError::UnknownTotal)
        );
    }

    #[test]
    fn the_probe_asks_for_byte_zero_only() {
        let p = ObjectRange::probe("/o");
        assert_eq!((p.start, p.last()), (0, Some(0)));
        let r = ObjectRange {
            start: u64::MAX,
            len: 2,
            ..p
        };
        assert_eq!(r.last(), None);
    }

    #[test]
    fn the_validator_is_the_etag_else_last_modified() {
        assert_eq!(
            head_validator(Some(b"\"a\""), Some(b"Tue")),
            Some("\"a\"".into())
        );
        assert_eq!(head_validator(None, Some(b"Tue")), Some("Tue".into()));
        assert!(is_etag("\"a\"") && is_etag("W/\"a\"") && !is_etag("Tue, 1 Dec"));
    }
}
