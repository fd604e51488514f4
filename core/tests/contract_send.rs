//! The threading rule in docs/architecture.md: every machine is a plain `Send` value, so a
//! multi-threaded driver can own each one in the task that drives its socket.

use peerblock_core::client::{Exchange, Peers};
use peerblock_core::read::Read;
use peerblock_core::server::{Admission, ServerConnection};

fn assert_send<T: Send>() {}

#[test]
fn every_machine_and_shared_table_is_send() {
    assert_send::<ServerConnection>();
    assert_send::<Exchange>();
    assert_send::<Read>();
    assert_send::<Admission>();
    assert_send::<Peers>();
}
