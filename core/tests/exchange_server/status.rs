//! Status paths: 200, 404, 500, 502, 400, 405, 431, and hop validation.

use super::*;

#[test]
fn found_block_is_200_with_content_length_node_and_the_same_bytes() {
    let block = Bytes::from_static(b"0123456789");
    let (evs, ts, adm) = serve_one(
        config(),
        &get(path(1), ""),
        SourceResult::Found(block.clone()),
    );
    assert_eq!(fetch_ids(&evs).len(), 1);
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 200 OK\r\n"), "{h}");
    assert!(h.contains("Content-Length: 10\r\n"), "{h}");
    assert!(h.contains("X-DART-Node: node-a\r\n"), "{h}");
    assert_eq!(ts[0].body, block);
    assert_eq!(
        ts[0].body.as_ptr(),
        block.as_ptr(),
        "served without copying"
    );
    assert_released(&adm);
}

#[test]
fn an_external_block_is_framed_like_a_found_one_with_its_bytes_left_to_the_driver() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let request = get(path(1), "");
    input(&mut conn, &mut adm, &request);
    let evs = events(&mut conn);
    let (id, _) = fetch_ids(&evs)[0].clone();
    conn.handle_source(T0, &mut adm, id, SourceResult::External { len: 10 })
        .unwrap();
    assert_eq!(adm.inflight_bytes(), 10, "reserved like a found block");
    let t = conn.poll_transmit(T0).expect("the response");
    let h = head(&t);
    assert!(h.starts_with("HTTP/1.1 200 OK\r\n"), "{h}");
    assert!(h.contains("Content-Length: 10\r\n"), "{h}");
    assert!(t.body.is_empty(), "the driver sends the bytes itself");
    assert!(t.block);
    assert_eq!(
        t.external,
        Some(peerblock_core::transmit::External {
            request: id,
            len: 10
        })
    );
    conn.handle_transmitted(T0, &mut adm);
    assert_eq!(adm.inflight_bytes(), 0, "released once written");
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn an_external_block_over_the_byte_budget_is_refused_like_a_found_one() {
    let mut adm = admission(AdmissionConfig {
        max_inflight_bytes_per_source: 8,
        max_inflight_bytes: 8,
        ..AdmissionConfig::default()
    });
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let evs = events(&mut conn);
    let (id, _) = fetch_ids(&evs)[0].clone();
    conn.handle_source(T0, &mut adm, id, SourceResult::External { len: 9 })
        .unwrap();
    let t = conn.poll_transmit(T0).expect("the refusal");
    assert_eq!(t.status, Some(503));
    assert_eq!(t.external, None, "a refusal carries no external body");
    conn.close(T0, &mut adm);
}

#[test]
fn only_a_block_response_is_marked_as_a_block() {
    let (_, found, _) = serve_one(
        config(),
        &get(path(1), ""),
        SourceResult::Found(Bytes::from_static(b"block")),
    );
    assert!(found[0].block, "a 200 to a block request carries a block");
    let (_, miss, _) = serve_one(config(), &get(path(1), ""), SourceResult::Miss);
    assert!(!miss[0].block, "a 404's error body is not a block");
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let roster = b"GET /peer/v1/roster HTTP/1.1\r\nHost: s\r\n\r\n";
    input(&mut conn, &mut adm, roster);
    for e in events(&mut conn) {
        if let ServerEvent::Roster { id, .. } = e {
            let table = peerblock_core::roster::Roster {
                epoch: 0,
                epoch_sig: None,
                members: Vec::new(),
            };
            conn.handle_roster(T0, id, &table).unwrap();
        }
    }
    let ts = transmits(&mut conn, &mut adm);
    assert_eq!(ts[0].status, Some(200));
    assert!(!ts[0].block, "a roster body is not a block");
}

#[test]
fn miss_is_a_clean_404() {
    let (_, ts, _) = serve_one(config(), &get(path(1), ""), SourceResult::Miss);
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 404 "), "{h}");
    assert!(h.contains("X-DART-Node: node-a"));
    assert_eq!(ts[0].close, Close::KeepOpen);
}

#[test]
fn a_corrupt_copy_is_a_404_that_says_corrupt_and_keeps_the_connection() {
    let (_, ts, adm) = serve_one(config(), &get(path(1), ""), SourceResult::Corrupt);
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 404 "), "{h}");
    assert!(h.contains("X-Peerblock-Miss: corrupt\r\n"), "{h}");
    assert!(h.contains("X-DART-Node: node-a"), "{h}");
    assert_eq!(ts[0].close, Close::KeepOpen);
    assert!(!ts[0].block);
    let (_, miss, _) = serve_one(config(), &get(path(1), ""), SourceResult::Miss);
    assert!(
        !head(&miss[0]).contains("X-Peerblock-Miss"),
        "a plain miss carries no reason"
    );
    assert_released(&adm);
}

#[test]
fn source_error_is_500() {
    let (_, ts, _) = serve_one(config(), &get(path(1), ""), SourceResult::Failed);
    assert!(head(&ts[0]).starts_with("HTTP/1.1 500 "));
}

#[test]
fn upstream_refusal_is_502_with_the_upstream_status() {
    let (_, ts, _) = serve_one(
        config(),
        &get(path(1), ""),
        SourceResult::UpstreamRefused { status: 403 },
    );
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 502 "), "{h}");
    assert!(h.contains("X-DART-Upstream-Status: 403\r\n"), "{h}");
}

#[test]
fn an_upstream_status_outside_100_to_999_is_a_500_not_a_502() {
    for status in [0, 99, 1000, u16::MAX] {
        let (_, ts, _) = serve_one(
            config(),
            &get(path(1), ""),
            SourceResult::UpstreamRefused { status },
        );
        let h = head(&ts[0]);
        assert!(h.starts_with("HTTP/1.1 500 "), "status {status}: {h}");
        assert!(
            !h.contains("X-DART-Upstream-Status"),
            "status {status}: {h}"
        );
    }
    for status in [100, 999] {
        let (_, ts, _) = serve_one(
            config(),
            &get(path(1), ""),
            SourceResult::UpstreamRefused { status },
        );
        assert!(head(&ts[0]).starts_with("HTTP/1.1 502 "), "status {status}");
    }
}

#[test]
fn malformed_path_is_400_without_invoking_the_source() {
    let (evs, ts, _) = serve_one(
        config(),
        b"GET /peer/v1/block/zz/1 HTTP/1.1\r\nHost: s\r\n\r\n",
        SourceResult::Miss,
    );
    assert!(asks(&evs).is_empty(), "source invoked: {evs:?}");
    assert!(head(&ts[0]).starts_with("HTTP/1.1 400 "));
}

#[test]
fn invalid_hop_is_400_and_the_source_is_never_invoked() {
    for hop in ["-1", "+1", "-0", "abc", "", "99999999999", "1, 2"] {
        let (evs, ts, adm) = serve_one(
            config(),
            &get(path(1), &format!("X-DART-Hop: {hop}\r\n")),
            SourceResult::Miss,
        );
        assert!(asks(&evs).is_empty(), "hop {hop:?} invoked the source");
        assert!(head(&ts[0]).starts_with("HTTP/1.1 400 "), "hop {hop:?}");
        assert_released(&adm);
    }
    let (evs, _, _) = serve_one(
        config(),
        &get(path(1), "X-DART-Hop: 1\r\nX-DART-Hop: 2\r\n"),
        SourceResult::Miss,
    );
    assert!(asks(&evs).is_empty(), "duplicate hop invoked the source");
}

#[test]
fn any_non_negative_hop_is_accepted_at_the_wire_layer() {
    for hop in ["0", "3", "4", "4294967295"] {
        let (evs, ts, _) = serve_one(
            config(),
            &get(path(1), &format!("X-DART-Hop: {hop}\r\n")),
            SourceResult::Miss,
        );
        assert_eq!(fetch_ids(&evs).len(), 1, "hop {hop}");
        assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
    }
}

#[test]
fn non_get_is_405_and_unknown_path_is_404() {
    let (evs, ts, _) = serve_one(
        config(),
        format!(
            "POST {} HTTP/1.1\r\nHost: s\r\nContent-Length: 0\r\n\r\n",
            path(1)
        )
        .as_bytes(),
        SourceResult::Miss,
    );
    assert!(asks(&evs).is_empty());
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 405 "), "{h}");
    assert!(h.contains("Allow: GET"));
    let (evs, ts, _) = serve_one(
        config(),
        b"GET /metrics HTTP/1.1\r\nHost: s\r\n\r\n",
        SourceResult::Miss,
    );
    assert!(asks(&evs).is_empty());
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
}

#[test]
fn oversized_request_head_is_431_and_closes() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let mut req = get(path(1), &format!("X-Pad: {}\r\n", "a".repeat(9000)));
    req.truncate(req.len()); // complete head, over the 8 KiB bound
    let mut offered = &req[..];
    while !offered.is_empty() {
        let n = input(&mut conn, &mut adm, offered);
        if n == 0 {
            break;
        }
        offered = &offered[n..];
    }
    let ts = transmits(&mut conn, &mut adm);
    assert!(
        head(&ts[0]).starts_with("HTTP/1.1 431 "),
        "{}",
        head(&ts[0])
    );
    assert_eq!(ts[0].close, Close::Linger, "431 ends the connection");
    assert!(!conn.is_finished(), "lingers until the peer closes");
    conn.handle_eof(T0);
    assert!(conn.is_finished());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn source_result_is_obtained_before_any_success_byte() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    assert!(
        conn.poll_transmit(T0).is_none(),
        "nothing may be sent before the source answers"
    );
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from_static(b"x")),
    )
    .unwrap();
    assert!(conn.poll_transmit(T0).is_some());
}

#[test]
fn answering_an_unknown_request_is_a_usage_error() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    assert!(
        conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
            .is_err(),
        "answered twice"
    );
}
