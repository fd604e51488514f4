//! Authenticated membership against real nodes over loopback (issue 14): each attack on
//! a node's roster, sent over TCP from its own 127.0.0.0/8 source, and the rule that stops
//! it, observed in the node's table and its metrics. Port 0, bounded, no sleeps: a test
//! waits for the node's answer (inbound attacks) or for the roster service's answer count
//! (outbound attacks).

#[path = "common/canned.rs"]
mod canned;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use canned::Reply;
use peerblock_core::roster::record::{hex, sign_epoch};
use peerblock_core::roster::{
    Attestation, Membership, MembershipMode, MembershipPolicy, NodeKey, RefreshConfig, Roster,
    RosterMember, MAX_ROSTER_MEMBERS,
};
use peerblock_core::server::ServerConfig;
use peerblock_core::time::{Clock, Duration};
use peerblock_core::wire::ROSTER_PATH;
use peerblock_tokio::client::{Client, ClientOptions};
use peerblock_tokio::metrics::Metrics;
use peerblock_tokio::roster::RosterService;
use peerblock_tokio::server::{Server, ServerHandle, ServerOptions};
use peerblock_tokio::source::MemoryStore;
use peerblock_tokio::SharedMembership;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(StdDuration::from_secs(30), body)
        .await
        .expect("test bound");
}

fn key(n: u8) -> NodeKey {
    NodeKey::from_seed(&[n; 32])
}

/// A node whose record is signed by `key(0)`, serving its table on 127.0.0.1:0.
struct Victim {
    handle: ServerHandle,
    membership: SharedMembership,
    metrics: Metrics,
}

async fn victim(policy: MembershipPolicy) -> Victim {
    let me = key(0);
    let addr = "node-1.test:7070";
    let mut table = Membership::new(RosterMember::new(me.id(), addr, 1.0), 0, 64)
        .unwrap()
        .with_policy(policy)
        .unwrap();
    table.set_record(me.sign(addr, 1.0, 1).unwrap()).unwrap();
    let membership: SharedMembership = Arc::new(Mutex::new(table));
    let metrics = Metrics::new();
    let config = ServerConfig::new(me.id(), addr);
    let mut options = ServerOptions::new(
        Arc::new(config),
        Arc::new(MemoryStore::new()),
        Clock::new(std::time::Instant::now()),
    );
    options.membership = Some(Arc::clone(&membership));
    options.metrics = metrics.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let handle = Server::from_listener(listener, options).unwrap().spawn();
    Victim {
        handle,
        membership,
        metrics,
    }
}

impl Victim {
    fn addr_of(&self, id: &str) -> Option<String> {
        self.membership.lock().unwrap().addr(id).map(str::to_owned)
    }

    fn rejected(&self, reason: &str) -> u64 {
        let text = self.metrics.render();
        let prefix = format!("peerblock_roster_rejected_total{{reason=\"{reason}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |v| v.trim().parse().unwrap())
    }
}

/// Sends a roster request from `from` (a loopback source of its own) with the given
/// identity headers and returns the response's status and body once the node answered
/// (it has learned or refused the caller by then).
async fn call(
    node: SocketAddr,
    from: Ipv4Addr,
    id: &str,
    addr: &str,
    record: Option<&str>,
) -> (u16, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
    let mut s = socket.connect(node).await.unwrap();
    let mut req = format!(
        "GET {ROSTER_PATH} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nX-DART-Node: {id}\r\nX-DART-Peer-Addr: {addr}\r\n"
    );
    if let Some(r) = record {
        req.push_str(&format!("X-Peerblock-Record: {r}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

fn header(k: &NodeKey, addr: &str, seq: u64) -> String {
    k.sign(addr, 1.0, seq).unwrap().to_header(1.0)
}

const HONEST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 66);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_caller_is_learned_verified_and_its_answer_carries_our_record() {
    bounded(async {
        let v = victim(MembershipPolicy::default()).await;
        let a = key(1);
        let (status, body) = call(
            v.handle.local_addr(),
            HONEST,
            a.id(),
            "node-2.test:7070",
            Some(&header(&a, "node-2.test:7070", 1)),
        )
        .await;
        assert_eq!(status, 200);
        assert!(v.membership.lock().unwrap().record(a.id()).is_some());
        let roster = Roster::from_json(body.as_bytes()).unwrap();
        assert!(
            matches!(roster.members[0].record, Attestation::Signed(_)),
            "{body}"
        );
        assert!(roster.members[0]
            .record
            .record()
            .unwrap()
            .verify(&roster.members[0].id, &roster.members[0].addr, 1.0)
            .is_ok());
        v.handle.shutdown(StdDuration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hijack_an_unsigned_caller_claiming_a_verified_id_does_not_move_it() {
    bounded(async {
        let v = victim(MembershipPolicy::default()).await;
        let a = key(1);
        call(
            v.handle.local_addr(),
            HONEST,
            a.id(),
            "node-2.test:7070",
            Some(&header(&a, "node-2.test:7070", 1)),
        )
        .await;
        let (status, _) = call(
            v.handle.local_addr(),
            ATTACKER,
            a.id(),
            "node-66.test:7070",
            None,
        )
        .await;
        assert_eq!(
            status, 200,
            "answered: a reference-style caller is not refused service"
        );
        assert_eq!(v.addr_of(a.id()).as_deref(), Some("node-2.test:7070"));
        assert_eq!(v.rejected("unverified"), 1);
        v.handle.shutdown(StdDuration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hijack_a_record_signed_by_another_key_is_rejected() {
    bounded(async {
        let v = victim(MembershipPolicy::default()).await;
        let (a, thief) = (key(1), key(2));
        call(
            v.handle.local_addr(),
            HONEST,
            a.id(),
            "node-2.test:7070",
            Some(&header(&a, "node-2.test:7070", 1)),
        )
        .await;
        // The thief's own valid record, presented under the victim's id.
        call(
            v.handle.local_addr(),
            ATTACKER,
            a.id(),
            "node-66.test:7070",
            Some(&header(&thief, "node-66.test:7070", 99)),
        )
        .await;
        assert_eq!(v.addr_of(a.id()).as_deref(), Some("node-2.test:7070"));
        assert_eq!(v.rejected("wrong-key"), 1);
        v.handle.shutdown(StdDuration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_an_older_record_is_rejected() {
    bounded(async {
        let v = victim(MembershipPolicy::default()).await;
        let a = key(1);
        // The member moved (seq 5); its old record (seq 4, old address) is replayed.
        let old = header(&a, "node-3.test:7070", 4);
        call(
            v.handle.local_addr(),
            HONEST,
            a.id(),
            "node-2.test:7070",
            Some(&header(&a, "node-2.test:7070", 5)),
        )
        .await;
        call(
            v.handle.local_addr(),
            ATTACKER,
            a.id(),
            "node-3.test:7070",
            Some(&old),
        )
        .await;
        assert_eq!(v.addr_of(a.id()).as_deref(), Some("node-2.test:7070"));
        assert_eq!(v.rejected("replayed"), 1);
        v.handle.shutdown(StdDuration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_truncated_record_headers_are_rejected() {
    bounded(async {
        let v = victim(MembershipPolicy::default()).await;
        let a = key(1);
        let good = header(&a, "node-2.test:7070", 1);
        let truncated = &good[..good.len() - 7];
        let garbage = format!("1 1 {} {}", hex(&a.public()), "zz".repeat(64));
        let mut flipped = good.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        for bad in [
            truncated,
            garbage.as_str(),
            "not a record",
            flipped.as_str(),
        ] {
            let (status, _) = call(
                v.handle.local_addr(),
                ATTACKER,
                a.id(),
                "node-66.test:7070",
                Some(bad),
            )
            .await;
            assert_eq!(status, 200);
        }
        assert_eq!(
            v.addr_of(a.id()),
            None,
            "never learned, not even unverified"
        );
        assert_eq!(v.rejected("malformed"), 3);
        assert_eq!(v.rejected("bad-signature"), 1);
        v.handle.shutdown(StdDuration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_only_node_refuses_an_unverified_peer() {
    bounded(async {
        let v = victim(MembershipPolicy {
            mode: MembershipMode::VerifiedOnly,
            ..MembershipPolicy::default()
        })
        .await;
        let (status, body) = call(
            v.handle.local_addr(),
            HONEST,
            &"cd".repeat(32),
            "node-2.test:7070",
            None,
        )
        .await;
        assert_eq!(status, 200, "still answered");
        assert!(!body.contains("node-2.test:7070"), "{body}");
        assert_eq!(v.addr_of(&"cd".repeat(32)), None);
        assert_eq!(v.rejected("unverified"), 1);
        // A signed peer is still learned.
        let a = key(1);
        call(
            v.handle.local_addr(),
            HONEST,
            a.id(),
            "node-2.test:7070",
            Some(&header(&a, "node-2.test:7070", 1)),
        )
        .await;
        assert!(v.addr_of(a.id()).is_some());
        v.handle.shutdown(StdDuration::from_secs(1)).await;
    })
    .await;
}

/// A node's table and its roster service fetching from `server` every few milliseconds;
/// returns once `rounds` answers were merged.
async fn fetch_rounds(table: Membership, server: &str, rounds: u64) -> (SharedMembership, Metrics) {
    let membership: SharedMembership = Arc::new(Mutex::new(table));
    let metrics = Metrics::new();
    let client = Client::new(ClientOptions::new(
        Clock::new(std::time::Instant::now()),
        metrics.clone(),
    ))
    .unwrap();
    let config = RefreshConfig {
        seeds: vec![server.to_owned()],
        interval: Duration::from_millis(20),
        jitter: Duration::from_millis(5),
        fanout: 1,
        ..RefreshConfig::default()
    };
    let service = RosterService::start(client, Arc::clone(&membership), config, 9).unwrap();
    let mut answers = service.answers();
    answers
        .wait_for(|n| *n >= rounds)
        .await
        .expect("service running");
    service.shutdown().await;
    (membership, metrics)
}

fn answer(body: Vec<u8>, responder: &str) -> Reply {
    let mut v = format!(
        "HTTP/1.1 200 OK\r\nX-DART-Node: {responder}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    v.extend_from_slice(&body);
    Reply::Bytes(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epoch_pinning_by_a_peers_roster_fails() {
    bounded(async {
        let authority = key(100);
        let forger = key(101);
        // The attacker answers with epoch 2^64-1, once unsigned, once signed by its own key.
        let pin = Roster {
            epoch: u64::MAX,
            epoch_sig: None,
            members: vec![],
        }
        .to_json();
        let forged = Roster {
            epoch: u64::MAX,
            epoch_sig: Some(sign_epoch(&forger, u64::MAX)),
            members: vec![],
        }
        .to_json();
        let server = canned::serve(move |_, req, _| {
            answer(
                if req % 2 == 0 {
                    pin.clone()
                } else {
                    forged.clone()
                },
                "attacker",
            )
        })
        .await;
        let me = key(0);
        let table = Membership::new(RosterMember::new(me.id(), "node-1.test:7070", 1.0), 3, 64)
            .unwrap()
            .with_policy(MembershipPolicy {
                authority: Some(authority.public()),
                ..MembershipPolicy::default()
            })
            .unwrap();
        let (membership, metrics) = fetch_rounds(table, &server.addr, 4).await;
        let mut m = membership.lock().unwrap();
        assert_eq!(m.epoch(), 3, "not pinned");
        assert!(m.stats().epoch_refused >= 4);
        assert!(metrics
            .render()
            .contains("peerblock_roster_rejected_total{reason=\"epoch-refused\"}"));
        // The authority's next epoch is still adopted afterwards: honest rosters are newer.
        let honest = Roster {
            epoch: 4,
            epoch_sig: Some(sign_epoch(&authority, 4)),
            members: vec![],
        };
        assert!(
            m.merge(peerblock_core::time::Instant::ZERO, "peer", &honest)
                .epoch_advanced
        );
        assert_eq!(m.epoch(), 4);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearsay_flood_from_one_peer_is_bounded_and_real_members_survive() {
    bounded(async {
        // Every answer invents 4095 fresh members (25 answers: over 100,000 invented).
        let flood = |round: usize| {
            let members = (0..MAX_ROSTER_MEMBERS - 1)
                .map(|i| RosterMember::new(format!("fake-{round}-{i}"), "127.0.0.66:1", 1.0))
                .collect();
            Roster {
                epoch: 0,
                epoch_sig: None,
                members,
            }
            .to_json()
        };
        let bodies: Vec<Vec<u8>> = (0..25).map(flood).collect();
        let server =
            canned::serve(move |_, req, _| answer(bodies[req % 25].clone(), "attacker")).await;
        let me = key(0);
        let mut table = Membership::new(RosterMember::new(me.id(), "node-1.test:7070", 1.0), 0, 64)
            .unwrap()
            .with_policy(MembershipPolicy {
                max_new_per_source: 16,
                learn_interval: Duration::from_secs(3600),
                ..MembershipPolicy::default()
            })
            .unwrap();
        let real: Vec<NodeKey> = (1..=8).map(key).collect();
        for (i, k) in real.iter().enumerate() {
            let addr = format!("node-{}.test:7070", 10 + i);
            let (rec, w) = Attestation::from_header(Some(header(k, &addr, 1).as_bytes()));
            table
                .learn_caller(
                    peerblock_core::time::Instant::ZERO,
                    &addr,
                    k.id(),
                    &addr,
                    &rec,
                    Some(w),
                )
                .unwrap();
        }
        // The node fetches the attacker's roster 25 times (as its refresh would, every
        // round) and merges each answer with the fetched address as the source.
        let metrics = Metrics::new();
        let client = Client::new(ClientOptions::new(
            Clock::new(std::time::Instant::now()),
            metrics.clone(),
        ))
        .unwrap();
        let started = std::time::Instant::now();
        for _ in 0..25 {
            let fetched = client.fetch_roster(&server.addr, None, None).await;
            let answer = fetched.roster().expect("a roster answer");
            let responder = answer.responder.as_deref().unwrap_or("");
            table.merge_from(client.now(), &server.addr, responder, &answer.roster);
            metrics.record_membership(table.stats());
        }
        let took = started.elapsed();
        let m = table;
        println!(
            "25 answers of 4095 invented members (102,375) fetched and merged in {took:?}; table {} members",
            m.len()
        );
        assert_eq!(m.len(), 8 + 16, "one source adds at most its budget");
        for (i, k) in real.iter().enumerate() {
            assert_eq!(
                m.addr(k.id()),
                Some(format!("node-{}.test:7070", 10 + i).as_str())
            );
        }
        assert!(m.stats().rate_limited >= 24 * 4095);
        assert!(metrics
            .render()
            .contains("peerblock_roster_rejected_total{reason=\"rate-limited\"}"));
    })
    .await;
}
