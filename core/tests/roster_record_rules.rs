//! Rules of `roster::record` that the membership tests do not reach: the weight bounds of
//! signing and verifying, the record header's length bound and weight check, the batch
//! verifier's per-claim checks, hex in either case, and the key seed round trip. Each one
//! was a surviving mutant of `scripts/mutants --in-diff` (docs/testing.md).

use peerblock_core::roster::record::{
    hex, unhex, verify_batch, Claimed, NodeKey, MAX_RECORD_HEADER_LEN,
};
use peerblock_core::roster::{Attestation, MemberProblem};

const ADDR: &str = "node-1.test:7070";

fn key() -> NodeKey {
    NodeKey::from_seed(&[7; 32])
}

#[test]
fn signing_refuses_a_negative_or_non_finite_weight_and_accepts_zero() {
    let k = key();
    for bad in [
        -1.0,
        -f64::MIN_POSITIVE,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ] {
        assert_eq!(
            k.sign(ADDR, bad, 1).err(),
            Some(MemberProblem::BadWeight),
            "weight {bad}"
        );
    }
    assert!(k.sign(ADDR, 0.0, 1).is_ok(), "a zero weight is a weight");
    assert!(k.sign(ADDR, 2.5, 1).is_ok());
}

#[test]
fn verifying_refuses_a_negative_or_non_finite_weight_and_accepts_zero() {
    let k = key();
    let zero = k.sign(ADDR, 0.0, 1).unwrap();
    assert!(zero.verify(k.id(), ADDR, 0.0).is_ok());
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(zero.verify(k.id(), ADDR, bad).is_err(), "weight {bad}");
    }
}

#[test]
fn the_key_seed_gives_back_the_same_key() {
    let k = NodeKey::from_seed(&[9; 32]);
    assert_eq!(k.seed(), [9; 32]);
    let again = NodeKey::from_seed(&k.seed());
    assert_eq!(again.public(), k.public());
    assert_eq!(again.id(), k.id());
    assert_ne!(NodeKey::from_seed(&[1; 32]).public(), k.public());
}

#[test]
fn a_record_header_of_the_documented_maximum_parses_and_one_byte_more_is_refused() {
    // The bound as documented: a 20-digit sequence number, a weight of at most 32
    // characters, the key (64 hex digits), the signature (128) and an admission
    // certificate (128, issue 25), space-separated.
    assert_eq!(
        MAX_RECORD_HEADER_LEN,
        20 + 1 + 32 + 1 + 64 + 1 + 128 + 1 + 128
    );
    let k = key();
    let mut r = k.sign(ADDR, 1.0, u64::MAX).unwrap();
    r.admission = Some([7; 64]);
    let header = r.to_header(1.0);
    let mut parts: Vec<String> = header.split(' ').map(str::to_owned).collect();
    assert_eq!(parts[0].len(), 20, "u64::MAX has 20 digits");
    parts[1] = format!("1.{}", "0".repeat(30));
    assert_eq!(parts[1].len(), 32);
    let at_bound = parts.join(" ");
    assert_eq!(at_bound.len(), 376);
    let (att, weight) = Attestation::from_header(Some(at_bound.as_bytes()));
    assert!(matches!(att, Attestation::Signed(_)), "{att:?}");
    assert_eq!(weight, 1.0);
    parts[1].push('0');
    let over = parts.join(" ");
    let (att, _) = Attestation::from_header(Some(over.as_bytes()));
    assert!(matches!(att, Attestation::Malformed(_)), "{att:?}");
}

#[test]
fn a_record_header_with_a_negative_or_non_finite_weight_is_malformed() {
    let k = key();
    let header = k.sign(ADDR, 1.0, 5).unwrap().to_header(1.0);
    for bad in ["-1", "NaN", "inf", "-0.5"] {
        let mut parts: Vec<&str> = header.split(' ').collect();
        parts[1] = bad;
        let text = parts.join(" ");
        let (att, _) = Attestation::from_header(Some(text.as_bytes()));
        assert!(
            matches!(att, Attestation::Malformed(_)),
            "weight {bad}: {att:?}"
        );
    }
    let mut parts: Vec<&str> = header.split(' ').collect();
    parts[1] = "0";
    let zero = parts.join(" ");
    assert!(matches!(
        Attestation::from_header(Some(zero.as_bytes())).0,
        Attestation::Signed(_)
    ));
}

#[test]
fn a_batch_fails_on_any_claim_with_a_bad_identity_or_weight() {
    let (a, b) = (NodeKey::from_seed(&[1; 32]), NodeKey::from_seed(&[2; 32]));
    let ra = a.sign(ADDR, 1.0, 1).unwrap();
    let rb = b.sign("node-2.test:7070", 0.0, 1).unwrap();
    let good = |weight_b: f64| {
        vec![
            Claimed {
                record: &ra,
                id: a.id(),
                addr: ADDR,
                weight: 1.0,
            },
            Claimed {
                record: &rb,
                id: b.id(),
                addr: "node-2.test:7070",
                weight: weight_b,
            },
        ]
    };
    assert!(
        verify_batch(&good(0.0)),
        "both verify, a zero weight included"
    );
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(!verify_batch(&good(bad)), "weight {bad}");
    }
    let mut bad_addr = good(0.0);
    bad_addr[1].addr = "";
    assert!(!verify_batch(&bad_addr), "an address outside the bounds");
    let mut wrong_id = good(0.0);
    wrong_id[1].id = a.id();
    assert!(!verify_batch(&wrong_id), "an id its key does not certify");
}

#[test]
fn hex_is_read_in_either_case_and_written_in_lower_case() {
    let bytes = [0x0a, 0xbc, 0xde, 0xf1];
    assert_eq!(hex(&bytes), "0abcdef1");
    assert_eq!(unhex::<4>(b"0abcdef1"), Some(bytes));
    assert_eq!(unhex::<4>(b"0ABCDEF1"), Some(bytes));
    assert_eq!(unhex::<1>(b"Ff"), Some([0xff]));
    assert_eq!(unhex::<1>(b"g0"), None);
    assert_eq!(unhex::<1>(b"fff"), None);
}

#[test]
fn every_digit_has_its_value_and_every_other_byte_is_refused_wherever_it_sits() {
    // Every hex digit, both cases, at either place in a byte.
    let digits = b"0123456789abcdefABCDEF";
    for (i, &d) in digits.iter().enumerate() {
        let value = if i < 16 { i as u8 } else { i as u8 - 6 };
        assert_eq!(unhex::<1>(&[d, b'0']), Some([value << 4]), "{}", d as char);
        assert_eq!(unhex::<1>(&[b'0', d]), Some([value]), "{}", d as char);
    }
    // Every other byte, the neighbours of each digit range included (/ : @ G ` g), is
    // refused as the high digit, the low one, both, and in two bytes at once.
    for b in 0..=255u8 {
        if digits.contains(&b) {
            continue;
        }
        assert_eq!(unhex::<1>(&[b, b'0']), None, "byte {b}");
        assert_eq!(unhex::<1>(&[b'0', b]), None, "byte {b}");
        assert_eq!(unhex::<1>(&[b, b]), None, "byte {b} twice");
        assert_eq!(
            unhex::<2>(&[b, b'0', b, b'0']),
            None,
            "byte {b} in two bytes"
        );
    }
}

#[test]
fn a_node_key_prints_its_id_and_never_its_secret() {
    let k = NodeKey::from_seed(&[0x5a; 32]);
    let text = format!("{k:?}");
    assert!(text.contains(k.id()), "{text}");
    assert!(!text.contains(&hex(&k.seed())), "the seed leaked: {text}");
}
