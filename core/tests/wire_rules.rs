//! The wire rules of the reference transport's test list, checked end to end through
//! the request decoder (what the server sees) and the response encoder (what it sends).

use bytes::BytesMut;
use peerblock_core::http::{
    OutgoingResponse, Rejection, Request, RequestDecoder, ResponseKind, Route,
};
use peerblock_core::wire::{self, BlockPath, Hop, HopError, PathError, Status};

fn request(target: &str, method: &str, hop: Option<&str>) -> Request {
    let mut wire = format!("{method} {target} HTTP/1.1\r\nHost: peer\r\n");
    if let Some(h) = hop {
        wire.push_str(&format!("X-DART-Hop: {h}\r\n"));
    }
    wire.push_str("\r\n");
    let mut d = RequestDecoder::new();
    d.feed(wire.as_bytes());
    d.decode().expect("well framed").expect("complete")
}

fn status(r: &Request) -> u16 {
    match r.route() {
        Ok(_) => 200,
        Err(e) => e.status().code(),
    }
}

/// TestParseBlockPath: path parsing including max u64 and rejects.
#[test]
fn parse_block_path_including_max_u64_and_rejects() {
    let max = format!("/peer/v1/block/{}/{}", "0a".repeat(32), u64::MAX);
    let p = BlockPath::parse(max.as_bytes()).unwrap();
    assert_eq!(p.index, u64::MAX);
    assert_eq!(p.to_string(), max);
    for (bad, err) in [
        (
            "/peer/v1/block/ab/18446744073709551616",
            PathError::IndexOverflow,
        ),
        ("/peer/v1/block/ab/-1", PathError::IndexNotDecimal { at: 0 }),
        ("/peer/v1/block/ab/", PathError::EmptyIndex),
        ("/peer/v1/block/ab", PathError::MissingIndex),
        ("/peer/v1/block/xy/1", PathError::KeyNotHex { at: 0 }),
        ("/peer/v1/block//1", PathError::EmptyKey),
        ("/peer/v1/block/ab/1/extra", PathError::TrailingSegment),
    ] {
        assert_eq!(BlockPath::parse(bad.as_bytes()), Err(err), "{bad}");
    }
}

/// TestServerBadPathAndMethod: malformed paths → 400, unknown paths → 404, non-GET → 405.
#[test]
fn bad_path_is_400_unknown_path_404_and_non_get_405() {
    assert_eq!(status(&request("/peer/v1/block/abc/1", "GET", None)), 400);
    assert_eq!(status(&request("/peer/v1/block/ab/x", "GET", None)), 400);
    assert_eq!(status(&request("/peer/v1/other", "GET", None)), 404);
    assert_eq!(status(&request("/", "GET", None)), 404);
    for method in ["POST", "PUT", "DELETE", "HEAD"] {
        assert_eq!(status(&request("/peer/v1/block/ab/1", method, None)), 405);
        assert_eq!(status(&request(wire::ROSTER_PATH, method, None)), 405);
    }
    assert_eq!(status(&request("/peer/v1/block/ab/1", "GET", None)), 200);
}

/// The path is the target's path only: a query is not part of it, and `//` is not
/// normalised into a block path.
#[test]
fn path_is_parsed_from_the_target_path_only() {
    let r = request("/peer/v1/block/ab/1?x=/peer/v1/roster", "GET", None);
    assert!(matches!(r.route(), Ok(Route::Block { .. })));
    let r = request("//peer/v1/block/ab/1", "GET", None);
    assert_eq!(r.route(), Err(Rejection::UnknownPath));
}

/// TestServerHopValidation: absent hop = 0; non-negative hops, including ones at or past
/// any relay bound, are accepted; negative, malformed and overflowing hops are 400 and
/// the request never routes to the block source.
#[test]
fn hop_validation_absent_zero_large_ok_bad_is_400_and_never_routes() {
    let hop_of = |r: &Request| match r.route() {
        Ok(Route::Block { hop, .. }) => Ok(hop),
        Err(Rejection::BadHop(e)) => Err(e),
        other => panic!("{other:?}"),
    };
    let path = "/peer/v1/block/ab/1";
    assert_eq!(hop_of(&request(path, "GET", None)), Ok(Hop(0)));
    for ok in ["0", "1", "8", "1000", "4294967295"] {
        assert_eq!(
            hop_of(&request(path, "GET", Some(ok))),
            Ok(Hop(ok.parse().unwrap()))
        );
    }
    for (bad, err) in [
        ("-1", HopError::Signed),
        ("-0", HopError::Signed),
        ("+1", HopError::Signed),
        ("1x", HopError::NotDecimal { at: 1 }),
        ("0x1", HopError::NotDecimal { at: 1 }),
        ("4294967296", HopError::OutOfRange),
        ("99999999999999999999", HopError::OutOfRange),
    ] {
        let r = request(path, "GET", Some(bad));
        assert_eq!(hop_of(&r), Err(err), "{bad}");
        assert_eq!(status(&r), 400);
    }
}

/// TestParseHop: decoder edges: empty, leading plus, -0, overflow.
#[test]
fn parse_hop_edges_empty_plus_minus_zero_overflow() {
    assert_eq!(wire::parse_hop(Some(b"")), Err(HopError::Empty));
    assert_eq!(wire::parse_hop(Some(b"+5")), Err(HopError::Signed));
    assert_eq!(wire::parse_hop(Some(b"-0")), Err(HopError::Signed));
    assert_eq!(
        wire::parse_hop(Some(b"4294967296")),
        Err(HopError::OutOfRange)
    );
    assert_eq!(wire::parse_hop(None), Ok(Hop(0)));
}

/// TestServerNodeHeader: X-DART-Node is echoed on every response the server sends.
#[test]
fn node_header_is_on_every_response_kind() {
    for kind in [
        ResponseKind::Block { content_length: 1 },
        ResponseKind::NotFound,
        ResponseKind::BadRequest,
        ResponseKind::MethodNotAllowed,
        ResponseKind::InternalServerError,
        ResponseKind::UpstreamRefused {
            upstream_status: 401,
        },
        ResponseKind::Refused {
            reason: "sessions",
            retry_after_secs: 15,
        },
    ] {
        let mut out = BytesMut::new();
        OutgoingResponse::new(kind, Some("node-42"))
            .encode(&mut out)
            .unwrap();
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert!(text.contains("\r\nX-DART-Node: node-42\r\n"), "{kind:?}");
        assert!(
            text.contains("\r\nContent-Length: "),
            "explicit length: {kind:?}"
        );
    }
}

/// Responses: 200, 404, 400, 405, 500, and 502 + X-DART-Upstream-Status; our 503
/// refusal carries the refusal header and Retry-After and closes.
#[test]
fn response_statuses_and_their_required_headers() {
    let enc = |kind| {
        let mut out = BytesMut::new();
        OutgoingResponse::new(kind, None).encode(&mut out).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    };
    assert!(enc(ResponseKind::Block { content_length: 9 }).starts_with("HTTP/1.1 200 OK\r\n"));
    assert!(enc(ResponseKind::NotFound).starts_with("HTTP/1.1 404 "));
    assert!(enc(ResponseKind::BadRequest).starts_with("HTTP/1.1 400 "));
    assert!(enc(ResponseKind::MethodNotAllowed).contains("\r\nAllow: GET\r\n"));
    assert!(enc(ResponseKind::InternalServerError).starts_with("HTTP/1.1 500 "));
    let bad_gateway = enc(ResponseKind::UpstreamRefused {
        upstream_status: 403,
    });
    assert!(bad_gateway.starts_with("HTTP/1.1 502 "));
    assert!(bad_gateway.contains("\r\nX-DART-Upstream-Status: 403\r\n"));
    let refused = enc(ResponseKind::Refused {
        reason: "sessions",
        retry_after_secs: 15,
    });
    assert!(refused.starts_with("HTTP/1.1 503 "));
    assert!(refused.contains("\r\nX-Peerblock-Refused: sessions\r\n"));
    assert!(refused.contains("\r\nRetry-After: 15\r\n"));
    assert!(refused.contains("\r\nConnection: close\r\n"));
    assert_eq!(Status::from_code(503), Some(Status::ServiceUnavailable));
}
