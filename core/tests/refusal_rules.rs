//! `refusal.rs` and `pace.rs` rules that no other test reached (their mutation runs,
//! docs/testing.md): a refusal read from a response head, its cooldown, the reason's text;
//! the pacing burst's floor. One rule per test.

use peerblock_core::http::{BodyLimit, ResponseDecoder, ResponseEvent, ResponseHead};
use peerblock_core::pace::{PaceConfig, MIN_DEFAULT_BURST, MIN_RATE};
use peerblock_core::refusal::{PeerRefusal, RefusalReason, DEFAULT_REFUSED_COOLDOWN};
use peerblock_core::time::Duration;

fn head(text: &str) -> ResponseHead {
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::AtMost(1 << 20)).unwrap();
    d.feed(text.as_bytes());
    match d.poll() {
        Ok(Some(ResponseEvent::Head(h))) => h,
        other => panic!("{other:?}"),
    }
}

const CAP: Duration = Duration::from_secs(15);

#[test]
fn a_503_with_the_refusal_header_is_a_refusal_with_its_bounded_wait() {
    let h = head(
        "HTTP/1.1 503 Service Unavailable\r\nX-Peerblock-Refused: sessions\r\nRetry-After: 60\r\nContent-Length: 0\r\n\r\n",
    );
    let r = PeerRefusal::from_head(&h, CAP).expect("a refusal");
    assert_eq!(r.reason, Some(RefusalReason::Sessions));
    assert_eq!(r.retry_after, Some(CAP));
    assert_eq!(r.cooldown(), CAP);
}

#[test]
fn a_plain_503_is_not_a_refusal() {
    let h = head("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(PeerRefusal::from_head(&h, CAP), None);
}

#[test]
fn another_status_with_the_refusal_header_is_not_a_refusal() {
    let h = head("HTTP/1.1 200 OK\r\nX-Peerblock-Refused: sessions\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(PeerRefusal::from_head(&h, CAP), None);
}

#[test]
fn a_refusal_without_retry_after_cools_down_for_the_default() {
    let h = head(
        "HTTP/1.1 503 Service Unavailable\r\nX-Peerblock-Refused: sessions\r\nContent-Length: 0\r\n\r\n",
    );
    let r = PeerRefusal::from_head(&h, CAP).expect("a refusal");
    assert_eq!(r.retry_after, None);
    assert_eq!(r.cooldown(), DEFAULT_REFUSED_COOLDOWN);
    assert_eq!(DEFAULT_REFUSED_COOLDOWN, Duration::from_secs(15));
}

#[test]
fn a_short_advertised_wait_is_the_cooldown() {
    let h = head(
        "HTTP/1.1 503 Service Unavailable\r\nX-Peerblock-Refused: sessions\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n",
    );
    let r = PeerRefusal::from_head(&h, CAP).expect("a refusal");
    assert_eq!(r.cooldown(), Duration::from_secs(2));
}

#[test]
fn a_refusal_reason_displays_as_its_header_token() {
    for r in RefusalReason::ALL {
        assert_eq!(r.to_string(), r.as_token());
        assert!(!r.as_token().is_empty());
        assert_eq!(RefusalReason::from_token(r.to_string().as_bytes()), Some(r));
    }
}

#[test]
fn the_default_burst_is_fifty_ms_of_the_rate_but_at_least_16_kib() {
    assert_eq!(MIN_DEFAULT_BURST, 16 * 1024);
    assert_eq!(PaceConfig::with_rate(MIN_RATE).burst, 16 * 1024);
    assert_eq!(PaceConfig::with_rate(20_000_000).burst, 1_000_000);
}
