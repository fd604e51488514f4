//! Property checks behind every fuzz target.
//!
//! Each public function takes the fuzzer's bytes and panics if a property is violated.
//! The libFuzzer binaries in `fuzz_targets/` call them (`cargo fuzz run <name>`, see
//! `docs/fuzzing.md`), and `tests/corpus.rs` replays every committed corpus file through
//! the same functions on stable, so CI exercises them without nightly or libFuzzer.
//!
//! Properties, not just "no panic": split invariance (the same events whether the input
//! arrives whole or in pieces), bounded buffers, byte accounting (consumed + buffered +
//! discarded == fed), limits honoured, and encode/decode round trips.
#![forbid(unsafe_code)]

use bytes::BytesMut;
use peerblock_core::http::{
    BodyLimit, ChunkedDecoder, ChunkedError, OutgoingRequest, RequestDecoder, RequestError,
    ResponseDecoder, ResponseError, ResponseEvent, Route, MAX_ERROR_BODY_BYTES,
    MAX_REQUEST_HEAD_BYTES, MAX_RESPONSE_HEAD_BYTES, REQUEST_BUFFER_BYTES, RESPONSE_BUFFER_BYTES,
};
use peerblock_core::wire::{self, BlockPath, Hop, PathError, BLOCK_PATH_PREFIX};

/// Splits `data` into up to three pieces at cut points derived from `seed`.
fn pieces(data: &[u8], seed: [u8; 4]) -> Vec<&[u8]> {
    if data.is_empty() {
        return vec![data];
    }
    let a = usize::from(u16::from_le_bytes([seed[0], seed[1]])) % (data.len() + 1);
    let b = usize::from(u16::from_le_bytes([seed[2], seed[3]])) % (data.len() + 1);
    let (lo, hi) = (a.min(b), a.max(b));
    vec![&data[..lo], &data[lo..hi], &data[hi..]]
}

fn take<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let mut out = [0u8; N];
    let n = data.len().min(N);
    out[..n].copy_from_slice(&data[..n]);
    (out, &data[n..])
}

/// What a request decoder produced, in a comparable form.
#[derive(Debug, PartialEq)]
enum RequestEvent {
    Request {
        head: Vec<u8>,
        route: Result<Route, peerblock_core::http::Rejection>,
        keep_alive: bool,
        origin: Option<Vec<u8>>,
    },
    Error(RequestError),
}

/// Runs the request decoder over `chunks`. With `zero_copy`, every chunk first goes
/// through `decode_slice` (requests borrowed straight from the chunk) and only what it
/// leaves is fed; the events must not depend on it. Without it, every other chunk is
/// written into `read_buf` and committed with `advance` instead of `feed`: the events must
/// not depend on that either.
fn run_requests(chunks: &[&[u8]], zero_copy: bool) -> Vec<RequestEvent> {
    let total: usize = chunks.iter().map(|c| c.len()).sum();
    let mut d = RequestDecoder::new();
    let mut events = Vec::new();
    let (mut heads, mut discarded, mut failed) = (0usize, 0usize, false);
    for (index, chunk) in chunks.iter().enumerate() {
        let via_window = !zero_copy && index % 2 == 1;
        let mut rest = *chunk;
        while zero_copy && !failed {
            let buffered = d.buffered();
            match d.decode_slice(rest) {
                Ok(Some(r)) => {
                    assert_eq!(buffered, 0, "decode_slice jumped the buffered bytes");
                    assert!(r.head_len() <= MAX_REQUEST_HEAD_BYTES);
                    assert_eq!(
                        r.head(),
                        &rest[..r.head_len()],
                        "head is the input's prefix"
                    );
                    heads += r.head_len();
                    rest = &rest[r.head_len()..];
                    events.push(RequestEvent::Request {
                        head: r.head().to_vec(),
                        route: r.route(),
                        keep_alive: r.keep_alive(),
                        origin: r.origin().map(<[u8]>::to_vec),
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    assert_eq!(d.decode().err(), Some(e), "errors are sticky");
                    assert_eq!(d.decode_slice(rest).err(), Some(e), "errors are sticky");
                    failed = true;
                    events.push(RequestEvent::Error(e));
                }
            }
        }
        loop {
            let was_closed = d.is_closed();
            let n = if via_window && !was_closed {
                let window = d.read_buf();
                assert!(window.len() <= REQUEST_BUFFER_BYTES);
                let k = window.len().min(rest.len());
                window[..k].copy_from_slice(&rest[..k]);
                let n = d.advance(k);
                assert_eq!(n, k, "an open decoder takes the whole window it lent");
                n
            } else {
                d.feed(rest)
            };
            assert!(n <= rest.len());
            if was_closed {
                assert_eq!(n, rest.len(), "a closed decoder discards everything");
                discarded += n;
            }
            rest = &rest[n..];
            assert!(
                d.buffered() <= REQUEST_BUFFER_BYTES,
                "buffer over its bound"
            );
            let mut progressed = false;
            while !failed {
                match d.decode() {
                    Ok(Some(r)) => {
                        assert!(r.head().len() <= MAX_REQUEST_HEAD_BYTES);
                        heads += r.head().len();
                        progressed = true;
                        events.push(RequestEvent::Request {
                            head: r.head().to_vec(),
                            route: r.route(),
                            keep_alive: r.keep_alive(),
                            origin: r.origin().map(<[u8]>::to_vec),
                        });
                    }
                    Ok(None) => break,
                    Err(e) => {
                        assert_eq!(d.decode().err(), Some(e), "errors are sticky");
                        failed = true;
                        progressed = true;
                        events.push(RequestEvent::Error(e));
                    }
                }
            }
            if rest.is_empty() {
                break;
            }
            assert!(
                n > 0 || progressed || d.is_closed(),
                "decoder stalled: full buffer, no request, no error"
            );
        }
    }
    assert_eq!(
        heads + d.buffered() + discarded,
        total,
        "consumed + buffered + discarded == input"
    );
    events
}

/// Request decoder: split invariance, bounds, accounting, and re-encoding every decoded
/// block request yields the same route.
pub fn request_decoder(data: &[u8]) {
    let (seed, stream) = take::<4>(data);
    let whole = run_requests(&[stream], false);
    let split = run_requests(&pieces(stream, seed), false);
    assert_eq!(whole, split, "split changed the decoded requests");
    let whole_zero_copy = run_requests(&[stream], true);
    assert_eq!(
        whole, whole_zero_copy,
        "decode_slice changed the decoded requests"
    );
    let split_zero_copy = run_requests(&pieces(stream, seed), true);
    assert_eq!(
        whole, split_zero_copy,
        "decode_slice changed the split requests"
    );
    for event in &whole {
        if let RequestEvent::Request {
            route: Ok(Route::Block { path, hop }),
            origin,
            ..
        } = event
        {
            let origin = origin.as_deref().and_then(|o| std::str::from_utf8(o).ok());
            let mut req = OutgoingRequest::block("h", *path);
            req.hop = Some(*hop);
            req.origin = origin;
            let mut out = BytesMut::new();
            req.encode(&mut out).expect("decoded values re-encode");
            let mut d = RequestDecoder::new();
            d.feed(&out);
            let again = d
                .decode()
                .expect("re-encoded request decodes")
                .expect("complete");
            assert_eq!(
                again.route(),
                Ok(Route::Block {
                    path: *path,
                    hop: *hop
                })
            );
        }
    }
}

#[derive(Debug, PartialEq)]
enum ClientEvent {
    Head {
        head: Vec<u8>,
        status: u16,
        keep_alive: bool,
    },
    Body(Vec<u8>),
    Error(ResponseError),
}

/// Runs the response decoder over `chunks`. With `read_into`, bytes go in through
/// `read_buf` + `advance` (as a driver reading straight into the decoder would) instead
/// of `feed`; the events must not depend on it.
fn run_responses(
    chunks: &[&[u8]],
    limit: BodyLimit,
    eof: bool,
    read_into: bool,
) -> Vec<ClientEvent> {
    let total: usize = chunks.iter().map(|c| c.len()).sum();
    let bound = RESPONSE_BUFFER_BYTES
        .max(usize::try_from(limit.max().saturating_add(1)).unwrap_or(usize::MAX));
    let mut d = ResponseDecoder::new();
    d.expect(limit).expect("fresh decoder accepts a request");
    let mut events = Vec::new();
    let (mut discarded, mut failed, mut status) = (0usize, false, 0u16);
    let mut drain = |d: &mut ResponseDecoder, events: &mut Vec<ClientEvent>| -> bool {
        let mut progressed = false;
        while !failed {
            match d.poll() {
                Ok(Some(ResponseEvent::Head(h))) => {
                    assert!(h.head().len() <= MAX_RESPONSE_HEAD_BYTES);
                    status = h.status();
                    events.push(ClientEvent::Head {
                        head: h.head().to_vec(),
                        status,
                        keep_alive: h.keep_alive(),
                    });
                    progressed = true;
                }
                Ok(Some(ResponseEvent::Body(b))) => {
                    let len = b.len() as u64;
                    match (status, limit) {
                        (200, BodyLimit::Exact(n)) => assert_eq!(len, n, "exact length"),
                        (200, BodyLimit::AtMost(n)) => assert!(len <= n),
                        _ => assert!(len <= MAX_ERROR_BODY_BYTES),
                    }
                    events.push(ClientEvent::Body(b.to_vec()));
                    progressed = true;
                    // The client sends its next request on a reusable connection.
                    if !d.is_closed() {
                        let _ = d.expect(limit);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    assert_eq!(d.poll().unwrap_err(), e, "errors are sticky");
                    failed = true;
                    progressed = true;
                    events.push(ClientEvent::Error(e));
                }
            }
        }
        progressed
    };
    for chunk in chunks {
        let mut rest = *chunk;
        loop {
            let was_closed = d.is_closed();
            let n = if read_into {
                let room = d.room();
                let window = d.read_buf();
                assert!(window.len() <= room, "window beyond room");
                let n = window.len().min(rest.len());
                window[..n].copy_from_slice(&rest[..n]);
                assert_eq!(d.advance(n), n);
                n
            } else {
                d.feed(rest)
            };
            assert!(n <= rest.len());
            if was_closed {
                discarded += n;
            }
            rest = &rest[n..];
            assert!(d.buffered() <= bound, "buffer over its bound");
            let progressed = drain(&mut d, &mut events);
            if rest.is_empty() {
                break;
            }
            assert!(n > 0 || progressed || d.is_closed(), "decoder stalled");
        }
    }
    if eof {
        d.handle_eof();
        drain(&mut d, &mut events);
    }
    assert_eq!(
        d.consumed() as usize + d.buffered() + discarded,
        total,
        "consumed + buffered + discarded == input"
    );
    events
}

/// Response decoder with a fuzzed expected length: split invariance, the caller's limit
/// (exact length on a 200, never more than limit + 1 buffered body bytes), accounting.
pub fn response_decoder(data: &[u8]) {
    let (params, stream) = take::<13>(data);
    let mode = params[0];
    let raw = u64::from_le_bytes(params[1..9].try_into().expect("8 bytes"));
    // Mostly small limits, so bodies can actually match; sometimes the full u64 range.
    let n = if mode & 2 == 0 { raw % 512 } else { raw };
    let limit = if mode & 1 == 0 {
        BodyLimit::Exact(n)
    } else {
        BodyLimit::AtMost(n)
    };
    let eof = mode & 4 != 0;
    let seed = params[9..13].try_into().expect("4 bytes");
    let whole = run_responses(&[stream], limit, eof, false);
    let split = run_responses(&pieces(stream, seed), limit, eof, false);
    let split_read_into = run_responses(&pieces(stream, seed), limit, eof, true);
    assert_eq!(
        whole, split_read_into,
        "read_buf + advance changed the events"
    );
    assert_eq!(whole, split, "split changed the decoded responses");
}

fn run_chunked(chunks: &[&[u8]], limit: u64) -> (Vec<u8>, usize, Result<bool, ChunkedError>) {
    let mut d = ChunkedDecoder::new(limit);
    let mut out = BytesMut::new();
    let mut consumed = 0;
    for chunk in chunks {
        match d.decode(chunk, &mut out) {
            Ok(p) => {
                assert!(p.consumed <= chunk.len());
                assert!(p.done || p.consumed == chunk.len(), "stopped early");
                consumed += p.consumed;
                assert_eq!(d.received(), out.len() as u64);
                assert!(d.received() <= limit, "body past its limit");
                if p.done {
                    return (out.to_vec(), consumed, Ok(true));
                }
            }
            // How far earlier pieces got is not comparable at an error; the output and
            // the error are.
            Err(e) => return (out.to_vec(), 0, Err(e)),
        }
    }
    (out.to_vec(), consumed, Ok(false))
}

/// Chunked decoder: split invariance, limit, accounting, and a decoded body re-encoded
/// as one chunk decodes to itself.
pub fn chunked_decoder(data: &[u8]) {
    let (params, stream) = take::<6>(data);
    let limit = u64::from(u16::from_le_bytes([params[0], params[1]]));
    let seed = params[2..6].try_into().expect("4 bytes");
    let whole = run_chunked(&[stream], limit);
    let split = run_chunked(&pieces(stream, seed), limit);
    assert_eq!(whole, split, "split changed the chunked decode");
    let (body, consumed, outcome) = whole;
    assert!(consumed <= stream.len());
    if outcome == Ok(true) {
        let mut encoded = format!("{:x}\r\n", body.len()).into_bytes();
        encoded.extend_from_slice(&body);
        encoded.extend_from_slice(b"\r\n0\r\n\r\n");
        if body.is_empty() {
            encoded = b"0\r\n\r\n".to_vec();
        }
        let (again, used, done) = run_chunked(&[&encoded], limit);
        assert_eq!((again, used, done), (body, encoded.len(), Ok(true)));
    }
}

/// An independent model of the block path grammar (docs/wire.md).
fn block_path_model(path: &[u8]) -> Option<(Vec<u8>, u64)> {
    let rest = path.strip_prefix(BLOCK_PATH_PREFIX.as_bytes())?;
    let text = std::str::from_utf8(rest).ok()?;
    let (key, index) = text.split_once('/')?;
    if key.is_empty() || key.len() > 128 || key.len() % 2 != 0 {
        return None;
    }
    if !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) || index.len() > 20 {
        return None;
    }
    if index.len() > 1 && index.starts_with('0') {
        return None;
    }
    let value: u128 = index.parse().ok()?;
    let value = u64::try_from(value).ok()?;
    let bytes = (0..key.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&key[i..i + 2], 16).expect("hex"))
        .collect();
    Some((bytes, value))
}

/// Block path parser: agrees with an independent model, formats canonically (lower-case
/// hex, same index), and the canonical form parses back to the same block.
pub fn block_path(data: &[u8]) {
    let parsed = BlockPath::parse(data);
    let model = block_path_model(data);
    match (&parsed, &model) {
        (Ok(p), Some((key, index))) => {
            assert_eq!(p.key.as_bytes(), &key[..]);
            assert_eq!(p.index, *index);
            let text = p.to_string();
            assert_eq!(text.as_bytes(), data.to_ascii_lowercase());
            assert_eq!(BlockPath::parse(text.as_bytes()), Ok(*p));
        }
        (Err(e), None) => {
            let not_block = !data.starts_with(BLOCK_PATH_PREFIX.as_bytes());
            assert_eq!(*e == PathError::NotBlockPath, not_block);
            assert_eq!(
                e.status().code(),
                if not_block { 404 } else { 400 },
                "status of {e:?}"
            );
        }
        _ => panic!("parser {parsed:?} disagrees with model {model:?}"),
    }
}

/// Hop parser: agrees with an independent model (non-empty digits whose value fits a
/// u32; absent = 0) and round-trips through its decimal form.
pub fn hop(data: &[u8]) {
    assert_eq!(wire::parse_hop(None), Ok(Hop(0)));
    let parsed = wire::parse_hop(Some(data));
    let model = if !data.is_empty() && data.iter().all(u8::is_ascii_digit) {
        let trimmed = std::str::from_utf8(data)
            .expect("digits")
            .trim_start_matches('0');
        if trimmed.len() > 10 {
            None
        } else {
            u32::try_from(trimmed.parse::<u64>().unwrap_or(0)).ok()
        }
    } else {
        None
    };
    match (parsed, model) {
        (Ok(Hop(h)), Some(m)) => {
            assert_eq!(h, m);
            let text = h.to_string();
            assert_eq!(wire::parse_hop(Some(text.as_bytes())), Ok(Hop(h)));
        }
        (Err(e), None) => assert_eq!(e.status().code(), 400),
        (p, m) => panic!("parser {p:?} disagrees with model {m:?}"),
    }
}
