//! The in-memory pair itself: a 256 KiB block crosses both machines with no body copy on
//! the server and exactly one (the codec's receive buffer) on the client; runs repeat
//! bit for bit.

use bytes::Bytes;
use peerblock_core::client::{BlockRequest, Ending, ExchangeRequest};
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_testkit::pair::Pair;

const BLOCK: usize = 256 * 1024;

fn path() -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([9; 32]),
        index: 0,
    }
}

#[test]
fn a_256k_block_crosses_both_machines_without_a_server_side_copy() {
    let block = Bytes::from((0..BLOCK).map(|i| (i * 7) as u8).collect::<Vec<u8>>());
    let mut pair = Pair::new([(path(), block.clone())]);
    let out = pair.exchange(ExchangeRequest::get_validated(
        "s:1",
        BlockRequest::new(path()),
        BLOCK as u64,
        true,
    ));
    let Ending::Block(got) = out.ending else {
        panic!("{:?}", out.ending)
    };
    assert_eq!(got, block);
    // Server: the body handed to the driver is the source's own allocation.
    let served = &pair.stats.served_bodies[0];
    assert_eq!(served.as_ptr(), block.as_ptr());
    assert_eq!(served.len(), BLOCK);
    // Client: the body is taken once (head + body bytes through handle_input), and the
    // block handed to the validator and the caller is that one buffer, not a second copy.
    let head = pair.stats.wire_to_client - BLOCK as u64;
    assert_eq!(pair.stats.client_fed, head + BLOCK as u64);
    assert_ne!(got.as_ptr(), block.as_ptr(), "crossed the in-memory wire");
    assert_eq!(pair.stats.validations, 1);
}

#[test]
fn same_inputs_same_outcomes() {
    let run = || {
        let block = Bytes::from(vec![5u8; 1000]);
        let mut pair = Pair::new([(path(), block)]);
        pair.source.delay = peerblock_core::time::Duration::from_millis(250);
        let mut log = Vec::new();
        for n in 0..4u64 {
            let p = BlockPath {
                key: ChunkKey::from_array([9; 32]),
                index: n,
            };
            let out = pair.exchange(ExchangeRequest::get("s:1", BlockRequest::new(p)));
            log.push(format!(
                "{:?} {:?} {:?} {}",
                out.breaker,
                out.connection,
                pair.now,
                out.ending.is_error()
            ));
        }
        (log, pair.stats.wire_to_client, pair.stats.wire_to_server)
    };
    assert_eq!(run(), run());
}

#[test]
fn one_head_event_per_response_and_pooled_reuse_after_acknowledgement() {
    // Four exchanges on one pooled connection (the pair acknowledges each request as
    // written): one dial, one head event per response, none for a request the server
    // never answers.
    let block = Bytes::from(vec![5u8; 100]);
    let mut pair = Pair::new([(path(), block)]);
    for n in 0..4u64 {
        let p = BlockPath {
            key: ChunkKey::from_array([9; 32]),
            index: n,
        };
        let _ = pair.exchange(ExchangeRequest::get("s:1", BlockRequest::new(p)));
    }
    assert_eq!(pair.stats.heads, 4);
    assert_eq!(
        pair.stats.dials, 1,
        "the acknowledged connection was reused"
    );
    pair.server_silent = true;
    let _ = pair.exchange(ExchangeRequest::get("s:1", BlockRequest::new(path())));
    assert_eq!(pair.stats.heads, 4, "no response, no head event");
}
