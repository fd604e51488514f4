//! The driver conformance suite (`peerblock_testkit::conformance`) against the mio
//! driver, on both body paths: buffered (the default) and zero-copy (`sendfile`). The
//! mixed pairs with the tokio driver run in `driver-tokio/tests/conformance_mixed.rs`.

mod harness;

use harness::Mio;

peerblock_testkit::conformance_suite!(Mio::buffered());
peerblock_testkit::conformance_suite!(sendfile, Mio::sendfile());
