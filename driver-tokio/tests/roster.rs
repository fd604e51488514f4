//! The roster service (core's `roster::Refresh` on a task) against a canned roster server
//! (`peerblock_testkit::conformance::canned`). No conformance rule runs a roster service:
//! the suite's roster rules are the server's answer and one client fetch.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use peerblock_core::roster::{Membership, RefreshConfig, RosterMember};
use peerblock_core::time::{Clock, Duration};
use peerblock_testkit::conformance::canned::{self, Reply};
use peerblock_tokio::client::{Client, ClientOptions};
use peerblock_tokio::metrics::Metrics;
use peerblock_tokio::roster::RosterService;

/// A refresh asking `seed` now and not again within the test (rounds a minute apart).
fn one_round_from(seed: &str) -> RefreshConfig {
    RefreshConfig {
        seeds: vec![seed.to_owned()],
        interval: Duration::from_secs(60),
        jitter: Duration::from_secs(1),
        ..RefreshConfig::default()
    }
}

#[tokio::test]
async fn the_roster_service_learns_members_and_identifies_itself() {
    tokio::time::timeout(StdDuration::from_secs(20), async {
        let body = br#"{"epoch":"5","members":[{"id":"n2","addr":"10.0.0.2:7070","weight":1.0},{"id":"n3","addr":"10.0.0.3:7070","weight":2.0}]}"#;
        let server = canned::serve(move |_, _, _| {
            let mut v = format!(
                "HTTP/1.1 200 OK\r\nX-DART-Node: n2\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            v.extend_from_slice(body);
            Reply::Bytes(v)
        });
        let metrics = Metrics::new();
        let client = Client::new(ClientOptions::new(
            Clock::new(std::time::Instant::now()),
            metrics.clone(),
        ))
        .unwrap();
        let me = RosterMember {
            id: "n1".into(),
            addr: "node-1.test:7171".into(),
            weight: 1.0,
            record: Default::default(),
        };
        let membership = Arc::new(Mutex::new(Membership::new(me, 0, 64).unwrap()));
        let config = one_round_from(&server.addr);
        let service = RosterService::start(client, Arc::clone(&membership), config, 3).unwrap();
        // Wait (bounded by the test's timeout) for the first round's answer to be merged.
        let mut answers = service.answers();
        answers.wait_for(|n| *n >= 1).await.expect("service running");
        {
            let m = membership.lock().unwrap();
            assert_eq!(m.addr("n3"), Some("10.0.0.3:7070"));
            assert!(m.addr("n2").is_some());
            // An epoch no cluster authority signed is never adopted from a peer
            // (docs/security.md, epoch pinning).
            assert_eq!(m.epoch(), 0);
            assert_eq!(m.stats().epoch_refused, 1);
        }
        let heads = server.stats.heads();
        let head = heads[0].to_ascii_lowercase();
        assert!(head.starts_with("get /peer/v1/roster http/1.1\r\n"), "{head}");
        assert!(head.contains("x-dart-node: n1\r\n"), "{head}");
        assert!(head.contains("x-dart-peer-addr: node-1.test:7171\r\n"), "{head}");
        assert!(metrics.render().contains("peerblock_roster_members 2"), "{}", metrics.render());
        service.shutdown().await;
    })
    .await
    .expect("test bound");
}

#[tokio::test]
async fn a_fetched_roster_of_signed_members_is_verified_on_threads_and_learned() {
    tokio::time::timeout(StdDuration::from_secs(30), async {
        use peerblock_core::roster::{MembershipPolicy, MIN_PARALLEL_PART};
        // Enough records for two parts of the split.
        let n = 2 * MIN_PARALLEL_PART as u32 + 100;
        let (reply, good) = canned::signed_roster_answer(n, 11);
        let server = canned::serve(move |_, _, _| Reply::Bytes(reply.clone()));
        let client = Client::new(ClientOptions::new(
            Clock::new(std::time::Instant::now()),
            Metrics::new(),
        ))
        .unwrap();
        let me = RosterMember::new("n1", "node-1.test:7171", 1.0);
        let policy = MembershipPolicy {
            max_new_per_source: n as usize,
            max_checks_per_source: n as usize,
            ..MembershipPolicy::default()
        };
        let membership = Arc::new(Mutex::new(
            Membership::new(me, 0, 4095)
                .unwrap()
                .with_policy(policy)
                .unwrap(),
        ));
        let config = one_round_from(&server.addr);
        let service = RosterService::start(client, Arc::clone(&membership), config, 3).unwrap();
        let mut answers = service.answers();
        answers
            .wait_for(|n| *n >= 1)
            .await
            .expect("service running");
        {
            let m = membership.lock().unwrap();
            assert_eq!(m.len(), good.len());
            assert!(
                good.iter().all(|id| m.record(id).is_some()),
                "every good member verified"
            );
            let bad = (n - good.len() as u32) as u64;
            assert_eq!(m.stats().bad_signature, bad);
            // Each record checked once: in the threads' batches, never again in the merge.
            assert_eq!(m.stats().signature_checks, n as u64);
        }
        service.shutdown().await;
    })
    .await
    .expect("test bound");
}
