//! Server connection machine: every status path, hop validation, admission at each limit,
//! explicit refusal, budgets released on every path, pipelining order, relay decisions.

use std::sync::Arc;

use bytes::Bytes;
use peerblock_core::refusal::{self, Refusal, RefusalReason};
use peerblock_core::server::{
    Admission, AdmissionConfig, RateLimit, RelayConfig, RequestId, ServerConfig, ServerConnection,
    ServerEvent, SourceRequest, SourceResult, DEFAULT_IDLE_TIMEOUT,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::transmit::{Close, Transmit};
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};

mod admission;
mod bytes_in;
mod eof;
mod lifecycle;
mod linger;
mod liveness;
mod peer_errors;
mod pipelining;
mod refusal_answer;
mod refusal_bound;
mod relay;
mod release;
mod status;

const T0: Instant = Instant::ZERO;

fn path(n: u8) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([n; 32]),
        index: u64::from(n),
    }
}

fn get(p: BlockPath, extra: &str) -> Vec<u8> {
    format!("GET {p} HTTP/1.1\r\nHost: s\r\n{extra}\r\n").into_bytes()
}

fn config() -> Arc<ServerConfig> {
    Arc::new(ServerConfig::new("node-a", "10.0.0.1:7070"))
}

fn relay_config(identity_ok: bool) -> Arc<ServerConfig> {
    let mut c = ServerConfig::new("node-a", "10.0.0.1:7070");
    c.relay = Some(RelayConfig {
        max_hop: 3,
        max_block_index: 1000,
    });
    c.identity = Arc::new(move |_: &str, _: &[u8], _: u64| identity_ok);
    Arc::new(c)
}

fn admission(c: AdmissionConfig) -> Admission<u32> {
    Admission::new(c).unwrap()
}

fn accept(
    adm: &mut Admission<u32>,
    source: u32,
    config: Arc<ServerConfig>,
) -> ServerConnection<u32> {
    let c = ServerConnection::accept(T0, adm, source, config).expect("valid config");
    assert_eq!(c.refused(), None, "refused");
    c
}

/// Feeds `data` as a driver does: the bytes, then admission if requests wait for it.
fn input(conn: &mut ServerConnection<u32>, adm: &mut Admission<u32>, data: &[u8]) -> usize {
    input_at(conn, adm, T0, data)
}

fn input_at(
    conn: &mut ServerConnection<u32>,
    adm: &mut Admission<u32>,
    now: Instant,
    data: &[u8],
) -> usize {
    let taken = conn.handle_input(now, data);
    if conn.needs_admission() {
        conn.handle_admission(now, adm);
    }
    taken
}

/// The events that ask the application something (fetch, relay, roster).
fn asks(events: &[ServerEvent]) -> Vec<&ServerEvent> {
    events
        .iter()
        .filter(|e| {
            matches!(
                e,
                ServerEvent::Fetch { .. } | ServerEvent::Relay { .. } | ServerEvent::Roster { .. }
            )
        })
        .collect()
}

fn events(conn: &mut ServerConnection<u32>) -> Vec<ServerEvent> {
    std::iter::from_fn(|| conn.poll_event()).collect()
}

fn fetch_ids(events: &[ServerEvent]) -> Vec<(RequestId, SourceRequest)> {
    events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::Fetch { id, request } => Some((*id, request.clone())),
            _ => None,
        })
        .collect()
}

/// Drains transmits, acknowledging each as written.
fn transmits(conn: &mut ServerConnection<u32>, adm: &mut Admission<u32>) -> Vec<Transmit> {
    let mut out = Vec::new();
    while let Some(t) = conn.poll_transmit(T0) {
        out.push(t);
        conn.handle_transmitted(T0, adm);
    }
    out
}

fn head(t: &Transmit) -> String {
    String::from_utf8(t.head.to_vec()).unwrap()
}

/// One request on a fresh connection; the source answers `result` if asked.
fn serve_one(
    config: Arc<ServerConfig>,
    request: &[u8],
    result: SourceResult,
) -> (Vec<ServerEvent>, Vec<Transmit>, Admission<u32>) {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config);
    assert_eq!(input(&mut conn, &mut adm, request), request.len());
    let evs = events(&mut conn);
    for (id, _) in fetch_ids(&evs) {
        conn.handle_source(T0, &mut adm, id, result.clone())
            .unwrap();
    }
    let ts = transmits(&mut conn, &mut adm);
    conn.close(T0, &mut adm);
    (evs, ts, adm)
}

fn assert_released(adm: &Admission<u32>) {
    assert_eq!(adm.sessions(), 0, "session slot leaked");
    assert_eq!(adm.requests(), 0, "request slot leaked");
    assert_eq!(adm.inflight_bytes(), 0, "byte budget leaked");
}

/// A connection on an admission whose rate bucket (`limits.rate`, one token) its first
/// request has just spent: its next request is refused with `rate`.
fn bucket_spent(limits: AdmissionConfig) -> (Admission<u32>, ServerConnection<u32>) {
    let mut adm = admission(AdmissionConfig {
        rate: Some(RateLimit {
            per_second: 1,
            burst: 1,
        }),
        ..limits
    });
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    let _ = transmits(&mut conn, &mut adm);
    (adm, conn)
}

fn small_limits() -> AdmissionConfig {
    AdmissionConfig {
        max_sessions: 3,
        max_sessions_per_source: 2,
        max_requests: 5,
        max_requests_per_session: 2,
        max_inflight_bytes: 100,
        max_inflight_bytes_per_source: 60,
        retry_after: Duration::from_millis(1500),
        ..AdmissionConfig::default()
    }
}

fn with_origin(p: BlockPath, hop: u32) -> Vec<u8> {
    get(
        p,
        &format!("X-DART-Origin: https://origin/x\r\nX-DART-Hop: {hop}\r\n"),
    )
}

fn three_gets() -> Vec<u8> {
    let mut three = get(path(1), "");
    three.extend(get(path(2), ""));
    three.extend(get(path(3), ""));
    three
}

/// Reads `data` through `read_buf`/`handle_read`, in windows as the machine offers them.
fn read_via_buf(conn: &mut ServerConnection<u32>, data: &[u8]) -> usize {
    let mut off = 0;
    while off < data.len() {
        let Some(window) = conn.read_buf() else {
            break;
        };
        assert!(!window.is_empty(), "a window is never empty");
        let n = window.len().min(data.len() - off);
        window[..n].copy_from_slice(&data[off..off + n]);
        let taken = conn.handle_read(T0, n);
        assert_eq!(taken, n);
        off += taken;
    }
    off
}

fn malformed_then_linger(adm: &mut Admission<u32>) -> ServerConnection<u32> {
    let mut conn = accept(adm, 1, config());
    input(&mut conn, adm, b"garbage\r\n\r\n");
    assert!(matches!(
        events(&mut conn)[..],
        [ServerEvent::Rejected { .. }]
    ));
    let ts = transmits(&mut conn, adm);
    assert_eq!(ts[0].status, Some(400));
    assert_eq!(ts[0].close, Close::Linger);
    assert!(!conn.is_finished());
    conn
}

/// The admission with its one session slot held, and a connection refused at accept.
fn refused_conn() -> (Admission<u32>, ServerConnection<u32>) {
    let mut adm = admission(AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        ..AdmissionConfig::default()
    });
    let mut held = accept(&mut adm, 1, config());
    let conn = ServerConnection::accept(T0, &mut adm, 2, config()).unwrap();
    assert!(conn.refused().is_some());
    assert_eq!(adm.sessions(), 1, "the refused connection holds no session");
    held.close(T0, &mut adm);
    (adm, conn)
}
