//! Relay decisions: relay below the hop bound with hop + 1, decline past it or before any access.

use super::*;

#[test]
fn miss_with_origin_below_the_hop_bound_relays_with_hop_plus_one() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, relay_config(true));
    input(&mut conn, &mut adm, &with_origin(path(1), 2));
    let ids = fetch_ids(&events(&mut conn));
    assert_eq!(ids[0].1.hop, Hop(2));
    assert_eq!(ids[0].1.origin.as_deref(), Some(&b"https://origin/x"[..]));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    let evs = events(&mut conn);
    let ServerEvent::Relay { id, request } = &evs[0] else {
        panic!("expected a relay, got {evs:?}")
    };
    assert_eq!(request.hop, Hop(3), "the relayed request carries hop + 1");
    conn.handle_source(
        T0,
        &mut adm,
        *id,
        SourceResult::Found(Bytes::from_static(b"relayed")),
    )
    .unwrap();
    let ts = transmits(&mut conn, &mut adm);
    assert!(head(&ts[0]).starts_with("HTTP/1.1 200 "));
    assert_eq!(ts[0].body, Bytes::from_static(b"relayed"));
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn a_corrupt_copy_with_an_origin_is_relayed_and_past_the_hop_bound_says_corrupt() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, relay_config(true));
    input(&mut conn, &mut adm, &with_origin(path(1), 0));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Corrupt)
        .unwrap();
    let evs = events(&mut conn);
    assert!(
        matches!(evs.as_slice(), [ServerEvent::Relay { .. }]),
        "a good copy is fetched on the requester's behalf: {evs:?}"
    );
    conn.close(T0, &mut adm);

    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, relay_config(true));
    input(&mut conn, &mut adm, &with_origin(path(1), 3));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Corrupt)
        .unwrap();
    assert!(events(&mut conn).is_empty(), "hop 3 must not relay");
    let h = head(&transmits(&mut conn, &mut adm)[0]);
    assert!(h.starts_with("HTTP/1.1 404 "), "{h}");
    assert!(h.contains("X-Peerblock-Miss: corrupt\r\n"), "{h}");
}

#[test]
fn miss_at_or_past_the_hop_bound_declines_with_404() {
    for hop in [3, 4, u32::MAX] {
        let mut adm = admission(AdmissionConfig::default());
        let mut conn = accept(&mut adm, 1, relay_config(true));
        input(&mut conn, &mut adm, &with_origin(path(1), hop));
        let ids = fetch_ids(&events(&mut conn));
        conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
            .unwrap();
        assert!(events(&mut conn).is_empty(), "hop {hop} must not relay");
        assert!(head(&transmits(&mut conn, &mut adm)[0]).starts_with("HTTP/1.1 404 "));
    }
}

#[test]
fn relay_miss_is_final() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, relay_config(true));
    input(&mut conn, &mut adm, &with_origin(path(1), 0));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    assert_eq!(events(&mut conn).len(), 1);
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    assert!(events(&mut conn).is_empty(), "relays once");
    assert!(head(&transmits(&mut conn, &mut adm)[0]).starts_with("HTTP/1.1 404 "));
}

#[test]
fn block_index_above_the_maximum_is_declined_before_any_access() {
    let big = BlockPath {
        key: ChunkKey::from_array([1; 32]),
        index: 1001,
    };
    let (evs, ts, adm) = serve_one(relay_config(true), &with_origin(big, 0), SourceResult::Miss);
    assert!(
        asks(&evs).is_empty(),
        "no cache or upstream access: {evs:?}"
    );
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
    assert_released(&adm);
}

#[test]
fn chunk_key_disagreeing_with_origin_identity_is_declined_before_any_access() {
    let (evs, ts, _) = serve_one(
        relay_config(false),
        &with_origin(path(1), 0),
        SourceResult::Miss,
    );
    assert!(
        asks(&evs).is_empty(),
        "no cache or upstream access: {evs:?}"
    );
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
}

#[test]
fn cache_only_requests_and_transport_only_nodes_never_relay() {
    // No origin on a relay-capable node.
    let (evs, ts, _) = serve_one(relay_config(true), &get(path(1), ""), SourceResult::Miss);
    assert_eq!(evs.len(), 1);
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
    // Origin on a transport-only node: no screening, no relay.
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &with_origin(path(1), 0));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    assert!(events(&mut conn).is_empty());
}
