//! Machine bugs the `server_connection` fuzz target found, kept as regression
//! tests (fixed in core).

use std::sync::Arc;

use peerblock_core::refusal::RefusalReason;
use peerblock_core::server::{
    Admission, AdmissionConfig, ServerConfig, ServerConnection, ServerEvent, SourceResult,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::transmit::Close;

const GET: &[u8] = b"GET /peer/v1/block/0202020202020202020202020202020202020202020202020202020202020202/2 HTTP/1.1\r\nHost: n\r\n\r\n";

/// Found by the fuzzer (input kept as
/// `corpus/server_connection/regress_response_after_bytes_refusal`): two pipelined block
/// requests are begun; the first is found but its bytes are refused, so its response is a
/// `503` with `Close::Linger` (half-close after writing). The second request's answer must
/// not be handed out after it: the driver has shut down its write side.
#[test]
fn nothing_is_transmitted_after_a_bytes_refusal_that_ends_the_connection() {
    let mut admission = Admission::new(AdmissionConfig {
        max_sessions: 3,
        max_sessions_per_source: 2,
        max_requests: 5,
        max_requests_per_session: 2,
        max_inflight_bytes: 3000,
        max_inflight_bytes_per_source: 2000,
        rate: None,
        max_tracked_sources: 4,
        retry_after: Duration::from_secs(1),
        max_refusals: peerblock_core::server::DEFAULT_MAX_REFUSALS,
    })
    .expect("valid admission");
    let config = Arc::new(ServerConfig::new("node-1", "10.0.0.1:7000"));
    let now = Instant::ZERO;
    let mut conn = ServerConnection::accept(now, &mut admission, 0u32, config).expect("accept");
    let mut pipelined = GET.to_vec();
    pipelined.extend_from_slice(GET);
    assert_eq!(conn.handle_input(now, &pipelined), pipelined.len());
    assert!(conn.needs_admission());
    conn.handle_admission(now, &mut admission);
    let mut ids = Vec::new();
    while let Some(event) = conn.poll_event() {
        if let ServerEvent::Fetch { id, .. } = event {
            ids.push(id);
        }
    }
    assert_eq!(ids.len(), 2, "both pipelined requests begin");
    conn.handle_source(
        now,
        &mut admission,
        ids[0],
        SourceResult::Found(vec![0; 2400].into()),
    )
    .expect("first answer");
    conn.handle_source(now, &mut admission, ids[1], SourceResult::Miss)
        .expect("second answer");
    let first = conn.poll_transmit(now).expect("the refusal");
    assert_eq!(first.status, Some(503));
    assert_eq!(first.refusal, Some(RefusalReason::SourceInflightBytes));
    assert_eq!(first.close, Close::Linger);
    let second = conn.poll_transmit(now);
    assert!(
        second.is_none(),
        "a response handed out after the 503 that ended the connection: {second:?}"
    );
    conn.close(now, &mut admission);
    assert_eq!(admission.requests(), 0);
}
