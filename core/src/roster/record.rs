//! Self-certifying node identities and signed member records.
//!
//! Every node has an Ed25519 keypair. Its id is derived from its public key
//! ([`id_for_key`]: SHA-256 of a fixed tag and the key, as 64 hex digits, a placement
//! [`PeerId`](crate::placement::PeerId)), so claiming an id proves nothing without the key
//! that hashes to it. A node's *record* binds its id, advertised address, weight and a
//! sequence number that only grows to its key, signed by that key ([`NodeKey::sign`]).
//!
//! Everything here is pure computation: signing takes the secret key as a value (no RNG:
//! Ed25519 signatures are deterministic), verification takes only the record. Generating
//! a key needs randomness and is the driver's job ([`NodeKey::from_seed`] takes 32 bytes
//! it drew from the OS).
//!
//! Wire forms (both ignored by a reference peer, which skips unknown JSON fields and
//! headers):
//!
//! - in a roster, per member: `"seq":"7","key":"<64 hex>","sig":"<128 hex>"` beside
//!   `id`, `addr` and `weight` (the member's own id, address and weight are what is signed);
//! - on a roster request: `X-Peerblock-Record: <seq> <weight> <64 hex key> <128 hex sig>`
//!   beside `X-DART-Node` and `X-DART-Peer-Addr` ([`RecordSig::to_header`],
//!   [`Attestation::from_header`]).
//!
//! The signed message is [`RECORD_TAG`] ‖ len(id) as one byte ‖ id ‖ len(addr) as two
//! big-endian bytes ‖ addr ‖ seq as 8 big-endian bytes ‖ the weight's IEEE-754 bits as 8
//! big-endian bytes ‖ key. An epoch is signed by a cluster authority key as
//! [`EPOCH_TAG`] ‖ epoch as 8 big-endian bytes ([`sign_epoch`], [`verify_epoch`]).

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use super::{check_identity, MemberProblem, MAX_ADDR_LEN, MAX_ID_LEN};

/// Domain tag hashed before a public key to make a node id.
pub const ID_TAG: &[u8] = b"peerblock node id v1\0";

/// Domain tag that starts every signed member record (no signature over a record can be
/// replayed as a signature over anything else this protocol signs).
pub const RECORD_TAG: &[u8] = b"peerblock member record v1\0";

/// Domain tag that starts a signed epoch.
pub const EPOCH_TAG: &[u8] = b"peerblock epoch v1\0";

/// Domain separation of an admission certificate: the authority signs this tag followed by
/// the admitted member's 32-byte public key.
pub const ADMISSION_TAG: &[u8] = b"peerblock admission v1\0";

/// Length of the hex form of a public key (32 bytes).
pub const KEY_HEX_LEN: usize = 64;

/// Length of the hex form of a signature (64 bytes).
pub const SIG_HEX_LEN: usize = 128;

/// Longest `X-Peerblock-Record` value accepted (bytes): a 20-digit sequence number, a
/// weight of at most 32 characters, the key and the signature with their separators fit.
pub const MAX_RECORD_HEADER_LEN: usize =
    20 + 1 + 32 + 1 + KEY_HEX_LEN + 1 + SIG_HEX_LEN + 1 + SIG_HEX_LEN;

/// Longest signed message: tag, id, address and the fixed fields.
const MAX_MESSAGE_LEN: usize = RECORD_TAG.len() + 1 + MAX_ID_LEN + 2 + MAX_ADDR_LEN + 8 + 8 + 32;

/// The node id of a public key: SHA-256([`ID_TAG`] ‖ key) as 64 lower-case hex digits.
pub fn id_for_key(key: &[u8; 32]) -> String {
    hex(&id_digest(key))
}

fn id_digest(key: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(ID_TAG);
    h.update(key);
    h.finalize().into()
}

/// [`id_for_key`] as bytes on the stack: what a check compares, without an allocation (a
/// roster of 4,096 signed members checks 4,096 ids).
fn id_hex(key: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    hex_into(&id_digest(key), &mut out);
    out
}

/// Whether `id` is [`id_for_key`] of `key`.
fn id_matches_key(id: &str, key: &[u8; 32]) -> bool {
    id.as_bytes() == id_hex(key)
}

/// A node's signing key (the secret half of its identity). Never serialized by core.
#[derive(Clone)]
pub struct NodeKey {
    signing: SigningKey,
    public: [u8; 32],
    id: String,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret never reaches a log line.
        f.debug_struct("NodeKey").field("id", &self.id).finish()
    }
}

impl NodeKey {
    /// The key whose secret seed is `seed` (32 bytes the driver drew from the OS, or read
    /// from the node's key file).
    pub fn from_seed(seed: &[u8; 32]) -> NodeKey {
        let signing = SigningKey::from_bytes(seed);
        let public = signing.verifying_key().to_bytes();
        NodeKey {
            id: id_for_key(&public),
            signing,
            public,
        }
    }

    /// The secret seed (for the driver to store in the key file).
    pub fn seed(&self) -> [u8; 32] {
        self.signing.to_bytes()
    }

    /// The public key.
    pub fn public(&self) -> [u8; 32] {
        self.public
    }

    /// The node id the key certifies ([`id_for_key`]).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Signs this node's record: its advertised `addr`, its `weight` and `seq` (which
    /// must grow with every change the node announces, or peers keep the older record).
    ///
    /// `Err` if `addr` is outside the bounds or `weight` is negative or not finite (our
    /// own misuse: nothing is signed).
    pub fn sign(&self, addr: &str, weight: f64, seq: u64) -> Result<RecordSig, MemberProblem> {
        check_identity(&self.id, addr)?;
        if !weight.is_finite() || weight < 0.0 {
            return Err(MemberProblem::BadWeight);
        }
        let mut msg = Vec::with_capacity(MAX_MESSAGE_LEN);
        message(&mut msg, &self.id, addr, weight, seq, &self.public);
        Ok(RecordSig {
            seq,
            key: self.public,
            sig: self.signing.sign(&msg).to_bytes(),
            admission: None,
        })
    }
}

/// The signed part of a member record: the member's id, address and weight travel beside
/// it (in the roster entry or the request's headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordSig {
    /// Sequence number: a record replaces an earlier one of the same id only with a higher
    /// one.
    pub seq: u64,
    /// The member's Ed25519 public key; the member's id must be [`id_for_key`] of it.
    pub key: [u8; 32],
    /// Ed25519 signature over the record's message (module docs).
    pub sig: [u8; 64],
    /// The cluster authority's admission certificate for `key` ([`sign_admission`]), if
    /// the member has one: carried beside the record (the `adm` member field, a fifth
    /// part of `X-Peerblock-Record`), not covered by the record's signature (the
    /// authority's signature covers the key it admits). Admitted clusters place only
    /// members whose certificate verifies (`MembershipMode::Admitted`).
    pub admission: Option<[u8; 64]>,
}

/// What a member entry or a caller says about its record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attestation {
    /// No record fields at all: a reference peer, or a node without a key. An unverified
    /// claim.
    #[default]
    Unsigned,
    /// Record fields that parse; not yet verified.
    Signed(RecordSig),
    /// Record fields present but unusable (truncated, not hex, a missing part). The member
    /// is rejected, never learned as unverified.
    Malformed(RecordFormatError),
}

/// Why record fields could not be parsed (the sender's fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordFormatError {
    /// Some of `seq`, `key`, `sig` are present and others are not.
    #[error("record field {field:?} is missing")]
    Missing {
        /// The absent field.
        field: &'static str,
    },
    /// The sequence number is not a decimal u64.
    #[error("record seq is not a decimal u64")]
    Seq,
    /// The key is not 64 hex digits.
    #[error("record key is not {KEY_HEX_LEN} hex digits")]
    Key,
    /// The signature is not 128 hex digits.
    #[error("record sig is not {SIG_HEX_LEN} hex digits")]
    Sig,
    /// The header's weight is not a finite non-negative number.
    #[error("record weight is not a finite non-negative number")]
    Weight,
    /// The header value is too long or does not have four (or five) space-separated parts.
    #[error("record header is not `<seq> <weight> <key> <sig> [<admission>]`")]
    Shape,
    /// The admission certificate is not 128 hex digits.
    #[error("record admission is not {SIG_HEX_LEN} hex digits")]
    Admission,
}

/// Why a record does not verify (the sender's fault: counted, never learned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The member's id is not [`id_for_key`] of the record's key: a record signed by
    /// another key than the one the id certifies (an impostor signing with its own key).
    #[error("member id is not derived from the record's key")]
    IdMismatch,
    /// The key is not a valid Ed25519 public key (not a curve point, or a weak key).
    #[error("record key is not a valid Ed25519 public key")]
    BadKey,
    /// The signature does not verify over the record's message with its key.
    #[error("record signature does not verify")]
    BadSignature,
    /// The id or address is outside the bounds, or the weight is not finite.
    #[error("record member: {0}")]
    Member(MemberProblem),
}

impl RecordSig {
    /// Verifies the record for the member `id` at `addr` with `weight`: the id must be
    /// [`id_for_key`] of the key and the signature must verify (strictly: no weak keys,
    /// no non-canonical signatures). Pure computation, about one Ed25519 verification.
    pub fn verify(&self, id: &str, addr: &str, weight: f64) -> Result<(), RecordError> {
        check_identity(id, addr).map_err(RecordError::Member)?;
        if !weight.is_finite() || weight < 0.0 {
            return Err(RecordError::Member(MemberProblem::BadWeight));
        }
        if !id_matches_key(id, &self.key) {
            return Err(RecordError::IdMismatch);
        }
        let key = VerifyingKey::from_bytes(&self.key).map_err(|_| RecordError::BadKey)?;
        if key.is_weak() {
            return Err(RecordError::BadKey);
        }
        let mut msg = Vec::with_capacity(MAX_MESSAGE_LEN);
        message(&mut msg, id, addr, weight, self.seq, &self.key);
        key.verify_strict(&msg, &Signature::from_bytes(&self.sig))
            .map_err(|_| RecordError::BadSignature)
    }

    /// A digest of everything the verification covers (the claim and the record), the key
    /// of the verification cache: equal digests verify alike.
    pub fn digest(&self, id: &str, addr: &str, weight: f64) -> [u8; 32] {
        let mut msg = Vec::with_capacity(MAX_MESSAGE_LEN + 64);
        message(&mut msg, id, addr, weight, self.seq, &self.key);
        msg.extend_from_slice(&self.sig);
        Sha256::digest(&msg).into()
    }

    /// The `X-Peerblock-Record` value for a caller with `weight`:
    /// `<seq> <weight> <key hex> <sig hex>`, then ` <admission hex>` when the record
    /// carries an admission certificate.
    pub fn to_header(&self, weight: f64) -> String {
        let mut h = format!(
            "{} {} {} {}",
            self.seq,
            weight,
            hex(&self.key),
            hex(&self.sig)
        );
        if let Some(a) = &self.admission {
            h.push(' ');
            h.push_str(&hex(a));
        }
        h
    }

    /// Whether the record is the same as `other` apart from the admission certificate.
    pub fn same_record(&self, other: &RecordSig) -> bool {
        self.seq == other.seq && self.key == other.key && self.sig == other.sig
    }
}

impl Attestation {
    /// Reads an `X-Peerblock-Record` value: the record and the weight it signs. `None`
    /// header is [`Attestation::Unsigned`] with [`super::DEFAULT_WEIGHT`].
    pub fn from_header(value: Option<&[u8]>) -> (Attestation, f64) {
        let Some(value) = value else {
            return (Attestation::Unsigned, super::DEFAULT_WEIGHT);
        };
        match parse_header(value) {
            Ok((record, weight)) => (Attestation::Signed(record), weight),
            Err(e) => (Attestation::Malformed(e), super::DEFAULT_WEIGHT),
        }
    }

    /// Builds the attestation of a roster member from its raw `seq`, `key` and `sig`
    /// fields (as received; all absent is [`Attestation::Unsigned`]).
    pub fn from_fields(seq: Option<&str>, key: Option<&str>, sig: Option<&str>) -> Attestation {
        if seq.is_none() && key.is_none() && sig.is_none() {
            return Attestation::Unsigned;
        }
        match parse_fields(seq, key, sig) {
            Ok(r) => Attestation::Signed(r),
            Err(e) => Attestation::Malformed(e),
        }
    }

    /// The record, if the fields parsed.
    pub fn record(&self) -> Option<&RecordSig> {
        match self {
            Attestation::Signed(r) => Some(r),
            _ => None,
        }
    }
}

fn parse_fields(
    seq: Option<&str>,
    key: Option<&str>,
    sig: Option<&str>,
) -> Result<RecordSig, RecordFormatError> {
    let missing = |field| RecordFormatError::Missing { field };
    let seq = seq.ok_or(missing("seq"))?;
    let key = key.ok_or(missing("key"))?;
    let sig = sig.ok_or(missing("sig"))?;
    Ok(RecordSig {
        seq: crate::wire::parse_epoch(seq.as_bytes()).ok_or(RecordFormatError::Seq)?,
        key: unhex(key.as_bytes()).ok_or(RecordFormatError::Key)?,
        sig: unhex(sig.as_bytes()).ok_or(RecordFormatError::Sig)?,
        admission: None,
    })
}

fn parse_header(value: &[u8]) -> Result<(RecordSig, f64), RecordFormatError> {
    if value.len() > MAX_RECORD_HEADER_LEN {
        return Err(RecordFormatError::Shape);
    }
    let text = core::str::from_utf8(value).map_err(|_| RecordFormatError::Shape)?;
    let mut parts = text.split(' ');
    let (Some(seq), Some(weight), Some(key), Some(sig), adm, None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(RecordFormatError::Shape);
    };
    let weight: f64 = weight.parse().map_err(|_| RecordFormatError::Weight)?;
    if !weight.is_finite() || weight < 0.0 {
        return Err(RecordFormatError::Weight);
    }
    let mut record = parse_fields(Some(seq), Some(key), Some(sig))?;
    if let Some(adm) = adm {
        record.admission = Some(unhex(adm.as_bytes()).ok_or(RecordFormatError::Admission)?);
    }
    Ok((record, weight))
}

/// One record to verify in a batch ([`verify_batch`]): the record and the claim it signs.
#[derive(Clone, Copy, Debug)]
pub struct Claimed<'a> {
    /// The record.
    pub record: &'a RecordSig,
    /// The member's id.
    pub id: &'a str,
    /// The member's address.
    pub addr: &'a str,
    /// The member's weight.
    pub weight: f64,
}

/// Whether every record verifies, checked at once: each id must be derived from its key
/// and each key valid and not weak (as [`RecordSig::verify`] requires), then all the
/// signatures are checked together (Ed25519 batch verification, with its coefficients
/// derived from the inputs, no RNG: the same inputs always give the same answer). About
/// three times cheaper per record than one by one for large batches. `false` says only
/// that at least one does not verify: verify them one by one to find which.
pub fn verify_batch(claims: &[Claimed<'_>]) -> bool {
    // Every message in one buffer (one allocation for the batch, not one a record).
    let mut text = Vec::new();
    let mut ends = Vec::with_capacity(claims.len());
    let mut signatures = Vec::with_capacity(claims.len());
    let mut keys = Vec::with_capacity(claims.len());
    for c in claims {
        if check_identity(c.id, c.addr).is_err()
            || !c.weight.is_finite()
            || c.weight < 0.0
            || !id_matches_key(c.id, &c.record.key)
        {
            return false;
        }
        let Ok(key) = VerifyingKey::from_bytes(&c.record.key) else {
            return false;
        };
        if key.is_weak() {
            return false;
        }
        message(
            &mut text,
            c.id,
            c.addr,
            c.weight,
            c.record.seq,
            &c.record.key,
        );
        ends.push(text.len());
        signatures.push(Signature::from_bytes(&c.record.sig));
        keys.push(key);
    }
    let starts = std::iter::once(0).chain(ends.iter().copied());
    let messages: Vec<&[u8]> = starts.zip(&ends).map(|(a, &b)| &text[a..b]).collect();
    ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok()
}

/// Signs `epoch` with a cluster authority key (the operator's tool; pure).
pub fn sign_epoch(authority: &NodeKey, epoch: u64) -> [u8; 64] {
    authority.signing.sign(&epoch_message(epoch)).to_bytes()
}

/// The cluster authority's admission certificate for a member's public key
/// `member_key` (`peerblock-node key admit`; pure): its signature over
/// [`ADMISSION_TAG`] ‖ key. Served with the member's record; nodes in
/// `MembershipMode::Admitted` place only members whose certificate verifies.
pub fn sign_admission(authority: &NodeKey, member_key: &[u8; 32]) -> [u8; 64] {
    let mut msg = Vec::with_capacity(ADMISSION_TAG.len() + 32);
    msg.extend_from_slice(ADMISSION_TAG);
    msg.extend_from_slice(member_key);
    authority.signing.sign(&msg).to_bytes()
}

/// Whether `sig` is the authority `authority`'s admission certificate for `member_key`
/// (strict verification; an invalid or weak authority key verifies nothing).
pub fn verify_admission(authority: &[u8; 32], member_key: &[u8; 32], sig: &[u8; 64]) -> bool {
    let Ok(k) = VerifyingKey::from_bytes(authority) else {
        return false;
    };
    if k.is_weak() {
        return false;
    }
    let mut msg = Vec::with_capacity(ADMISSION_TAG.len() + 32);
    msg.extend_from_slice(ADMISSION_TAG);
    msg.extend_from_slice(member_key);
    k.verify_strict(&msg, &Signature::from_bytes(sig)).is_ok()
}

/// Whether `sig` is the authority `key`'s signature over `epoch`.
pub fn verify_epoch(key: &[u8; 32], epoch: u64, sig: &[u8; 64]) -> bool {
    let Ok(key) = VerifyingKey::from_bytes(key) else {
        return false;
    };
    !key.is_weak()
        && key
            .verify_strict(&epoch_message(epoch), &Signature::from_bytes(sig))
            .is_ok()
}

fn epoch_message(epoch: u64) -> [u8; EPOCH_TAG.len() + 8] {
    let mut m = [0u8; EPOCH_TAG.len() + 8];
    m[..EPOCH_TAG.len()].copy_from_slice(EPOCH_TAG);
    m[EPOCH_TAG.len()..].copy_from_slice(&epoch.to_be_bytes());
    m
}

fn message(out: &mut Vec<u8>, id: &str, addr: &str, weight: f64, seq: u64, key: &[u8; 32]) {
    // Bounds were checked by the callers: id ≤ 128 bytes, addr ≤ 272.
    out.extend_from_slice(RECORD_TAG);
    out.push(id.len() as u8);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(&(addr.len() as u16).to_be_bytes());
    out.extend_from_slice(addr.as_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&weight.to_bits().to_be_bytes());
    out.extend_from_slice(key);
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    hex_into(bytes, &mut out);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// Writes the lower-case hex of `bytes` into `out` (two digits a byte).
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
}

/// Exactly `2 * N` hex digits (either case) as `N` bytes.
pub fn unhex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    // One table look-up a digit, and one check for the whole text (a roster of 4,096
    // signed members carries 786,432 hex digits; a per-digit branch cost 0.4 µs a record).
    let mut out = [0u8; N];
    let mut bad = 0u8;
    for (o, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (hi, lo) = (
            HEX_VALUE[usize::from(pair[0])],
            HEX_VALUE[usize::from(pair[1])],
        );
        bad |= hi | lo;
        *o = hi << 4 | lo;
    }
    (bad & NOT_HEX == 0).then_some(out)
}

/// Marks a byte that is not a hex digit in [`HEX_VALUE`] (no digit's value has this bit).
const NOT_HEX: u8 = 0x80;

/// Each byte's value as a hex digit (either case), or [`NOT_HEX`].
const HEX_VALUE: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> NodeKey {
        NodeKey::from_seed(&[n; 32])
    }

    #[test]
    fn a_signed_record_verifies_and_any_change_breaks_it() {
        let k = key(1);
        let r = k.sign("10.0.0.1:7070", 1.0, 3).unwrap();
        assert_eq!(r.verify(k.id(), "10.0.0.1:7070", 1.0), Ok(()));
        assert_eq!(
            r.verify(k.id(), "10.0.0.9:7070", 1.0),
            Err(RecordError::BadSignature)
        );
        assert_eq!(
            r.verify(k.id(), "10.0.0.1:7070", 2.0),
            Err(RecordError::BadSignature)
        );
        let mut newer = r;
        newer.seq = 4;
        assert_eq!(
            newer.verify(k.id(), "10.0.0.1:7070", 1.0),
            Err(RecordError::BadSignature)
        );
    }

    #[test]
    fn an_id_not_derived_from_the_key_is_a_mismatch() {
        let (victim, thief) = (key(1), key(2));
        let r = thief.sign("6.6.6.6:1", 1.0, 9).unwrap();
        assert_eq!(
            r.verify(victim.id(), "6.6.6.6:1", 1.0),
            Err(RecordError::IdMismatch)
        );
        // The victim's key with the thief's signature: another key signed it.
        let mut forged = r;
        forged.key = victim.public();
        assert_eq!(
            forged.verify(victim.id(), "6.6.6.6:1", 1.0),
            Err(RecordError::BadSignature)
        );
    }

    #[test]
    fn header_round_trips_and_bad_headers_are_malformed() {
        let k = key(3);
        let r = k.sign("h:1", 0.5, u64::MAX).unwrap();
        let text = r.to_header(0.5);
        assert_eq!(
            Attestation::from_header(Some(text.as_bytes())),
            (Attestation::Signed(r), 0.5)
        );
        assert_eq!(
            Attestation::from_header(None),
            (Attestation::Unsigned, super::super::DEFAULT_WEIGHT)
        );
        let truncated = &text[..text.len() - 2];
        assert!(matches!(
            Attestation::from_header(Some(truncated.as_bytes())).0,
            Attestation::Malformed(RecordFormatError::Sig)
        ));
        for bad in ["", "1 1 x y", "1 1", "1 -1 aa bb", "a b c d e"] {
            assert!(
                matches!(
                    Attestation::from_header(Some(bad.as_bytes())).0,
                    Attestation::Malformed(_)
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn fields_all_or_nothing() {
        assert_eq!(
            Attestation::from_fields(None, None, None),
            Attestation::Unsigned
        );
        assert_eq!(
            Attestation::from_fields(Some("1"), None, None),
            Attestation::Malformed(RecordFormatError::Missing { field: "key" })
        );
        let k = hex(&[0u8; 32]);
        assert_eq!(
            Attestation::from_fields(Some("1"), Some(&k), Some("zz")),
            Attestation::Malformed(RecordFormatError::Sig)
        );
    }

    /// A record whose signature is valid but whose claim `NodeKey::sign` would never make:
    /// signed by `signer` over `id`, `addr`, `weight` as given (an attacker writes its own
    /// signer; the message format is public).
    fn forged(signer: &NodeKey, id: &str, addr: &str, weight: f64) -> RecordSig {
        let mut msg = Vec::new();
        message(&mut msg, id, addr, weight, 1, &signer.public());
        RecordSig {
            seq: 1,
            key: signer.public(),
            sig: signer.signing.sign(&msg).to_bytes(),
            admission: None,
        }
    }

    #[test]
    fn a_validly_signed_record_for_an_id_its_key_does_not_certify_is_refused() {
        // The identity hijack with a real signature: the attacker signs the victim's id
        // with its own key. Only the id check stands between it and the victim's entry.
        let (attacker, victim) = (key(1), key(2));
        let r = forged(&attacker, victim.id(), "evil.test:7070", 1.0);
        assert_eq!(
            r.verify(victim.id(), "evil.test:7070", 1.0),
            Err(RecordError::IdMismatch)
        );
        let honest = key(3);
        let good = honest.sign("n3.test:7070", 1.0, 1).unwrap();
        let batch = |id: &str, r: &RecordSig| {
            let claims = [
                Claimed {
                    record: &good,
                    id: honest.id(),
                    addr: "n3.test:7070",
                    weight: 1.0,
                },
                Claimed {
                    record: r,
                    id,
                    addr: "evil.test:7070",
                    weight: 1.0,
                },
            ];
            verify_batch(&claims)
        };
        assert!(!batch(victim.id(), &r), "the batch refuses it too");
        // The same signature for the attacker's own id fails only at the signature.
        assert!(!batch(attacker.id(), &r));
    }

    #[test]
    fn a_validly_signed_record_with_an_address_outside_the_bounds_is_refused() {
        let k = key(5);
        let long = "a".repeat(MAX_ADDR_LEN + 1);
        for (addr, problem) in [
            ("", MemberProblem::EmptyAddr),
            (long.as_str(), MemberProblem::AddrTooLong),
        ] {
            let r = forged(&k, k.id(), addr, 1.0);
            assert_eq!(
                r.verify(k.id(), addr, 1.0),
                Err(RecordError::Member(problem))
            );
            let claim = Claimed {
                record: &r,
                id: k.id(),
                addr,
                weight: 1.0,
            };
            assert!(!verify_batch(&[claim]), "{problem:?}");
        }
    }

    #[test]
    fn a_validly_signed_record_with_a_weight_outside_the_bounds_is_refused() {
        let k = key(4);
        for weight in [-1.0, f64::NAN, f64::INFINITY] {
            let r = forged(&k, k.id(), "n4.test:7070", weight);
            assert_eq!(
                r.verify(k.id(), "n4.test:7070", weight),
                Err(RecordError::Member(MemberProblem::BadWeight)),
                "{weight}"
            );
            let claim = Claimed {
                record: &r,
                id: k.id(),
                addr: "n4.test:7070",
                weight,
            };
            assert!(!verify_batch(&[claim]), "{weight}");
        }
    }

    #[test]
    fn a_batch_verifies_only_if_every_record_does() {
        let keys: Vec<NodeKey> = (1..=20).map(key).collect();
        let addr = "10.0.0.1:7070";
        let recs: Vec<RecordSig> = keys.iter().map(|k| k.sign(addr, 1.0, 1).unwrap()).collect();
        let claims = |recs: &[RecordSig]| -> Vec<(RecordSig, String)> {
            recs.iter()
                .zip(&keys)
                .map(|(r, k)| (*r, k.id().to_owned()))
                .collect()
        };
        let owned = claims(&recs);
        let good: Vec<Claimed<'_>> = owned
            .iter()
            .map(|(r, id)| Claimed {
                record: r,
                id,
                addr,
                weight: 1.0,
            })
            .collect();
        assert!(verify_batch(&good));
        let mut bad = recs.clone();
        bad[7].sig[3] ^= 0x10;
        let owned_bad = claims(&bad);
        let batch: Vec<Claimed<'_>> = owned_bad
            .iter()
            .map(|(r, id)| Claimed {
                record: r,
                id,
                addr,
                weight: 1.0,
            })
            .collect();
        assert!(!verify_batch(&batch));
        // Another claimed address breaks it too.
        let mut moved = good.clone();
        moved[2].addr = "10.6.6.6:1";
        assert!(!verify_batch(&moved));
    }

    #[test]
    fn epochs_verify_only_with_the_authority_key() {
        let (auth, other) = (key(7), key(8));
        let sig = sign_epoch(&auth, 42);
        assert!(verify_epoch(&auth.public(), 42, &sig));
        assert!(!verify_epoch(&auth.public(), 43, &sig));
        assert!(!verify_epoch(&other.public(), 42, &sig));
        assert!(!verify_epoch(&auth.public(), 42, &sign_epoch(&other, 42)));
    }

    #[test]
    fn ids_are_64_hex_digits_and_placement_ids() {
        let id = key(1).id().to_owned();
        assert_eq!(id.len(), 64);
        assert!(id.parse::<crate::placement::PeerId>().is_ok());
        assert_ne!(id, key(2).id());
    }
}
