//! Our own strict decoder for the chunked transfer coding (RFC 9112 §7.1).
//!
//! httparse only offers `parse_chunk_size`, which accepts an empty size line, an
//! extension-only line and a bare LF inside an extension; a strict decoder must refuse all
//! three. This one is a byte-level state machine, so it is resumable at any split and
//! never re-reads input: `consumed` bytes of every call are final.

use bytes::BytesMut;

use super::error::ChunkedError;
use super::{MAX_CHUNK_EXTENSION_BYTES, MAX_CHUNK_SIZE_DIGITS, MAX_TRAILER_BYTES};
use crate::wire::is_tchar;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Start of a chunk-size line: a hex digit must come.
    SizeStart,
    /// Inside the hex digits.
    Size,
    /// Whitespace after the digits (BWS before `;`): `;` or CR must follow.
    SizeWhitespace,
    /// After `;`: optional whitespace, then an extension name.
    ExtensionStart,
    /// Inside an extension (name, `=`, value): anything visible until CR.
    Extension,
    /// CR of the size line seen: LF must follow.
    SizeLf,
    /// Inside chunk data.
    Data,
    /// Chunk data done: CR must follow.
    DataCr,
    /// CR after data seen: LF must follow.
    DataLf,
    /// Start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field name.
    TrailerName,
    /// Inside a trailer field value.
    TrailerValue,
    /// CR ending a trailer field seen: LF must follow.
    TrailerLf,
    /// CR of the final empty line seen: LF must follow.
    EndLf,
    /// The body is complete.
    Done,
}

/// Progress of one [`ChunkedDecoder::decode`] call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkedProgress {
    /// Input bytes consumed (always all of them unless `done`).
    pub consumed: usize,
    /// The last chunk and trailers were read: the body is complete. Bytes after
    /// `consumed` belong to the next message.
    pub done: bool,
}

/// Incremental strict chunked-body decoder.
///
/// Refuses: a size line without digits (empty or extension-only), more than
/// [`MAX_CHUNK_SIZE_DIGITS`] digits, a chunk larger than what the body limit still allows
/// (before any of its data), extensions past [`MAX_CHUNK_EXTENSION_BYTES`], bare CR or LF
/// anywhere in the framing, data not followed by CRLF, malformed trailers, and trailers
/// past [`MAX_TRAILER_BYTES`]. Trailers are validated and discarded.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    limit: u64,
    received: u64,
    size: u64,
    digits: u8,
    extension_bytes: usize,
    trailer_bytes: usize,
}

impl ChunkedDecoder {
    /// A decoder for a body of at most `limit` bytes of data.
    pub fn new(limit: u64) -> Self {
        ChunkedDecoder {
            state: State::SizeStart,
            limit,
            received: 0,
            size: 0,
            digits: 0,
            extension_bytes: 0,
            trailer_bytes: 0,
        }
    }

    /// Data bytes decoded so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// True once the whole body (last chunk and trailers) was read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input`, appending chunk data to `out`. After an error the decoder
    /// must not be used again.
    pub fn decode(
        &mut self,
        input: &[u8],
        out: &mut BytesMut,
    ) -> Result<ChunkedProgress, ChunkedError> {
        let mut i = 0;
        while i < input.len() && self.state != State::Done {
            if self.state == State::Data {
                let take = (input.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                out.extend_from_slice(&input[i..i + take]);
                i += take;
                self.size -= take as u64;
                self.received += take as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                continue;
            }
            self.step(input[i])?;
            i += 1;
        }
        Ok(ChunkedProgress {
            consumed: i,
            done: self.state == State::Done,
        })
    }

    fn step(&mut self, b: u8) -> Result<(), ChunkedError> {
        use State::*;
        self.state = match self.state {
            SizeStart | Size => match hex(b) {
                Some(v) => {
                    if self.digits == MAX_CHUNK_SIZE_DIGITS {
                        return Err(ChunkedError::SizeOverflow);
                    }
                    self.digits += 1;
                    self.size = (self.size << 4) | u64::from(v);
                    let remaining = self.limit - self.received;
                    if self.size > remaining {
                        return Err(ChunkedError::ChunkExceedsLimit {
                            size: self.size,
                            remaining,
                        });
                    }
                    Size
                }
                None if self.state == SizeStart => return Err(ChunkedError::MissingSize),
                None => self.after_size(b)?,
            },
            SizeWhitespace => self.after_size(b)?,
            ExtensionStart => {
                self.count_extension()?;
                match b {
                    b' ' | b'\t' => ExtensionStart,
                    b if is_tchar(b) => Extension,
                    _ => return Err(ChunkedError::InvalidSizeLine),
                }
            }
            Extension => match b {
                b'\r' => SizeLf,
                b'\n' => return Err(ChunkedError::BareLineEnding),
                b'\t' => {
                    self.count_extension()?;
                    Extension
                }
                0x20..=0x7e | 0x80..=0xff => {
                    self.count_extension()?;
                    Extension
                }
                _ => return Err(ChunkedError::InvalidSizeLine),
            },
            SizeLf => {
                if b != b'\n' {
                    return Err(ChunkedError::BareLineEnding);
                }
                self.extension_bytes = 0;
                self.digits = 0;
                if self.size == 0 {
                    TrailerStart
                } else {
                    Data
                }
            }
            // Data is consumed in bulk by `decode` and never reaches `step`.
            Data => Data,
            DataCr => match b {
                b'\r' => DataLf,
                _ => return Err(ChunkedError::MissingDataCrlf),
            },
            DataLf => match b {
                b'\n' => SizeStart,
                _ => return Err(ChunkedError::BareLineEnding),
            },
            TrailerStart => match b {
                // The empty line ending the body is not part of the trailer section.
                b'\r' => EndLf,
                b'\n' => return Err(ChunkedError::BareLineEnding),
                b if is_tchar(b) => {
                    self.count_trailer()?;
                    TrailerName
                }
                // Includes SP/HTAB: an obs-fold continuation line.
                _ => return Err(ChunkedError::InvalidTrailer),
            },
            TrailerName => {
                self.count_trailer()?;
                match b {
                    b':' => TrailerValue,
                    b if is_tchar(b) => TrailerName,
                    _ => return Err(ChunkedError::InvalidTrailer),
                }
            }
            TrailerValue => {
                self.count_trailer()?;
                match b {
                    b'\r' => TrailerLf,
                    b'\n' => return Err(ChunkedError::BareLineEnding),
                    b'\t' | 0x20..=0x7e | 0x80..=0xff => TrailerValue,
                    _ => return Err(ChunkedError::InvalidTrailer),
                }
            }
            TrailerLf => {
                self.count_trailer()?;
                match b {
                    b'\n' => TrailerStart,
                    _ => return Err(ChunkedError::BareLineEnding),
                }
            }
            EndLf => match b {
                b'\n' => Done,
                _ => return Err(ChunkedError::BareLineEnding),
            },
            Done => Done,
        };
        Ok(())
    }

    /// The byte after a size's digits (or after whitespace following them).
    fn after_size(&mut self, b: u8) -> Result<State, ChunkedError> {
        match b {
            b' ' | b'\t' => {
                self.count_extension()?;
                Ok(State::SizeWhitespace)
            }
            b';' => {
                self.count_extension()?;
                Ok(State::ExtensionStart)
            }
            b'\r' => Ok(State::SizeLf),
            b'\n' => Err(ChunkedError::BareLineEnding),
            _ => Err(ChunkedError::InvalidSizeLine),
        }
    }

    fn count_extension(&mut self) -> Result<(), ChunkedError> {
        self.extension_bytes += 1;
        if self.extension_bytes > MAX_CHUNK_EXTENSION_BYTES {
            return Err(ChunkedError::ExtensionTooLong);
        }
        Ok(())
    }

    fn count_trailer(&mut self) -> Result<(), ChunkedError> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > MAX_TRAILER_BYTES {
            return Err(ChunkedError::TrailersTooLong);
        }
        Ok(())
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8], limit: u64) -> Result<(Vec<u8>, usize), ChunkedError> {
        let mut d = ChunkedDecoder::new(limit);
        let mut out = BytesMut::new();
        let p = d.decode(input, &mut out)?;
        assert!(p.done, "incomplete");
        Ok((out.to_vec(), p.consumed))
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let input = b"5\r\nhello\r\n6;name=val\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (body, consumed) = run(input, 100).unwrap();
        assert_eq!(body, b"hello world");
        assert_eq!(&input[consumed..], b"NEXT");
    }

    #[test]
    fn rejects_empty_size_line() {
        assert_eq!(run(b"\r\n", 10), Err(ChunkedError::MissingSize));
    }

    #[test]
    fn rejects_extension_only_size_line() {
        assert_eq!(run(b";ext\r\n", 10), Err(ChunkedError::MissingSize));
    }

    #[test]
    fn rejects_bare_lf_in_extension() {
        assert_eq!(
            run(b"1;a\nb\r\nx\r\n0\r\n\r\n", 10),
            Err(ChunkedError::BareLineEnding)
        );
    }

    #[test]
    fn rejects_size_overflow_and_sizes_over_limit_before_data() {
        assert_eq!(
            run(b"00000000000000001\r\n", u64::MAX),
            Err(ChunkedError::SizeOverflow)
        );
        let mut d = ChunkedDecoder::new(4);
        let mut out = BytesMut::new();
        assert_eq!(
            d.decode(b"5\r\n", &mut out),
            Err(ChunkedError::ChunkExceedsLimit {
                size: 5,
                remaining: 4
            })
        );
        assert!(out.is_empty());
    }

    #[test]
    fn cumulative_chunks_respect_limit() {
        assert_eq!(
            run(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", 4),
            Err(ChunkedError::ChunkExceedsLimit {
                size: 2,
                remaining: 1
            })
        );
    }

    #[test]
    fn rejects_missing_crlf_after_data_and_bad_trailers() {
        assert_eq!(
            run(b"1\r\nab\r\n0\r\n\r\n", 10),
            Err(ChunkedError::MissingDataCrlf)
        );
        assert_eq!(
            run(b"0\r\n folded\r\n\r\n", 10),
            Err(ChunkedError::InvalidTrailer)
        );
        assert_eq!(
            run(b"0\r\nX-T : 1\r\n\r\n", 10),
            Err(ChunkedError::InvalidTrailer)
        );
        assert_eq!(run(b"0\r\n\n", 10), Err(ChunkedError::BareLineEnding));
    }

    #[test]
    fn extension_bound() {
        let mut input = b"1;".to_vec();
        input.extend(std::iter::repeat_n(b'a', MAX_CHUNK_EXTENSION_BYTES));
        input.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
        assert_eq!(run(&input, 10), Err(ChunkedError::ExtensionTooLong));
    }

    /// Rule: chunk sizes are hex digits of either case (RFC 9112 §7.1: `HEXDIG` is
    /// case-insensitive).
    #[test]
    fn lowercase_hex_chunk_sizes_decode() {
        let (body, _) = run(b"a\r\n0123456789\r\n0\r\n\r\n", 100).unwrap();
        assert_eq!(body, b"0123456789");
        let mut input = b"fF\r\n".to_vec();
        input.extend(std::iter::repeat_n(b'z', 0xff));
        input.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(run(&input, 1000).unwrap().0.len(), 0xff);
        let (body, _) = run(b"B\r\nhello world\r\n0\r\n\r\n", 100).unwrap();
        assert_eq!(body, b"hello world");
    }

    /// Rule: a chunk extension of exactly [`MAX_CHUNK_EXTENSION_BYTES`] (everything after
    /// the size digits up to the CR) is accepted; one byte more is refused.
    #[test]
    fn extension_of_exactly_the_maximum_length_is_accepted() {
        let line = |ext_len: usize| {
            let mut input = b"1;".to_vec();
            input.extend(std::iter::repeat_n(b'a', ext_len - 1));
            input.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
            input
        };
        let (body, _) = run(&line(MAX_CHUNK_EXTENSION_BYTES), 10).unwrap();
        assert_eq!(body, b"x");
        assert_eq!(
            run(&line(MAX_CHUNK_EXTENSION_BYTES + 1), 10),
            Err(ChunkedError::ExtensionTooLong)
        );
    }

    /// Rule: optional whitespace (BWS) around `;` and a tab inside an extension value are
    /// accepted (RFC 9112 §7.1.1); the extension is ignored.
    #[test]
    fn whitespace_around_semicolon_and_tab_in_extension_are_accepted() {
        for line in [
            &b"1 ;name=val\r\n"[..],
            b"1\t;name\r\n",
            b"1; name=val\r\n",
            b"1;\tname=val\r\n",
            b"1 \t; \tname=\"a\tb\"\r\n",
            b"1;name=a\tb\r\n",
        ] {
            let mut input = line.to_vec();
            input.extend_from_slice(b"x\r\n0\r\n\r\n");
            let got = run(&input, 10);
            assert_eq!(got, Ok((b"x".to_vec(), input.len())), "{line:?}");
        }
    }

    /// Rule: a chunk extension starts with a name (a token); `1;=x` has none.
    #[test]
    fn extension_without_a_name_is_refused() {
        assert_eq!(
            run(b"1;=x\r\na\r\n0\r\n\r\n", 10),
            Err(ChunkedError::InvalidSizeLine)
        );
        assert_eq!(
            run(b"1; =x\r\na\r\n0\r\n\r\n", 10),
            Err(ChunkedError::InvalidSizeLine)
        );
    }

    /// Rule: a bare LF ends no line of the framing: after a chunk size (with or without
    /// whitespace after it) and inside a trailer value it is a `BareLineEnding`, not a
    /// malformed size line or trailer.
    #[test]
    fn bare_lf_after_a_size_or_in_a_trailer_is_a_bare_line_ending() {
        for input in [
            &b"1\nx\r\n0\r\n\r\n"[..],
            b"1 \nx\r\n0\r\n\r\n",
            b"0\r\nX: a\nb\r\n\r\n",
            b"0\r\nX: a\n\r\n",
        ] {
            assert_eq!(
                run(input, 10),
                Err(ChunkedError::BareLineEnding),
                "{input:?}"
            );
        }
    }

    /// Rule: a trailer line starting with whitespace (obs-fold) is refused even when the
    /// rest of it would be a valid field.
    #[test]
    fn trailer_line_starting_with_whitespace_is_refused() {
        for input in [
            &b"0\r\n x: 1\r\n\r\n"[..],
            b"0\r\nX-T: 1\r\n folded: 2\r\n\r\n",
            b"0\r\n\tx: 1\r\n\r\n",
        ] {
            assert_eq!(
                run(input, 10),
                Err(ChunkedError::InvalidTrailer),
                "{input:?}"
            );
        }
    }

    /// Rule: a trailer field name is a non-empty token.
    #[test]
    fn trailer_field_with_an_empty_name_is_refused() {
        for input in [
            &b"0\r\n: v\r\n\r\n"[..],
            b"0\r\n:v\r\n\r\n",
            b"0\r\n::v\r\n\r\n",
        ] {
            assert_eq!(
                run(input, 10),
                Err(ChunkedError::InvalidTrailer),
                "{input:?}"
            );
        }
    }

    /// Rule: the trailer section (its field lines with their CRLFs; the empty line ending
    /// the body is not part of it) may hold exactly [`MAX_TRAILER_BYTES`]; one more byte
    /// is refused.
    #[test]
    fn trailer_section_of_exactly_the_limit_is_accepted_and_one_byte_more_refused() {
        // The documented limit, 4 KiB, by its number (a wrong constant must fail here).
        const LIMIT: usize = 4 * 1024;
        // One field line of `len` bytes: "X:" + value + CRLF.
        let body = |len: usize| {
            let mut input = b"0\r\nX:".to_vec();
            input.extend(std::iter::repeat_n(b'v', len - 4));
            input.extend_from_slice(b"\r\n\r\n");
            input
        };
        let exact = body(LIMIT);
        assert_eq!(run(&exact, 10), Ok((Vec::new(), exact.len())));
        assert_eq!(
            run(&body(LIMIT + 1), 10),
            Err(ChunkedError::TrailersTooLong)
        );
        // Several lines add up.
        let mut two = b"0\r\n".to_vec();
        for _ in 0..2 {
            two.extend_from_slice(b"X:");
            two.extend(std::iter::repeat_n(b'v', LIMIT / 2 - 4));
            two.extend_from_slice(b"\r\n");
        }
        two.extend_from_slice(b"\r\n");
        assert_eq!(run(&two, 10), Ok((Vec::new(), two.len())));
        two.insert(5, b'v');
        assert_eq!(run(&two, 10), Err(ChunkedError::TrailersTooLong));
    }

    /// Rule: the decoder reports itself done exactly when the final empty line was read,
    /// and consumes nothing after it.
    #[test]
    fn is_done_only_after_the_final_empty_line() {
        let mut d = ChunkedDecoder::new(10);
        let mut out = BytesMut::new();
        let input = b"1\r\nx\r\n0\r\nT: v\r\n\r\nNEXT";
        let end = input.len() - 4;
        for (i, b) in input[..end].iter().enumerate() {
            assert!(!d.is_done(), "done before byte {i}");
            d.decode(std::slice::from_ref(b), &mut out).unwrap();
        }
        assert!(d.is_done());
        assert_eq!(d.received(), 1);
        let p = d.decode(b"NEXT", &mut out).unwrap();
        assert_eq!((p.consumed, p.done), (0, true));
    }

    #[test]
    fn split_anywhere_gives_same_body() {
        let input = b"3;x=\"q\"\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\n";
        let whole = run(input, 100).unwrap().0;
        for cut in 0..input.len() {
            let mut d = ChunkedDecoder::new(100);
            let mut out = BytesMut::new();
            let p1 = d.decode(&input[..cut], &mut out).unwrap();
            assert_eq!(p1.consumed, cut);
            let p2 = d.decode(&input[cut..], &mut out).unwrap();
            assert!(p2.done);
            assert_eq!(out.to_vec(), whole);
        }
    }
}
