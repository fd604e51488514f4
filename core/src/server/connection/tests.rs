//! Unit tests of the server connection machine: configuration checks, refusal reads and
//! `Debug` output.

use super::*;
use crate::refusal;
use crate::roster::{MAX_ADDR_LEN, MAX_ID_LEN};
use crate::time::Duration;

#[test]
fn config_validation_names_the_field() {
    assert_eq!(ServerConfig::new("n", "h:1").validate(), Ok(()));
    let e = ServerConfig::new("", "h:1").validate().unwrap_err();
    assert_eq!(
        e,
        ServerConfigError::Identity {
            field: "node_id",
            problem: "empty"
        }
    );
    let e = ServerConfig::new("n\r\nX: y", "h:1")
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("node_id"));
    let e = ServerConfig::new("n", "a".repeat(MAX_ADDR_LEN + 1))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("advertised_addr"));
    for field in [
        "idle_timeout",
        "source_timeout",
        "send_timeout",
        "linger",
        "refusal_head_timeout",
    ] {
        let mut c = ServerConfig::new("n", "h:1");
        match field {
            "idle_timeout" => c.idle_timeout = Duration::ZERO,
            "source_timeout" => c.source_timeout = Duration::ZERO,
            "send_timeout" => c.send_timeout = Duration::ZERO,
            "linger" => c.linger = Duration::ZERO,
            _ => c.refusal_head_timeout = Duration::ZERO,
        }
        assert_eq!(c.validate(), Err(ServerConfigError::ZeroTimeout { field }));
    }
}

#[test]
fn identity_fields_of_exactly_their_bound_are_accepted_and_one_byte_more_refused() {
    let at_bound = ServerConfig::new("n".repeat(MAX_ID_LEN), "a".repeat(MAX_ADDR_LEN));
    assert_eq!(at_bound.validate(), Ok(()));
    let too_long = |field| ServerConfigError::Identity {
        field,
        problem: "too long",
    };
    let long_id = ServerConfig::new("n".repeat(MAX_ID_LEN + 1), "h:1");
    assert_eq!(long_id.validate(), Err(too_long("node_id")));
    let long_addr = ServerConfig::new("n", "a".repeat(MAX_ADDR_LEN + 1));
    assert_eq!(long_addr.validate(), Err(too_long("advertised_addr")));
}

#[test]
fn config_debug_names_every_field_with_its_value() {
    let mut c = ServerConfig::new("node-7", "h.test:7070");
    c.idle_timeout = Duration::from_secs(11);
    c.source_timeout = Duration::from_secs(12);
    c.send_timeout = Duration::from_secs(13);
    c.linger = Duration::from_secs(14);
    c.refusal_head_timeout = Duration::from_secs(15);
    let text = format!("{c:?}");
    for part in [
        "ServerConfig",
        "node_id: \"node-7\"",
        "advertised_addr: \"h.test:7070\"",
        "relay",
        "idle_timeout",
        "source_timeout",
        "send_timeout",
        "linger",
        "refusal_head_timeout",
    ] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
    for secs in 11..=15 {
        let value = format!("{:?}", Duration::from_secs(secs));
        assert!(text.contains(&value), "{value} missing from {text}");
    }
}

#[test]
fn a_refused_connection_reads_a_head_of_the_whole_bound_in_two_windows_of_4_kib() {
    use crate::server::AdmissionConfig;
    let mut adm: Admission<u32> = Admission::new(AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        ..AdmissionConfig::default()
    })
    .unwrap();
    let t0 = Instant::ZERO;
    let config = Arc::new(ServerConfig::new("n", "h:1"));
    let mut held = ServerConnection::accept(t0, &mut adm, 1, config.clone()).unwrap();
    let mut conn = ServerConnection::accept(t0, &mut adm, 2, config).unwrap();
    assert!(conn.refused().is_some());
    // A head of exactly the bound, no blank line: each window is 4 KiB, so the second
    // read reaches the bound and the 503 is due.
    assert_eq!(MAX_REFUSAL_HEAD_BYTES, 8 * 1024);
    for read in 0..2 {
        assert!(
            conn.poll_transmit(t0).is_none(),
            "answered before read {read}"
        );
        let window = conn.read_buf().expect("a discard window").len();
        assert_eq!(window, 4 * 1024, "read {read}");
        assert_eq!(conn.handle_read(t0, window), window);
    }
    let t = conn.poll_transmit(t0).expect("answered at the bound");
    assert_eq!(t.status, Some(503));
    held.close(t0, &mut adm);
    conn.close(t0, &mut adm);
}

#[test]
fn connection_debug_shows_its_source_and_state() {
    use crate::server::AdmissionConfig;
    let mut adm: Admission<u32> = Admission::new(AdmissionConfig::default()).unwrap();
    let config = Arc::new(ServerConfig::new("n", "h:1"));
    let mut conn = ServerConnection::accept(Instant::ZERO, &mut adm, 77, config).unwrap();
    let text = format!("{conn:?}");
    for part in [
        "ServerConnection",
        "source: 77",
        "refused: None",
        "decoded: 0",
        "queued: 0",
        "unacked: 0",
        "eof: false",
        "finished: false",
    ] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
    conn.handle_eof(Instant::ZERO);
    assert!(format!("{conn:?}").contains("eof: true"));
    conn.close(Instant::ZERO, &mut adm);
}

#[test]
fn unsendable_node_id_is_left_out_rather_than_failing_the_response() {
    let mut out = BytesMut::new();
    refusal::encode(
        &Refusal {
            reason: crate::refusal::RefusalReason::Sessions,
            retry_after: Duration::from_secs(1),
        },
        Some("bad\r\nid"),
        None,
        &mut out,
    );
    let text = core::str::from_utf8(&out).unwrap();
    assert!(text.starts_with("HTTP/1.1 503 "));
    assert!(!text.contains("bad"));
}
