//! The driver conformance suite (`peerblock_testkit::conformance`) against the tokio
//! driver, and as `Mixed(tokio, tokio)`. The mixed pairs with the mio driver are in
//! `conformance_mixed.rs`.

mod harness;

use harness::Tokio;

peerblock_testkit::conformance_suite!(Tokio);

use peerblock_testkit::conformance::Mixed;
peerblock_testkit::conformance_suite!(mixed_tokio_tokio, Mixed::new(Tokio, Tokio));
