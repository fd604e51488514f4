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

mod exchange;
mod ops;
mod server_connection;
mod signed_record;

pub use signed_record::signed_record;

pub use exchange::exchange;
pub use server_connection::server_connection;

use bytes::BytesMut;
use peerblock_core::http::{
    BodyLimit, ChunkedDecoder, ChunkedError, OutgoingRequest, RequestDecoder, RequestError,
    ResponseDecoder, ResponseError, ResponseEvent, Route, MAX_ERROR_BODY_BYTES,
    MAX_REQUEST_HEAD_BYTES, MAX_RESPONSE_HEAD_BYTES, REQUEST_BUFFER_BYTES, RESPONSE_BUFFER_BYTES,
};
use peerblock_core::placement::{Key, ParseIdError, PeerId};
use peerblock_core::roster::{
    parse_roster_epoch, Roster, RosterDecodeError, RosterMember, MAX_ADDR_LEN, MAX_ID_LEN,
    MAX_QUOTED_EPOCH, MAX_ROSTER_BYTES, MAX_ROSTER_MEMBERS, NO_EPOCH,
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

// ---------------------------------------------------------------------------------------
// Network-input parsers outside the HTTP codec: the roster JSON, the epoch, the load
// header and the placement ids.
// ---------------------------------------------------------------------------------------

/// A JSON value that keeps every object key in order, duplicates included: the model's
/// view of a body, on which Go's reading rules are applied as a plain tree walk.
#[derive(Debug)]
enum Json {
    Null,
    Other,
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl<'de> serde::Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Json, E> {
                Ok(Json::Other)
            }
            fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
                Ok(Json::Num(v as f64))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
                Ok(Json::Num(v as f64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
                Ok(Json::Num(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Json, E> {
                Ok(Json::Str(v.to_owned()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = a.next_element()? {
                    out.push(v);
                }
                Ok(Json::Arr(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Json>()? {
                    out.push((k, v));
                }
                Ok(Json::Obj(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// Go's key folding for an ASCII field name, written independently of core's: Go folds
/// each rune to the smallest of its simple-fold orbit; the only non-ASCII runes whose
/// orbit holds an ASCII letter are U+017F (with `s`) and U+212A (with `k`).
fn go_folds_to(key: &str, lower_name: &str) -> bool {
    let folded: String = key
        .chars()
        .map(|c| match c {
            '\u{17F}' => 's',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    folded == lower_name
}

/// The model of `Roster::from_json` over a parsed tree: Go's rules (fold-matched keys in
/// order, the last one winning, `null` leaving a string or number as it was, `null`
/// members as none, `""` as epoch 0) plus peerblock's (every field present, members are
/// objects, the bounds). `None` = rejected.
fn roster_model(tree: &Json) -> Option<Roster> {
    let Json::Obj(fields) = tree else { return None };
    let mut epoch: Option<String> = None;
    let mut members: Option<Vec<&Json>> = None;
    for (k, v) in fields {
        if go_folds_to(k, "epoch") {
            match v {
                Json::Null => epoch = Some(epoch.unwrap_or_default()),
                Json::Str(s) => epoch = Some(s.clone()),
                _ => return None,
            }
        } else if go_folds_to(k, "members") {
            match v {
                Json::Null => members = Some(Vec::new()),
                // A value of the wrong type is an error even in an array a later key
                // replaces (Go's Unmarshal reports it too).
                Json::Arr(items) if items.iter().all(member_types_ok) => {
                    members = Some(items.iter().collect())
                }
                _ => return None,
            }
        }
    }
    let epoch = epoch?;
    let epoch = if epoch.is_empty() {
        0
    } else {
        if epoch.len() > 20 || !epoch.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        u64::try_from(epoch.parse::<u128>().ok()?).ok()?
    };
    let members = members?;
    if members.len() > MAX_ROSTER_MEMBERS {
        return None;
    }
    let mut out = Vec::new();
    for m in members {
        let Json::Obj(fields) = m else { return None };
        let (mut id, mut addr, mut weight) = (None::<String>, None::<String>, None::<f64>);
        for (k, v) in fields {
            let slot = if go_folds_to(k, "id") {
                &mut id
            } else if go_folds_to(k, "addr") {
                &mut addr
            } else if go_folds_to(k, "weight") {
                match v {
                    Json::Null => weight = Some(weight.unwrap_or(0.0)),
                    Json::Num(n) => weight = Some(*n),
                    _ => return None,
                }
                continue;
            } else {
                continue;
            };
            match v {
                Json::Null => *slot = Some(slot.take().unwrap_or_default()),
                Json::Str(s) => *slot = Some(s.clone()),
                _ => return None,
            }
        }
        let (id, addr, weight) = (id?, addr?, weight?);
        let ok = !id.is_empty()
            && id.len() <= MAX_ID_LEN
            && !addr.is_empty()
            && addr.len() <= MAX_ADDR_LEN
            && weight.is_finite()
            && weight >= 0.0;
        if !ok {
            return None;
        }
        out.push(RosterMember {
            id,
            addr,
            weight,
            record: Default::default(),
        });
    }
    Some(Roster {
        epoch,
        members: out,
        epoch_sig: None,
    })
}

/// Whether a members-array element has the member shape: an object whose id and address
/// are strings or `null` and whose weight is a number or `null` (other keys: anything).
fn member_types_ok(m: &Json) -> bool {
    let Json::Obj(fields) = m else { return false };
    fields.iter().all(|(k, v)| {
        if go_folds_to(k, "id") || go_folds_to(k, "addr") {
            matches!(v, Json::Str(_) | Json::Null)
        } else if go_folds_to(k, "weight") {
            matches!(v, Json::Num(_) | Json::Null)
        } else {
            true
        }
    })
}

/// A roster written the way a Go peer would, with the key spellings, weight forms and
/// extras chosen by `style` bytes (cycled).
fn go_style_json(r: &Roster, style: &[u8]) -> String {
    let mut at = 0usize;
    let mut pick = |n: u8| -> u8 {
        let b = if style.is_empty() {
            0
        } else {
            style[at % style.len()]
        };
        at += 1;
        b % n
    };
    let spell = |name: &str, pick: &mut dyn FnMut(u8) -> u8| -> String {
        match pick(5) {
            0 => {
                // Go's field name: ID is all capitals, the rest capitalised.
                if name == "id" {
                    "ID".to_owned()
                } else {
                    let mut s = name.to_owned();
                    s[..1].make_ascii_uppercase();
                    s
                }
            }
            1 => name.to_owned(),
            2 => name.to_ascii_uppercase(),
            3 => name
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if i % 2 == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect(),
            _ => name.replace('s', "\u{17F}"),
        }
    };
    let quote = |s: &str| serde_json::to_string(s).expect("string");
    let mut out = String::from("{");
    if pick(4) == 0 {
        out.push_str("\"State\":\"dead\",");
    }
    let epoch_key = spell("epoch", &mut pick);
    if pick(4) == 0 {
        // An earlier duplicate in another spelling: the later value wins.
        out.push_str(&format!(
            "{}:\"999\",",
            quote(&epoch_key.to_ascii_lowercase())
        ));
    }
    let epoch_text = if r.epoch == 0 && pick(2) == 0 {
        String::new()
    } else {
        r.epoch.to_string()
    };
    out.push_str(&format!("{}:{},", quote(&epoch_key), quote(&epoch_text)));
    out.push_str(&quote(&spell("members", &mut pick)));
    out.push(':');
    if r.members.is_empty() && pick(2) == 0 {
        out.push_str("null");
    } else {
        out.push('[');
        for (i, m) in r.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let weight = if m.weight.fract() == 0.0 && m.weight.abs() < 1e15 && pick(2) == 0 {
                format!("{}", m.weight as i64) // Go's form of a whole float64
            } else {
                format!("{:?}", m.weight)
            };
            out.push_str(&format!(
                "{{{}:{},{}:{},{}:{}}}",
                quote(&spell("id", &mut pick)),
                quote(&m.id),
                quote(&spell("addr", &mut pick)),
                quote(&m.addr),
                quote(&spell("weight", &mut pick)),
                weight
            ));
        }
        out.push(']');
    }
    out.push('}');
    out
}

/// Builds a roster from fuzz bytes (member fields may break the bounds on purpose).
fn model_roster(data: &[u8]) -> Roster {
    let (head, rest) = take::<9>(data);
    let epoch = match head[0] % 4 {
        0 => 0,
        1 => u64::MAX,
        2 => u64::from(head[1]),
        _ => u64::from_le_bytes(head[1..9].try_into().expect("8 bytes")),
    };
    let mut members = Vec::new();
    for chunk in rest.chunks(6).take(usize::from(head[0] / 4 % 5)) {
        let (c, _) = take::<6>(chunk);
        let len = |b: u8| match b % 8 {
            0 => 0,
            7 => 300,
            n => usize::from(n) * 3,
        };
        let text = |n: usize, ch: char| -> String { std::iter::repeat_n(ch, n).collect() };
        let id = text(len(c[0]), if c[1] % 3 == 0 { 'é' } else { 'n' });
        let addr = text(len(c[2]), if c[3] % 5 == 0 { '"' } else { 'a' });
        let weight = match c[4] % 6 {
            0 => 0.0,
            1 => 1.0,
            2 => 0.5,
            3 => 2.25,
            4 => -1.0,
            _ => f64::from(c[5]) / 8.0,
        };
        members.push(RosterMember {
            id,
            addr,
            weight,
            record: Default::default(),
        });
    }
    Roster {
        epoch,
        members,
        epoch_sig: None,
    }
}

/// Roster decoder. First byte even: the rest is a body off the wire; whatever the decoder
/// accepts is within the bounds, re-encodes (our spelling) and decodes to itself, and
/// agrees with an independent model of Go's reading rules whenever that model can parse
/// the body. First byte odd: the rest builds a roster, written as a Go peer would (key
/// spellings, whole weights without a fraction, `null` members, `""` epoch, duplicates,
/// unknown fields chosen by the bytes); the decoder reads back exactly that roster when
/// it is within the bounds and rejects it otherwise.
pub fn roster_json(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let decoded = Roster::from_json(rest);
        if rest.len() > MAX_ROSTER_BYTES {
            assert!(matches!(decoded, Err(RosterDecodeError::TooLarge { .. })));
            return;
        }
        if let Ok(r) = &decoded {
            assert!(r.members.len() <= MAX_ROSTER_MEMBERS);
            assert_eq!(r.check(), Ok(()), "accepted roster within the bounds");
            let again = r.to_json();
            assert!(again.len() <= MAX_ROSTER_BYTES);
            assert_eq!(
                Roster::from_json(&again).as_ref().ok(),
                Some(r),
                "round trip"
            );
        }
        if let Ok(tree) = serde_json::from_slice::<Json>(rest) {
            let model = roster_model(&tree);
            assert_eq!(
                decoded.as_ref().ok(),
                model.as_ref(),
                "decoder {decoded:?} disagrees with the model"
            );
        }
    } else {
        let (style, build) = rest.split_at(rest.len().min(8));
        let model = model_roster(build);
        let json = go_style_json(&model, style);
        let decoded = Roster::from_json(json.as_bytes());
        match model.check() {
            Ok(()) => assert_eq!(decoded.ok(), Some(model), "{json}"),
            Err(e) => assert!(decoded.is_err(), "{json} accepted despite {e}"),
        }
    }
}

/// Epoch parsers: `wire::parse_epoch` agrees with an independent model (1 to 20 digits,
/// value fits a u64) and round-trips through its decimal form; the roster's epoch rule
/// is the same grammar plus `""` as [`NO_EPOCH`], and a roster body carrying the text
/// (JSON-escaped) decodes to the same epoch or is rejected for it.
pub fn epoch(data: &[u8]) {
    let parsed = wire::parse_epoch(data);
    let model = if !data.is_empty() && data.len() <= 20 && data.iter().all(u8::is_ascii_digit) {
        let text = std::str::from_utf8(data).expect("digits");
        u64::try_from(text.parse::<u128>().expect("20 digits fit u128")).ok()
    } else {
        None
    };
    assert_eq!(parsed, model, "parse_epoch vs model");
    if let Some(e) = parsed {
        assert_eq!(wire::parse_epoch(e.to_string().as_bytes()), Some(e));
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let roster_epoch = parse_roster_epoch(text);
    let expected = if text.is_empty() {
        Some(NO_EPOCH)
    } else {
        parsed
    };
    assert_eq!(roster_epoch, expected);
    let body = format!(
        r#"{{"Epoch":{},"Members":[]}}"#,
        serde_json::to_string(text).expect("string")
    );
    match (Roster::from_json(body.as_bytes()), roster_epoch) {
        (Ok(r), Some(e)) => {
            assert_eq!(r.epoch, e);
            let written = String::from_utf8(r.to_json()).expect("utf-8");
            assert!(
                written.starts_with(&format!(r#"{{"epoch":"{e}","#)),
                "{written}"
            );
        }
        (Err(RosterDecodeError::Epoch { value }), None) => {
            assert!(value.len() <= MAX_QUOTED_EPOCH);
            assert!(
                text.starts_with(&value),
                "the quote is a prefix of the text"
            );
        }
        (got, want) => panic!("roster body {body}: {got:?}, expected epoch {want:?}"),
    }
}

/// `X-Peerblock-Load`: `wire::parse_load` agrees with an independent model (1 to 10
/// digits, value fits a u32) and round-trips; inside a response head (when the bytes can
/// be a header value), `ResponseHead::load` reports the same as `parse_load` on the
/// value without its surrounding whitespace.
pub fn load(data: &[u8]) {
    let parsed = wire::parse_load(data);
    let model = if !data.is_empty() && data.len() <= 10 && data.iter().all(u8::is_ascii_digit) {
        let text = std::str::from_utf8(data).expect("digits");
        u32::try_from(text.parse::<u64>().expect("10 digits fit u64")).ok()
    } else {
        None
    };
    assert_eq!(parsed, model, "parse_load vs model");
    if let Some(l) = parsed {
        assert_eq!(wire::parse_load(l.to_string().as_bytes()), Some(l));
    }
    if data.iter().any(|&b| b == b'\r' || b == b'\n') {
        return;
    }
    let mut head = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nX-Peerblock-Load: ".to_vec();
    head.extend_from_slice(data);
    head.extend_from_slice(b"\r\n\r\n");
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::AtMost(0)).expect("fresh decoder");
    d.feed(&head);
    let polled = d.poll();
    if data.iter().all(|b| b.is_ascii_alphanumeric() || *b == b' ') {
        // A plain token value (spaces around or inside included) is a valid field value.
        assert!(
            matches!(polled, Ok(Some(ResponseEvent::Head(_)))),
            "head with load {data:?}: {polled:?}"
        );
    }
    if let Ok(Some(ResponseEvent::Head(h))) = polled {
        let trimmed = {
            let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
            let start = data.iter().position(|b| !is_ows(b)).unwrap_or(data.len());
            let end = data
                .iter()
                .rposition(|b| !is_ows(b))
                .map_or(start, |e| e + 1);
            &data[start..end.max(start)]
        };
        assert_eq!(h.load(), wire::parse_load(trimmed), "value {data:?}");
    }
}

/// `PeerId` / `Key` parsing: agrees with an independent model (exactly 64 bytes, all hex
/// digits of either case; the error names the byte length or the first bad byte), both
/// types agree, and a parsed id prints back as the lower-cased input.
pub fn placement_ids(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let model: Result<[u8; 32], ParseIdError> = if text.len() != 64 {
        Err(ParseIdError::Length(text.len()))
    } else if let Some(at) = text.bytes().position(|b| !b.is_ascii_hexdigit()) {
        Err(ParseIdError::Digit(at))
    } else {
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex");
        }
        Ok(out)
    };
    let id = text.parse::<PeerId>().map(|p| p.0);
    let key = text.parse::<Key>().map(|k| k.0);
    assert_eq!(id, model);
    assert_eq!(key, model);
    if let Ok(bytes) = model {
        assert_eq!(PeerId(bytes).to_hex(), text.to_ascii_lowercase());
        assert_eq!(Key(bytes).to_hex(), text.to_ascii_lowercase());
        assert_eq!(PeerId(bytes).to_hex().parse::<PeerId>(), Ok(PeerId(bytes)));
    }
}

/// `Content-Range` parser (object origins' `206`/`416`): never panics; a byte range it
/// accepts is consistent (`first <= last < total`), and the canonical form of what it
/// accepted parses to the same value.
pub fn content_range(data: &[u8]) {
    use peerblock_core::client::ContentRange;
    match ContentRange::parse(data) {
        Ok(r @ ContentRange::Bytes { first, last, total }) => {
            assert!(first <= last && last < total, "{r:?}");
            let text = format!("bytes {first}-{last}/{total}");
            assert_eq!(ContentRange::parse(text.as_bytes()), Ok(r));
        }
        Ok(r @ ContentRange::Unsatisfied { total }) => {
            let text = format!("bytes */{total}");
            assert_eq!(ContentRange::parse(text.as_bytes()), Ok(r));
        }
        Err(_) => {}
    }
}

/// Object identity in an origin header (`X-DART-Origin` with `#peerblock-object=...`):
/// never panics; an identity it accepts re-encodes to a header that parses to the same
/// identity and key, and it agrees with its own key exactly for indices below its block
/// count. The input is used as a whole header and as the fragment's fields.
pub fn object_origin(data: &[u8]) {
    use peerblock_common::object::parse_origin;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for header in [
        text.to_owned(),
        format!("http://h.test:8080/o?sig=1#peerblock-object={text}"),
    ] {
        if let Ok(Some(id)) = parse_origin(&header) {
            let again = parse_origin(&id.origin_header())
                .expect("its own header parses")
                .expect("an identity");
            assert_eq!(again, id);
            let key = id.key();
            assert_eq!(again.key(), key);
            assert_eq!(id.agrees(key.as_bytes(), 0), id.blocks() > 0);
            assert!(!id.agrees(key.as_bytes(), id.blocks()));
        }
    }
}
