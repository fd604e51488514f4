//! The conformance suite on mixed pairs: tokio servers with mio clients, and mio servers
//! (on both body paths) with tokio clients. Two drivers that each pass the suite alone
//! and together speak the same wire form.

mod harness;
#[path = "../../driver-mio/tests/harness/mod.rs"]
mod mio_harness;

use harness::Tokio;
use mio_harness::Mio;
use peerblock_testkit::conformance::Mixed;

peerblock_testkit::conformance_suite!(tokio_server_mio_client, Mixed::new(Tokio, Mio::buffered()));
peerblock_testkit::conformance_suite!(mio_server_tokio_client, Mixed::new(Mio::buffered(), Tokio));
peerblock_testkit::conformance_suite!(
    mio_sendfile_server_tokio_client,
    Mixed::new(Mio::sendfile(), Tokio)
);
