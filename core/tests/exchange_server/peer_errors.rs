//! Peer errors as events: rejected requests and declined relays, each with its typed error.

use super::*;

#[test]
fn every_rejected_request_is_reported_with_its_typed_error_before_its_response() {
    use peerblock_core::http::{Rejection, RequestError};
    use peerblock_core::server::RequestRejection;
    let cases: [(&[u8], u16); 5] = [
        (b"GET /peer/v1/block/zz/1 HTTP/1.1\r\nHost: s\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: s\r\n\r\n", 404),
        (b"BREW /peer/v1/roster HTTP/1.1\r\nHost: s\r\n\r\n", 405),
        (b"GET / HTTP/1.1\r\nHost: s\r\nBad Name: x\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: s\r\n\r\n", 505),
    ];
    for (request, status) in cases {
        let mut adm = admission(AdmissionConfig::default());
        let mut conn = accept(&mut adm, 1, config());
        input(&mut conn, &mut adm, request);
        let evs = events(&mut conn);
        let [ServerEvent::Rejected {
            status: s, error, ..
        }] = evs.as_slice()
        else {
            panic!("{status}: expected one Rejected event, got {evs:?}");
        };
        assert_eq!(*s, status);
        assert_eq!(error.status().code(), status);
        let ts = transmits(&mut conn, &mut adm);
        assert_eq!(ts[0].status, Some(status));
        conn.close(T0, &mut adm);
    }
    // The typed errors themselves.
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(
        &mut conn,
        &mut adm,
        b"GET /metrics HTTP/1.1\r\nHost: s\r\n\r\n",
    );
    assert!(matches!(
        events(&mut conn)[..],
        [ServerEvent::Rejected {
            error: RequestRejection::Route(Rejection::UnknownPath),
            ..
        }]
    ));
    conn.close(T0, &mut adm);
    let mut conn = accept(&mut adm, 1, config());
    let big = get(path(1), &format!("X-Pad: {}\r\n", "a".repeat(9000)));
    let mut off = 0;
    while off < big.len() {
        let n = input(&mut conn, &mut adm, &big[off..]);
        if n == 0 {
            break;
        }
        off += n;
    }
    assert!(matches!(
        events(&mut conn)[..],
        [ServerEvent::Rejected {
            status: 431,
            error: RequestRejection::Malformed(RequestError::HeadTooLarge { .. }),
            ..
        }]
    ));
    conn.close(T0, &mut adm);
}

#[test]
fn a_declined_relay_is_reported_as_a_rejected_request() {
    use peerblock_core::server::{Decline, RequestRejection};
    let (evs, ts, _) = serve_one(
        relay_config(false),
        &with_origin(path(1), 0),
        SourceResult::Miss,
    );
    assert!(matches!(
        evs[..],
        [ServerEvent::Rejected {
            status: 404,
            error: RequestRejection::Relay(Decline::IdentityMismatch),
            ..
        }]
    ));
    assert_eq!(ts[0].status, Some(404));
}
