//! Machine bugs the `exchange` fuzz target found, kept as regression tests (fixed in core).

use peerblock_core::client::{
    BlockRequest, ClientConfig, ClientEvent, Exchange, ExchangeRequest, Link,
};
use peerblock_core::http::RESPONSE_BUFFER_BYTES;
use peerblock_core::time::Instant;
use peerblock_core::wire::BlockPath;

/// Found by the fuzzer (input kept as `corpus/exchange/regress_window_from_closed_decoder`):
/// `RESPONSE_BUFFER_BYTES` says a response decoder's buffer grows beyond it only up to the
/// body limit the caller chose. A `get_validated` of 3 bytes answered by a `200` with
/// `Connection: close` leaves the decoder closed while the validator runs, and the
/// exchange's `read_buf` then lends a window of `READ_WINDOW_BYTES` (64 KiB) from it: the
/// buffer grows to twice `RESPONSE_BUFFER_BYTES` for bytes that are only discarded.
#[test]
fn read_buf_stays_within_the_buffer_bound_while_validating_a_closing_response() {
    let now = Instant::ZERO;
    let path = BlockPath::parse(
        b"/peer/v1/block/0202020202020202020202020202020202020202020202020202020202020202/1",
    )
    .expect("path");
    let request = ExchangeRequest::get_validated("10.0.0.2:7000", BlockRequest::new(path), 3, true);
    let mut ex = Exchange::new(now, &ClientConfig::default(), request, Link::Dial).expect("new");
    ex.handle_connected(now);
    assert!(ex.poll_transmit(now).is_some());
    ex.handle_transmitted(now);
    let response = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
    assert_eq!(ex.handle_input(now, response), response.len());
    assert!(matches!(
        ex.poll_event(),
        Some(ClientEvent::Head { status: 200 })
    ));
    assert!(matches!(
        ex.poll_event(),
        Some(ClientEvent::Validate { .. })
    ));
    let window = ex.read_buf().map_or(0, |w| w.len());
    assert!(
        window <= RESPONSE_BUFFER_BYTES,
        "read_buf lent {window} bytes while validating"
    );
}
