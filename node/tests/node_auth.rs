//! Authenticated membership between real `peerblock-node` processes on loopback (issue 14):
//! signed nodes learn each other verified; a `verified-only` node refuses an unsigned peer
//! that still learns it. Every wait is bounded; nodes are killed when the test ends.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::procs::{Node, TempDir};

/// The node's roster body, fetched anonymously (teaches the node nothing), bounded.
fn roster(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET /peer/v1/roster HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out.split_once("\r\n\r\n").expect("a head").1.to_owned()
}

/// The roster entry listing `addr`, if any.
fn entry<'a>(roster: &'a str, addr: &str) -> Option<&'a str> {
    roster.split("},{").find(|m| m.contains(addr))
}

#[test]
fn signed_nodes_learn_each_other_verified() {
    let (a_store, b_store) = (TempDir::new("auth-a"), TempDir::new("auth-b"));
    let a = Node::start(&a_store.0, &[], &[]);
    let b = Node::start(&b_store.0, &[&a.addr], &[]);
    b.wait_members(2);
    a.wait_members(2);
    // Each serves the other's record: it verified it (unverified entries carry none).
    let at_a = roster(&a.addr);
    let b_at_a = entry(&at_a, &b.addr).expect("A lists B");
    assert!(b_at_a.contains("\"sig\":\""), "A holds B verified: {at_a}");
    let at_b = roster(&b.addr);
    let a_at_b = entry(&at_b, &a.addr).expect("B lists A");
    assert!(a_at_b.contains("\"sig\":\""), "B holds A verified: {at_b}");
    // The key files were created owner-only in the stores.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(a_store.join("node.key"))
        .expect("A's key file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_verified_only_node_refuses_an_unsigned_peer_that_still_learns_it() {
    let (a_store, b_store, tmp) = (
        TempDir::new("vo-a"),
        TempDir::new("vo-b"),
        TempDir::new("vo-cfg"),
    );
    let config = tmp.join("a.toml");
    std::fs::write(&config, "[roster]\nmembership = \"verified-only\"\n").expect("config");
    let a = Node::start(
        &a_store.0,
        &[],
        &["--config", config.to_str().expect("utf-8")],
    );
    // B runs with a legacy name id: it cannot sign its record.
    let b = Node::start(&b_store.0, &[&a.addr], &["--id", "legacy-b"]);
    // B learned A (B is open; A's record verifies), so B's request reached A, which
    // refused to learn B before answering it.
    b.wait_members(2);
    let at_a = roster(&a.addr);
    assert!(
        entry(&at_a, &b.addr).is_none(),
        "A learned nothing unverified: {at_a}"
    );
    let at_b = roster(&b.addr);
    let a_at_b = entry(&at_b, &a.addr).expect("B lists A");
    assert!(a_at_b.contains("\"sig\":\""), "{at_b}");
    let own = entry(&at_b, &b.addr).expect("B lists itself");
    assert!(!own.contains("\"sig\""), "B's record is unsigned: {at_b}");
}
