//! Properties of object identity (`peerblock_common::object`): the origin header round
//! trips to the same identity, the query string never changes the key, the host's case
//! never changes it, size, validator and block size do, blocks tile the object, and no
//! input makes the parsers panic.

use peerblock_common::object::{parse_origin, ObjectIdentity, ObjectUrl};
use proptest::prelude::*;

fn host() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9][a-zA-Z0-9.-]{0,20}"
}

fn path() -> impl Strategy<Value = String> {
    "(/[a-zA-Z0-9._~%-]{0,12}){0,4}"
}

fn query() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9=&%._~-]{0,40}"
}

fn validator() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "\"[ -~]{0,30}\"",
        "W/\"[a-z0-9-]{0,20}\"",
        "[A-Za-z]{3}, [0-9]{2} [A-Za-z]{3} [0-9]{4} [0-9:]{8} GMT",
    ]
}

fn identity() -> impl Strategy<Value = ObjectIdentity> {
    (
        prop::bool::ANY,
        host(),
        prop::option::of(1u16..),
        path(),
        prop::option::of(query()),
        any::<u64>(),
        validator(),
        1u64..=(64 << 20),
    )
        .prop_map(|(https, host, port, path, query, size, validator, bs)| {
            let scheme = if https { "https" } else { "http" };
            let port = port.map_or(String::new(), |p| format!(":{p}"));
            let query = query.map_or(String::new(), |q| format!("?{q}"));
            let url = ObjectUrl::parse(&format!("{scheme}://{host}{port}{path}{query}"))
                .expect("a valid URL");
            ObjectIdentity::new(url, size, validator, bs).expect("a valid identity")
        })
}

proptest! {
    #[test]
    fn the_origin_header_round_trips_to_the_same_identity_and_key(id in identity()) {
        let parsed = parse_origin(&id.origin_header()).unwrap().unwrap();
        prop_assert_eq!(parsed.key(), id.key());
        prop_assert_eq!(parsed, id);
    }

    #[test]
    fn the_query_string_never_changes_the_key(id in identity(), q in query()) {
        let mut other = id.clone();
        other.url.query = Some(q);
        prop_assert_eq!(other.key(), id.key());
    }

    #[test]
    fn the_hosts_case_never_changes_the_key(id in identity()) {
        let header = id.origin_header();
        let (scheme, rest) = header.split_once("://").unwrap();
        let rest = rest.replacen(&id.url.host, &id.url.host.to_ascii_uppercase(), 1);
        let upper = format!("{scheme}://{rest}");
        let parsed = parse_origin(&upper).unwrap().unwrap();
        prop_assert_eq!(parsed.key(), id.key());
    }

    #[test]
    fn a_different_size_validator_or_block_size_is_another_key(id in identity(), d in 1u64..1000) {
        let mut size = id.clone();
        size.size = id.size.wrapping_add(d);
        prop_assert_ne!(size.key(), id.key());
        let mut v = id.clone();
        v.validator.push('x');
        prop_assert_ne!(v.key(), id.key());
        let mut bs = id.clone();
        bs.block_size = if id.block_size > 1 { id.block_size - 1 } else { 2 };
        prop_assert_ne!(bs.key(), id.key());
    }

    #[test]
    fn every_block_lies_inside_the_object_and_they_tile_it(
        size in 0u64..10_000_000, bs in 1u64..3_000_000
    ) {
        let url = ObjectUrl::parse("http://h/o").unwrap();
        let id = ObjectIdentity::new(url, size, String::new(), bs).unwrap();
        let mut next = 0;
        for i in 0..id.blocks() {
            let (start, len) = id.block_range(i).unwrap();
            prop_assert_eq!(start, next);
            prop_assert!(len >= 1 && len <= bs);
            next = start + len;
        }
        prop_assert_eq!(next, size);
        prop_assert_eq!(id.block_range(id.blocks()), None);
    }

    #[test]
    fn no_origin_header_makes_the_parser_panic(s in "[ -~]{0,120}") {
        let _ = parse_origin(&s);
        let _ = parse_origin(&format!("http://h/o#peerblock-object={s}"));
        let _ = ObjectUrl::parse(&s);
    }
}
