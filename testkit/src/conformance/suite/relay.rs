//! Relay rules: a relay-capable node fetching from the origin, checking against
//! manifests, caching, giving up, the hop bound and passing on upstream refusals.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use peerblock_common::client::{Fetched, GetOptions, Peer};
use peerblock_common::store::FileStore;
use peerblock_core::breaker::State;
use peerblock_core::bytes::Bytes;
use peerblock_core::client::{BlockRequest, Ending, ExchangeError};
use peerblock_core::server::{RelayConfig, ServerConfig};
use peerblock_core::wire::{BlockPath, Hop};

use crate::conformance::canned::{self, Reply};
use crate::conformance::{ClientSpec, Driver, RelaySpec, ServerSpec, TestServer};

use super::*;

/// A relay-capable node `relay` on 127.0.0.1 over an empty file store, relaying up to
/// `max_hop`.
fn relay_node(d: &dyn Driver, store: &FileStore, max_hop: u32) -> Box<dyn TestServer> {
    let mut spec = ServerSpec::new(LOCALHOST, "relay", store.clone());
    spec.config = ServerConfig::new("relay", "relay.test:1");
    spec.config.relay = Some(RelayConfig {
        max_hop,
        ..RelayConfig::default()
    });
    spec.relay = Some(RelaySpec::default());
    d.server(spec)
}

fn relay_path() -> BlockPath {
    path(0x5a, 3)
}

/// The block the relay tests' origin serves as block 3.
fn relayed_block() -> Bytes {
    Bytes::from(vec![0x42u8; 100_000])
}

/// The manifest of a 3-block file (blocks of 100 000 bytes) whose block 3 is
/// [`relayed_block`]: its bytes and block 3's path in its chunk.
fn relayed_manifest() -> (Bytes, BlockPath) {
    let hash = |b: &[u8]| *blake3::hash(b).as_bytes();
    let manifest = peerblock_common::manifest::Manifest {
        size: 300_000,
        block_size: 100_000,
        hashes: vec![
            hash(&[1; 100_000]),
            hash(&[2; 100_000]),
            hash(&relayed_block()),
        ],
    };
    (
        Bytes::from(manifest.to_bytes()),
        BlockPath {
            key: manifest.chunk_key(),
            index: 3,
        },
    )
}

/// A relayed GET of `path` from `relay` with `url` as the origin.
fn relayed_get(d: &dyn Driver, relay: &dyn TestServer, path: BlockPath, url: &str) -> Fetched {
    let c = d.client(ClientSpec::new());
    let peer = Peer::from_addr(relay.addr().to_string());
    let request = BlockRequest {
        path,
        origin: Some(url),
        hop: Hop(0),
    };
    c.get(&peer, request, GetOptions::default())
}

/// A relay fetches a block it does not hold from the origin named in the request (with
/// the hop one higher), validates it against the chunk's manifest it holds, keeps it in
/// its relay cache (never among its imported content) and serves it; the next request
/// is served from the cache without asking the origin.
pub fn a_relay_fetches_a_missing_block_from_the_origin_caches_it_and_serves_it(d: &dyn Driver) {
    let block = relayed_block();
    let b = block.clone();
    let origin = canned::serve(move |_, _, _| Reply::Bytes(canned::ok(&b)));
    let (manifest, block_path) = relayed_manifest();
    let manifest_path = BlockPath {
        index: 0,
        ..block_path
    };
    let (_dir, store) = store_with("relay-fetch", &[(manifest_path, manifest)]);
    let relay = relay_node(d, &store, 3);
    let url = format!("http://{}", origin.addr);
    let c = d.client(ClientSpec::new());
    let peer = Peer::from_addr(relay.addr().to_string());
    let request = BlockRequest {
        path: block_path,
        origin: Some(&url),
        hop: Hop(0),
    };
    let fetched = c.get(&peer, request, GetOptions::default());
    assert_eq!(fetched.bytes(), Some(&block), "{}", fetched.describe());
    let heads = origin.stats.heads();
    assert_eq!(heads.len(), 1, "the relay asked the origin once");
    let head = heads[0].to_ascii_lowercase();
    assert!(
        head.starts_with(&format!("get {} http/1.1\r\n", block_path)),
        "{head}"
    );
    assert!(
        head.contains("x-dart-hop: 1\r\n"),
        "the hop one higher: {head}"
    );
    assert!(
        store
            .relay_cache()
            .expect("a relay cache")
            .contains(&block_path),
        "the relay cached what it fetched and validated"
    );
    assert!(
        !store.file_of(&block_path).exists(),
        "a relayed block became imported content"
    );
    let again = c.get(&peer, request, GetOptions::default());
    assert_eq!(again.bytes(), Some(&block), "{}", again.describe());
    assert_eq!(origin.stats.heads().len(), 1, "served from the cache");
    relay.shutdown(Duration::from_secs(1));
}

/// A relay that holds no manifest for a block's chunk fetches it (block 0, from the same
/// upstream) to check the block; when it cannot get one (here the origin's block 0 is not
/// the chunk's manifest) it serves the block (the reader validates end to end) but keeps
/// it nowhere.
pub fn a_relay_that_cannot_get_a_chunks_manifest_serves_its_block_but_never_caches_it(
    d: &dyn Driver,
) {
    let block = relayed_block();
    let b = block.clone();
    let origin = canned::serve(move |_, _, _| Reply::Bytes(canned::ok(&b)));
    let (_dir, store) = store_with("relay-unverifiable", &[]);
    let relay = relay_node(d, &store, 3);
    let url = format!("http://{}", origin.addr);
    let fetched = relayed_get(d, &*relay, relay_path(), &url);
    assert_eq!(fetched.bytes(), Some(&block), "{}", fetched.describe());
    let heads = origin.stats.heads();
    let manifest = BlockPath {
        index: 0,
        ..relay_path()
    };
    assert!(
        heads
            .iter()
            .any(|h| h.starts_with(&format!("GET {manifest} "))),
        "the relay did not ask for the chunk's manifest: {heads:?}"
    );
    assert!(
        !store.file_of(&relay_path()).exists(),
        "an unvalidated block was written to the relay's store"
    );
    assert!(
        !store
            .relay_cache()
            .expect("a relay cache")
            .contains(&relay_path()),
        "an unvalidated block was cached"
    );
    relay.shutdown(Duration::from_secs(1));
}

/// A relay that holds no manifest for a block's chunk fetches the manifest (checked
/// against the chunk key), checks the block against it and keeps both in its relay cache:
/// the next request for the block costs the origin nothing.
pub fn a_relay_fetches_the_manifest_it_lacks_checks_the_block_and_caches_both(d: &dyn Driver) {
    let block = relayed_block();
    let (manifest, block_path) = relayed_manifest();
    let manifest_path = BlockPath {
        index: 0,
        ..block_path
    };
    let (b, m) = (block.clone(), manifest.clone());
    let asks_for_manifest = format!("GET {manifest_path} ");
    let origin = canned::serve(move |_, _, head| {
        if head.starts_with(&asks_for_manifest) {
            Reply::Bytes(canned::ok(&m))
        } else {
            Reply::Bytes(canned::ok(&b))
        }
    });
    let (_dir, store) = store_with("relay-fetches-manifest", &[]);
    let relay = relay_node(d, &store, 3);
    let url = format!("http://{}", origin.addr);
    let fetched = relayed_get(d, &*relay, block_path, &url);
    assert_eq!(fetched.bytes(), Some(&block), "{}", fetched.describe());
    let cache = store.relay_cache().expect("a relay cache");
    assert!(
        cache.contains(&manifest_path),
        "the manifest was not cached"
    );
    assert!(
        cache.contains(&block_path),
        "the checked block was not cached"
    );
    let asked = origin.stats.heads().len();
    assert_eq!(asked, 2, "the block and its manifest, once each");
    let again = relayed_get(d, &*relay, block_path, &url);
    assert_eq!(again.bytes(), Some(&block), "{}", again.describe());
    assert_eq!(
        origin.stats.heads().len(),
        asked,
        "served from the relay cache"
    );
    relay.shutdown(Duration::from_secs(1));
}

/// A block that fails the manifest the relay holds is answered 500, never served and
/// never written.
pub fn a_relayed_block_that_fails_the_relays_manifest_is_500_and_never_stored(d: &dyn Driver) {
    let mut rotten = relayed_block().to_vec();
    rotten[77] ^= 1;
    let origin = canned::serve(move |_, _, _| Reply::Bytes(canned::ok(&rotten)));
    let (manifest, block_path) = relayed_manifest();
    let manifest_path = BlockPath {
        index: 0,
        ..block_path
    };
    let (_dir, store) = store_with("relay-rotten", &[(manifest_path, manifest)]);
    let relay = relay_node(d, &store, 3);
    let url = format!("http://{}", origin.addr);
    let fetched = relayed_get(d, &*relay, block_path, &url);
    assert!(
        matches!(
            fetched.ending,
            Some(Ending::Failed(ExchangeError::Status(500)))
        ),
        "{}",
        fetched.describe()
    );
    assert!(
        !store.file_of(&block_path).exists(),
        "a rotten block was stored"
    );
    relay.shutdown(Duration::from_secs(1));
}

/// A relayed block 0 (a manifest) whose BLAKE3 hash is not the chunk key is answered
/// 500, never served and never written.
pub fn a_relayed_manifest_that_fails_its_chunk_key_is_500_and_never_stored(d: &dyn Driver) {
    let (manifest, block_path) = relayed_manifest();
    let mut rotten = manifest.to_vec();
    rotten[25] ^= 1;
    let origin = canned::serve(move |_, _, _| Reply::Bytes(canned::ok(&rotten)));
    let (_dir, store) = store_with("relay-manifest", &[]);
    let relay = relay_node(d, &store, 3);
    let url = format!("http://{}", origin.addr);
    let manifest_path = BlockPath {
        index: 0,
        ..block_path
    };
    let fetched = relayed_get(d, &*relay, manifest_path, &url);
    assert!(
        matches!(
            fetched.ending,
            Some(Ending::Failed(ExchangeError::Status(500)))
        ),
        "{}",
        fetched.describe()
    );
    assert!(
        !store.chunk_dir(&manifest_path).exists(),
        "a rotten manifest was stored"
    );
    relay.shutdown(Duration::from_secs(1));
}

/// A relayed fetch is given up when its requester goes away (a reset: a half-close still
/// waits for its answer): the relay closes its connection to the upstream at once
/// (freeing the slot and the ticket it held) instead of holding it until the upstream's
/// deadlines.
pub fn a_relayed_fetch_is_given_up_when_its_requester_goes_away(d: &dyn Driver) {
    let origin = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new()));
    let (_dir, store) = store_with("relay-gone", &[]);
    let relay = relay_node(d, &store, 3);
    let mut requester = TcpStream::connect(relay.addr()).expect("connect to the relay");
    write!(
        requester,
        "GET {} HTTP/1.1\r\nHost: relay\r\nX-DART-Origin: http://{}\r\n\r\n",
        relay_path(),
        origin.addr
    )
    .expect("send the relayed request");
    let until = |what: &str, cond: &dyn Fn() -> bool| {
        let end = Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(Instant::now() < end, "{}: {what}", d.name());
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    until("the relay asked the upstream", &|| {
        origin.stats.heads().len() == 1
    });
    assert_eq!(origin.stats.open(), 1);
    let gone = Instant::now();
    socket2::SockRef::from(&requester)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER 0");
    drop(requester); // RST
    until("the relay closed its upstream connection", &|| {
        origin.stats.open() == 0
    });
    println!(
        "{}: upstream connection closed {:?} after the requester left",
        d.name(),
        gone.elapsed()
    );
    relay.shutdown(Duration::from_secs(1));
}

/// A request already at the relay's hop bound is a miss and never reaches the origin;
/// one hop below is relayed.
pub fn a_request_at_the_hop_bound_is_not_relayed_and_the_origin_is_never_asked(d: &dyn Driver) {
    let origin = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"block")));
    let (_dir, store) = store_with("relay-hop", &[]);
    let relay = relay_node(d, &store, 2);
    let url = format!("http://{}", origin.addr);
    let c = d.client(ClientSpec::new());
    let peer = Peer::from_addr(relay.addr().to_string());
    let request = BlockRequest {
        path: relay_path(),
        origin: Some(&url),
        hop: Hop(2),
    };
    let fetched = c.get(&peer, request, GetOptions::default());
    assert!(
        matches!(fetched.ending, Some(Ending::Miss)),
        "{}",
        fetched.describe()
    );
    assert_eq!(
        origin.stats.accepts(),
        0,
        "a request at the bound is never relayed"
    );
    let below = BlockRequest {
        hop: Hop(1),
        ..request
    };
    let fetched = c.get(&peer, below, GetOptions::default());
    assert_eq!(
        fetched.bytes().map(|b| &b[..]),
        Some(&b"block"[..]),
        "{}",
        fetched.describe()
    );
    // The block, and (the relay holding no manifest for its chunk) block 0 to check it.
    assert_eq!(origin.stats.heads().len(), 2);
    relay.shutdown(Duration::from_secs(1));
}

/// An origin's 403 is passed on as a 502 with the upstream status, more times than the
/// breaker's failure threshold, and the requester's circuit to the relay stays closed:
/// the relay is not blamed for its upstream's refusal, and nothing is cached.
pub fn an_upstream_refusal_is_passed_on_as_502_and_the_relays_circuit_stays_closed(d: &dyn Driver) {
    let origin = canned::serve(|_, _, _| Reply::Bytes(canned::forbidden()));
    let (_dir, store) = store_with("relay-403", &[]);
    let relay = relay_node(d, &store, 3);
    let url = format!("http://{}/presigned?sig=expired", origin.addr);
    let c = d.client(ClientSpec::new());
    let peer = Peer::from_addr(relay.addr().to_string());
    let request = BlockRequest {
        path: relay_path(),
        origin: Some(&url),
        hop: Hop(0),
    };
    for _ in 0..10 {
        let fetched = c.get(&peer, request, GetOptions::default());
        assert!(
            matches!(
                fetched.ending,
                Some(Ending::UpstreamRefused { status: 403 })
            ),
            "{}",
            fetched.describe()
        );
    }
    let state = c.peer_state(&peer.id);
    assert_eq!(
        state.breaker,
        Some(State::Closed),
        "the relay was blamed for its upstream's refusal"
    );
    assert!(!store.file_of(&relay_path()).exists(), "nothing cached");
    relay.shutdown(Duration::from_secs(1));
}
