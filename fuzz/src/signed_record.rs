//! The signed member record decoder and verifier (`roster::record`, issue 14).

use peerblock_core::roster::record::{hex, id_for_key, verify_batch, Claimed};
use peerblock_core::roster::{Attestation, NodeKey, Roster, RosterMember};

/// First byte selects the mode (its value modulo 3):
///
/// - **0, header**: the rest is an `X-Peerblock-Record` value. Whatever it parses to, a
///   record writes back (`to_header`) to text that parses to the same record and weight;
///   verifying it never panics and agrees with the batch verifier on the same claim.
/// - **1, JSON fields**: the rest is split (at the first two `0xff` bytes) into `seq`,
///   `key` and `sig` texts, placed in a roster member as JSON strings: the member decodes
///   to exactly [`Attestation::from_fields`] of those texts (a bad record never fails the
///   roster), and a signed member writes back and decodes to itself.
/// - **2, tamper**: the next 32 bytes seed a key, the following 8 a sequence number and
///   the rest (as UTF-8, lossily, cut to the bounds) an address; the record it signs
///   verifies, one by one and in a batch, and every single-byte change of the key or the
///   signature, and any other address or sequence number, makes it fail.
pub fn signed_record(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => header(rest),
        1 => fields(rest),
        _ => tamper(rest),
    }
}

fn agree(r: &peerblock_core::roster::RecordSig, addr: &str, weight: f64) {
    let id = id_for_key(&r.key);
    let single = r.verify(&id, addr, weight).is_ok();
    let batch = verify_batch(&[Claimed {
        record: r,
        id: &id,
        addr,
        weight,
    }]);
    assert_eq!(single, batch, "single and batch verification disagree");
}

fn header(value: &[u8]) {
    let (att, weight) = Attestation::from_header(Some(value));
    if let Attestation::Signed(r) = att {
        let text = r.to_header(weight);
        assert_eq!(
            Attestation::from_header(Some(text.as_bytes())),
            (att, weight),
            "{text}"
        );
        agree(&r, "10.0.0.1:7070", weight);
    }
}

fn fields(rest: &[u8]) {
    let mut parts = rest.splitn(3, |&b| b == 0xff);
    let text = |p: Option<&[u8]>| p.map(|b| String::from_utf8_lossy(b).into_owned());
    let (seq, key, sig) = (text(parts.next()), text(parts.next()), text(parts.next()));
    let mut member = serde_json::json!({"id": "n1", "addr": "h:1", "weight": 1.0});
    for (name, value) in [("seq", &seq), ("key", &key), ("sig", &sig)] {
        if let Some(v) = value {
            member[name] = serde_json::Value::String(v.clone());
        }
    }
    let body = serde_json::json!({"epoch": "1", "members": [member]}).to_string();
    let roster = Roster::from_json(body.as_bytes()).expect("a record field never fails the roster");
    let want = Attestation::from_fields(seq.as_deref(), key.as_deref(), sig.as_deref());
    assert_eq!(roster.members[0].record, want);
    if let Attestation::Signed(_) = want {
        let again = Roster::from_json(&roster.to_json()).expect("our own output decodes");
        assert_eq!(again, roster);
    }
}

fn tamper(rest: &[u8]) {
    if rest.len() < 40 {
        return;
    }
    let seed: [u8; 32] = rest[..32].try_into().expect("32 bytes");
    let seq = u64::from_be_bytes(rest[32..40].try_into().expect("8 bytes"));
    let mut addr: String = String::from_utf8_lossy(&rest[40..])
        .chars()
        .take(64)
        .collect();
    if addr.is_empty() {
        addr.push_str("h:1");
    }
    let k = NodeKey::from_seed(&seed);
    let Ok(r) = k.sign(&addr, 1.0, seq) else {
        return;
    };
    assert!(r.verify(k.id(), &addr, 1.0).is_ok());
    agree(&r, &addr, 1.0);
    for i in 0..32 {
        let mut t = r;
        t.key[i] ^= 1 << (i % 8);
        assert!(t.verify(k.id(), &addr, 1.0).is_err(), "key byte {i}");
    }
    for i in 0..64 {
        let mut t = r;
        t.sig[i] ^= 1 << (i % 8);
        assert!(t.verify(k.id(), &addr, 1.0).is_err(), "sig byte {i}");
    }
    let mut t = r;
    t.seq = seq.wrapping_add(1);
    assert!(t.verify(k.id(), &addr, 1.0).is_err());
    let other = format!("{addr}0");
    assert!(r.verify(k.id(), &other, 1.0).is_err());
    // And the same record as roster JSON.
    let m = RosterMember {
        record: Attestation::Signed(r),
        ..RosterMember::new(k.id(), addr.clone(), 1.0)
    };
    let roster = Roster {
        epoch: 0,
        epoch_sig: None,
        members: vec![m],
    };
    let json = roster.to_json();
    assert!(String::from_utf8_lossy(&json).contains(&hex(&r.sig)));
    assert_eq!(Roster::from_json(&json).expect("decodes"), roster);
}
