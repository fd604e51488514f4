//! Membership exchange (`GET /peer/v1/roster`, peer-transport §3.7).
//!
//! Membership rides the peer listener: a node holding only an address (from DNS or a seed
//! list) asks that address for its roster and learns, in one exchange, the responder's
//! stable id and the members it knows. The JSON form is deliberate in four ways:
//!
//! - **Members always include the sender.** That entry is why a caller holding only an
//!   address asks at all: placement needs ids, seeds hand out addresses. A responder that
//!   omits itself is repaired from its `X-DART-Node` header ([`Roster::ensure_member`]).
//! - **The epoch is a decimal string**, not a JSON number: it is a full u64 and JSON
//!   numbers are doubles, which silently corrupt values above 2^53.
//! - **No liveness field.** Liveness is a local observation; propagating it would turn one
//!   node's transient failure into cluster-wide churn. Unknown fields (including a `state`
//!   sent by someone else) are ignored on input and never produced on output.
//! - **The caller teaches the server.** The caller sends its id (`X-DART-Node`) and its
//!   advertised address (`X-DART-Peer-Addr`), which cannot be derived from the connection
//!   (the source port is ephemeral). The server learns exactly that pair
//!   ([`Membership::learn_caller`], with its signed record if it sent one); a caller that
//!   omits either teaches nothing.
//!
//! Wire form, as we write it (keys as below; see `docs/wire.md` for why this spelling):
//!
//! ```json
//! {"epoch":"18446744073709551615","members":[{"id":"n1","addr":"10.0.0.1:7070","weight":1.0}]}
//! ```
//!
//! and as a reference Go peer writes it (`encoding/json` on the untagged structs), which
//! [`Roster::from_json`] reads as well:
//!
//! ```json
//! {"Epoch":"7","Members":[{"ID":"n1","Addr":"127.0.0.1:7070","Weight":1}]}
//! {"Epoch":"","Members":null}
//! ```
//!
//! Keys match case-insensitively by Go's rule, a repeated key overwrites the earlier one,
//! `"Members":null` is no members and the empty epoch `""` (Go's zero value) is
//! [`NO_EPOCH`]; the rules are on [`Roster::from_json`].
//!
//! Errors are split by whose fault they are: [`RosterDecodeError`] for a body we received
//! (the peer's fault: the client exchange reports it as a protocol error), and
//! [`RosterBuildError`] for a roster this node is about to send (our own misuse).
//!
//! **Signed records** ([`record`]): a node's id is derived from its Ed25519 public key, and
//! its record (id, address, weight, a growing sequence number, key) is signed by it and
//! carried as extra member fields (`seq`, `key`, `sig`) and the `X-Peerblock-Record`
//! request header, which a reference peer ignores. An authority-signed epoch travels as
//! `epoch_sig`. See `docs/security.md`.
//!
//! [`Membership`] is the bounded table a node keeps; its verification, merge, epoch and
//! learning-budget rules are documented on the type. [`Refresh`] is the machine that decides when the node fetches
//! rosters and from whom (seeds, then random members), so no driver invents its own loop.

mod decode;
pub mod record;
mod refresh;
mod table;
mod verify;

pub use record::{Attestation, NodeKey, RecordError, RecordFormatError, RecordSig};
pub use refresh::{
    AnswerOutcome, Refresh, RefreshConfig, RefreshConfigError, RefreshEvent, RefreshStats,
    RefreshTimer, DEFAULT_MAX_REFRESH_IN_FLIGHT, DEFAULT_REFRESH_FANOUT,
    DEFAULT_REFRESH_FETCH_TIMEOUT, DEFAULT_REFRESH_INTERVAL, DEFAULT_REFRESH_JITTER,
    MAX_REFRESH_FANOUT, MAX_REFRESH_INTERVAL, MAX_REFRESH_IN_FLIGHT, MAX_REFRESH_SEEDS,
};
pub use table::{
    ClaimRejection, LearnOutcome, Membership, MembershipMode, MembershipPolicy, MembershipStats,
    MergeReport, PolicyError, DEFAULT_LEARN_INTERVAL, DEFAULT_MAX_CHECKS_PER_SOURCE,
    DEFAULT_MAX_NEW_PER_SOURCE, DEFAULT_MAX_PLACED_PER_HOST, DEFAULT_MAX_PLACED_PER_PREFIX,
    MAX_LEARN_INTERVAL, MAX_LEARN_SOURCES, MAX_PLACED_WEIGHT, VERIFY_CACHE_CAPACITY,
};
pub use verify::{Checks, Verified, MIN_PARALLEL_PART, MIN_VERIFY_BATCH};

use serde::ser::SerializeStruct;
use serde::Serialize;

use crate::wire;

/// Longest member id accepted (bytes). Ids are opaque names (typically 64 hex digits of a
/// 256-bit id); the bound caps the memory one hostile roster entry can claim.
pub const MAX_ID_LEN: usize = 128;

/// Longest member address accepted (bytes): `host:port` with a DNS name of at most 253
/// bytes plus a port fits comfortably.
pub const MAX_ADDR_LEN: usize = 272;

/// Most members a roster may carry: the same 4096 bound as the per-peer breaker map, so a
/// roster can describe every peer a node can track and no more.
pub const MAX_ROSTER_MEMBERS: usize = 4096;

/// Largest roster body accepted or produced (bytes). 4096 members of maximal id and
/// address with JSON punctuation and a weight stay below it, so any roster within
/// [`MAX_ROSTER_MEMBERS`] fits; a client reads at most this many bytes of a roster body.
pub const MAX_ROSTER_BYTES: usize = 2 * 1024 * 1024;

/// Longest epoch text quoted back in a [`RosterDecodeError::Epoch`] (bytes): enough to
/// show any valid epoch (20 digits) and what went wrong, without echoing a hostile
/// megabyte into a log line.
pub const MAX_QUOTED_EPOCH: usize = 32;

/// Weight given to a member learned without one (a caller's self-identification, or a
/// responder repaired from its header).
pub const DEFAULT_WEIGHT: f64 = 1.0;

/// The epoch of a roster that carries none: the empty string `""`, Go's zero value for the
/// reference's `Epoch string` (what a reference peer sends while epochs are unused), and
/// `null`. It is the lowest epoch, so such a roster is never newer than anything: merged,
/// it only adds members the table does not know (as hearsay) and never overwrites or
/// raises the table's epoch. We write it as `"0"`, which every reader accepts.
pub const NO_EPOCH: u64 = 0;

/// A membership snapshot as exchanged on the wire.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Roster {
    /// Version of the membership view; a full u64, carried as a decimal string.
    /// [`NO_EPOCH`] (0) when the sender has none.
    #[serde(serialize_with = "epoch_string")]
    pub epoch: u64,
    /// The cluster authority's signature over `epoch` ([`record::sign_epoch`]), as
    /// `"epoch_sig"` (128 hex digits; absent when `None`). Only a signed epoch is adopted by
    /// a node that names the authority; see [`Membership`]. A value that is not 128 hex
    /// digits is read as `None`.
    #[serde(
        serialize_with = "epoch_sig_hex",
        skip_serializing_if = "Option::is_none"
    )]
    pub epoch_sig: Option<[u8; 64]>,
    /// Known members, including the sender itself.
    pub members: Vec<RosterMember>,
}

/// One member: its stable id, the address it advertises, its placement weight and, when
/// signed, its record (written as `seq`, `key`, `sig` beside the other fields, which a
/// reference peer ignores).
#[derive(Clone, Debug, PartialEq)]
pub struct RosterMember {
    /// Stable node id (what liveness and placement are keyed on; never the address, which
    /// pod-IP reuse can recycle to a different member).
    pub id: String,
    /// Advertised `host:port` of the member's peer listener.
    pub addr: String,
    /// Relative placement weight (rendezvous hashing); finite and non-negative.
    pub weight: f64,
    /// The member's signed record as received or held ([`Attestation::Unsigned`] for a
    /// reference peer or a member we only know unverified). Only
    /// [`Attestation::Signed`] is written.
    pub record: Attestation,
}

impl RosterMember {
    /// An unsigned member.
    pub fn new(id: impl Into<String>, addr: impl Into<String>, weight: f64) -> RosterMember {
        RosterMember {
            id: id.into(),
            addr: addr.into(),
            weight,
            record: Attestation::Unsigned,
        }
    }
}

impl Serialize for RosterMember {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let record = self.record.record();
        let fields = match record {
            Some(r) if r.admission.is_some() => 7,
            Some(_) => 6,
            None => 3,
        };
        let mut st = s.serialize_struct("RosterMember", fields)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("addr", &self.addr)?;
        st.serialize_field("weight", &self.weight)?;
        if let Some(r) = record {
            st.serialize_field("seq", &r.seq.to_string())?;
            st.serialize_field("key", &record::hex(&r.key))?;
            st.serialize_field("sig", &record::hex(&r.sig))?;
            if let Some(a) = &r.admission {
                st.serialize_field("adm", &record::hex(a))?;
            }
        }
        st.end()
    }
}

fn epoch_sig_hex<S: serde::Serializer>(sig: &Option<[u8; 64]>, s: S) -> Result<S::Ok, S::Error> {
    match sig {
        Some(sig) => s.serialize_str(&record::hex(sig)),
        None => s.serialize_none(),
    }
}

/// What was wrong with a roster body we received. The remote peer's fault: the client
/// exchange reports it as [`ProtocolError::Roster`](crate::client::ProtocolError::Roster),
/// so a driver can log it and charge the peer.
#[derive(Debug, thiserror::Error)]
pub enum RosterDecodeError {
    /// The body is longer than [`MAX_ROSTER_BYTES`].
    #[error("roster body of {len} bytes exceeds the {max}-byte bound")]
    TooLarge {
        /// Body length.
        len: usize,
        /// [`MAX_ROSTER_BYTES`].
        max: usize,
    },
    /// The body is not JSON of the roster's shape (syntax, a member that is not an object,
    /// a number where a string belongs, ...). The message names the line and column.
    #[error("malformed roster JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A field every roster carries is absent (keys are matched case-insensitively).
    #[error("roster JSON lacks the {field:?} field")]
    MissingField {
        /// The field, as we spell it (`epoch` or `members`).
        field: &'static str,
    },
    /// The epoch is neither empty nor a decimal `u64` (a sign, a non-digit, more than 20
    /// digits, or above `u64::MAX`).
    #[error("roster epoch {value:?} is not a decimal u64")]
    Epoch {
        /// The epoch text, cut to [`MAX_QUOTED_EPOCH`] bytes.
        value: String,
    },
    /// More than [`MAX_ROSTER_MEMBERS`] members.
    #[error("roster lists {count} members, more than the {max} allowed")]
    TooManyMembers {
        /// Members listed.
        count: usize,
        /// [`MAX_ROSTER_MEMBERS`].
        max: usize,
    },
    /// A member object lacks one of its fields.
    #[error("roster member {index} lacks the {field:?} field")]
    MissingMemberField {
        /// Position in `members`.
        index: usize,
        /// The field, as we spell it (`id`, `addr` or `weight`).
        field: &'static str,
    },
    /// A member entry is outside the bounds.
    #[error("roster member {index}: {problem}")]
    Member {
        /// Position in `members`.
        index: usize,
        /// What is wrong with it.
        problem: MemberProblem,
    },
}

/// What is wrong with a roster this node is about to send (local misuse: the application
/// built it; a peer would reject it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RosterBuildError {
    /// More than [`MAX_ROSTER_MEMBERS`] members.
    #[error("roster to send lists {count} members, more than the {max} allowed")]
    TooManyMembers {
        /// Members listed.
        count: usize,
        /// [`MAX_ROSTER_MEMBERS`].
        max: usize,
    },
    /// A member entry is outside the bounds.
    #[error("roster to send, member {index}: {problem}")]
    Member {
        /// Position in `members`.
        index: usize,
        /// What is wrong with it.
        problem: MemberProblem,
    },
}

/// What is wrong with one member entry (or one learned id/address pair).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemberProblem {
    /// Empty id.
    #[error("empty id")]
    EmptyId,
    /// Id longer than [`MAX_ID_LEN`].
    #[error("id longer than {MAX_ID_LEN} bytes")]
    IdTooLong,
    /// Empty address.
    #[error("empty address")]
    EmptyAddr,
    /// Address longer than [`MAX_ADDR_LEN`].
    #[error("address longer than {MAX_ADDR_LEN} bytes")]
    AddrTooLong,
    /// Weight is negative or not finite.
    #[error("weight is negative or not finite")]
    BadWeight,
}

/// Checks one id/address pair against the bounds.
pub fn check_identity(id: &str, addr: &str) -> Result<(), MemberProblem> {
    if id.is_empty() {
        return Err(MemberProblem::EmptyId);
    }
    if id.len() > MAX_ID_LEN {
        return Err(MemberProblem::IdTooLong);
    }
    if addr.is_empty() {
        return Err(MemberProblem::EmptyAddr);
    }
    if addr.len() > MAX_ADDR_LEN {
        return Err(MemberProblem::AddrTooLong);
    }
    Ok(())
}

/// Parses a roster's epoch text: `""` (Go's zero value) is [`NO_EPOCH`]; anything else
/// must be a decimal `u64` as [`wire::parse_epoch`] reads it (digits only, at most 20,
/// at most `u64::MAX`). `None` when it is neither.
pub fn parse_roster_epoch(text: &str) -> Option<u64> {
    if text.is_empty() {
        return Some(NO_EPOCH);
    }
    wire::parse_epoch(text.as_bytes())
}

impl RosterMember {
    /// Checks the member against the bounds.
    pub fn check(&self) -> Result<(), MemberProblem> {
        check_identity(&self.id, &self.addr)?;
        if !self.weight.is_finite() || self.weight < 0.0 {
            return Err(MemberProblem::BadWeight);
        }
        Ok(())
    }
}

/// The first `max` bytes of `s`, cut back to a character boundary.
fn quote_prefix(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

impl Roster {
    /// A roster of no members and no epoch ([`NO_EPOCH`], unsigned): what a node without a
    /// membership table answers a roster request with. Core adds the answering node's own
    /// entry when it writes the answer, so this is "just me" on the wire.
    pub fn empty() -> Roster {
        Roster::of(Vec::new())
    }

    /// A roster of `members` with no epoch ([`NO_EPOCH`], unsigned). A driver with a
    /// membership table answers with its snapshot instead (`Membership::snapshot`).
    pub fn of(members: Vec<RosterMember>) -> Roster {
        Roster {
            epoch: NO_EPOCH,
            epoch_sig: None,
            members,
        }
    }

    /// Decodes and checks a roster body received from a peer.
    ///
    /// Reads both our spelling and a Go peer's: keys match case-insensitively by Go's
    /// `encoding/json` rule (ASCII case, plus `ſ`/`K` folding with `s`/`k`); a repeated
    /// key (in any spelling) overwrites the earlier one, as in Go; `null` for the epoch
    /// or a member's string or weight leaves Go's zero value, `"Members":null` is no
    /// members, and the epoch `""` is [`NO_EPOCH`]. A weight may be any JSON number
    /// (`1`, `1.0`, `0.5`). Unknown fields are ignored.
    ///
    /// Errors ([`RosterDecodeError`]): a body over [`MAX_ROSTER_BYTES`], malformed JSON,
    /// a numeric or otherwise invalid epoch, a missing `epoch`/`members` key or member
    /// field (a Go peer always writes all of them), more than [`MAX_ROSTER_MEMBERS`]
    /// members, or a member over the bounds.
    pub fn from_json(body: &[u8]) -> Result<Roster, RosterDecodeError> {
        if body.len() > MAX_ROSTER_BYTES {
            return Err(RosterDecodeError::TooLarge {
                len: body.len(),
                max: MAX_ROSTER_BYTES,
            });
        }
        let raw: decode::RawRoster = serde_json::from_slice(body)?;
        let epoch_text = raw
            .epoch
            .ok_or(RosterDecodeError::MissingField { field: "epoch" })?;
        let epoch = parse_roster_epoch(&epoch_text).ok_or_else(|| RosterDecodeError::Epoch {
            value: quote_prefix(&epoch_text, MAX_QUOTED_EPOCH),
        })?;
        if !raw.members_seen {
            return Err(RosterDecodeError::MissingField { field: "members" });
        }
        if raw.members_listed > MAX_ROSTER_MEMBERS {
            return Err(RosterDecodeError::TooManyMembers {
                count: raw.members_listed,
                max: MAX_ROSTER_MEMBERS,
            });
        }
        let mut members = Vec::with_capacity(raw.members.len());
        for (index, m) in raw.members.into_iter().enumerate() {
            let missing = |field| RosterDecodeError::MissingMemberField { index, field };
            let mut record =
                Attestation::from_fields(m.seq.as_deref(), m.key.as_deref(), m.sig.as_deref());
            if let (Attestation::Signed(r), Some(adm)) = (&mut record, m.adm.as_deref()) {
                // A certificate that is not 128 hex digits is no certificate: the member
                // is simply not admitted (its record still verifies on its own).
                r.admission = record::unhex(adm.as_bytes());
            }
            let member = RosterMember {
                id: m.id.ok_or_else(|| missing("id"))?,
                addr: m.addr.ok_or_else(|| missing("addr"))?,
                weight: m.weight.ok_or_else(|| missing("weight"))?,
                record,
            };
            member
                .check()
                .map_err(|problem| RosterDecodeError::Member { index, problem })?;
            members.push(member);
        }
        let epoch_sig = raw
            .epoch_sig
            .as_deref()
            .and_then(|t| record::unhex::<64>(t.as_bytes()));
        Ok(Roster {
            epoch,
            epoch_sig,
            members,
        })
    }

    /// Checks member count and every member of a roster this node is about to send.
    pub fn check(&self) -> Result<(), RosterBuildError> {
        if self.members.len() > MAX_ROSTER_MEMBERS {
            return Err(RosterBuildError::TooManyMembers {
                count: self.members.len(),
                max: MAX_ROSTER_MEMBERS,
            });
        }
        for (index, m) in self.members.iter().enumerate() {
            m.check()
                .map_err(|problem| RosterBuildError::Member { index, problem })?;
        }
        Ok(())
    }

    /// Appends the JSON form to `out` (our spelling: lower-case keys, the epoch as a
    /// decimal string, [`NO_EPOCH`] as `"0"`).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        // Serializing plain strings, u64 and finite floats into a Vec cannot fail; a
        // non-finite weight (which `check` rejects) would be written as `null`.
        serde_json::to_writer(out, self).expect("roster serialization into a Vec is infallible");
    }

    /// The JSON form as a new buffer.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + 96 * self.members.len());
        self.write_json(&mut out);
        out
    }

    /// Whether `id` is listed.
    pub fn contains(&self, id: &str) -> bool {
        self.members.iter().any(|m| m.id == id)
    }

    /// Makes sure `id` is listed, adding it at `addr` with [`DEFAULT_WEIGHT`] if not.
    /// Returns whether it had to be added.
    ///
    /// This is the self-repair rule: a responder's roster always includes the responder
    /// (the caller asked precisely to learn its id), so a responder that omits itself is
    /// repaired from its `X-DART-Node` header and the address the caller dialed. A roster
    /// already at [`MAX_ROSTER_MEMBERS`] is left as is.
    pub fn ensure_member(&mut self, id: &str, addr: &str) -> bool {
        if self.contains(id) || self.members.len() >= MAX_ROSTER_MEMBERS {
            return false;
        }
        self.members
            .push(RosterMember::new(id, addr, DEFAULT_WEIGHT));
        true
    }
}

/// The epoch as a decimal string: a JSON number would lose precision above 2^53 in any
/// double-based parser.
fn epoch_string<S: serde::Serializer>(epoch: &u64, s: S) -> Result<S::Ok, S::Error> {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = *epoch;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.serialize_str(core::str::from_utf8(&buf[i..]).unwrap_or("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_roster_has_no_epoch_no_signature_and_no_members_and_round_trips() {
        let r = Roster::empty();
        assert_eq!((r.epoch, r.epoch_sig, r.members.len()), (NO_EPOCH, None, 0));
        let m = RosterMember::new("n1", "127.0.0.1:7070", 1.0);
        let r = Roster::of(vec![m.clone()]);
        assert_eq!((r.epoch, r.epoch_sig, r.members), (NO_EPOCH, None, vec![m]));
        let body = serde_json::to_vec(&Roster::empty()).unwrap();
        assert_eq!(Roster::from_json(&body).unwrap(), Roster::empty());
    }

    #[test]
    fn an_id_of_128_bytes_and_an_address_of_272_are_accepted_one_more_refused() {
        let (id, addr) = ("i".repeat(128), "a".repeat(272));
        assert_eq!(check_identity(&id, &addr), Ok(()));
        assert_eq!(
            check_identity(&"i".repeat(129), &addr),
            Err(MemberProblem::IdTooLong)
        );
        assert_eq!(
            check_identity(&id, &"a".repeat(273)),
            Err(MemberProblem::AddrTooLong)
        );
    }

    #[test]
    fn a_roster_body_of_2_mib_is_read_and_one_byte_more_refused() {
        let mut body = br#"{"epoch":"1","members":[]}"#.to_vec();
        body.resize(2 * 1024 * 1024, b' ');
        assert_eq!(Roster::from_json(&body).expect("2 MiB is read").epoch, 1);
        body.push(b' ');
        assert!(matches!(
            Roster::from_json(&body),
            Err(RosterDecodeError::TooLarge {
                len: 2_097_153,
                max: 2_097_152
            })
        ));
    }

    #[test]
    fn a_quoted_prefix_is_cut_back_to_a_character_boundary() {
        assert_eq!(
            quote_prefix("a\u{e9}b", 2),
            "a",
            "cut inside the two bytes of \u{e9}"
        );
        assert_eq!(quote_prefix("a\u{e9}b", 3), "a\u{e9}");
        assert_eq!(quote_prefix("ab", 5), "ab");
    }

    fn member(id: &str, addr: &str) -> RosterMember {
        RosterMember {
            id: id.into(),
            addr: addr.into(),
            weight: 1.0,
            record: Default::default(),
        }
    }

    #[test]
    fn round_trip_preserves_everything() {
        let r = Roster {
            epoch: 42,
            members: vec![member("a", "10.0.0.1:1"), member("b", "10.0.0.2:1")],
            epoch_sig: None,
        };
        let json = r.to_json();
        assert_eq!(Roster::from_json(&json).unwrap(), r);
    }

    #[test]
    fn epoch_is_a_string_and_survives_above_2_pow_53() {
        let r = Roster {
            epoch: (1u64 << 53) + 1,
            members: vec![],
            epoch_sig: None,
        };
        let json = String::from_utf8(r.to_json()).unwrap();
        assert!(json.contains("\"epoch\":\"9007199254740993\""), "{json}");
        assert_eq!(
            Roster::from_json(json.as_bytes()).unwrap().epoch,
            (1 << 53) + 1
        );
        let max = Roster {
            epoch: u64::MAX,
            members: vec![],
            epoch_sig: None,
        };
        assert_eq!(Roster::from_json(&max.to_json()).unwrap().epoch, u64::MAX);
        // As a JSON number through a double it would not survive: the control.
        let as_double = ((1u64 << 53) + 1) as f64;
        assert_ne!(as_double as u64, (1u64 << 53) + 1);
    }

    #[test]
    fn numeric_epoch_is_malformed_json() {
        let e = Roster::from_json(br#"{"epoch":5,"members":[]}"#).unwrap_err();
        assert!(matches!(e, RosterDecodeError::Json(_)), "{e}");
    }

    #[test]
    fn signed_or_overflowing_epoch_is_an_epoch_error_quoting_it() {
        for (bad, quoted) in [
            (r#"{"epoch":"+5","members":[]}"#, "+5"),
            (r#"{"epoch":"-5","members":[]}"#, "-5"),
            (r#"{"epoch":" 5","members":[]}"#, " 5"),
            (
                r#"{"epoch":"18446744073709551616","members":[]}"#,
                "18446744073709551616",
            ),
        ] {
            match Roster::from_json(bad.as_bytes()) {
                Err(RosterDecodeError::Epoch { value }) => assert_eq!(value, quoted),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_long_bad_epoch_is_quoted_only_up_to_the_bound() {
        let body = format!(r#"{{"epoch":"{}","members":[]}}"#, "é".repeat(100));
        match Roster::from_json(body.as_bytes()) {
            Err(RosterDecodeError::Epoch { value }) => {
                assert!(value.len() <= MAX_QUOTED_EPOCH && value.len() >= MAX_QUOTED_EPOCH - 1);
                assert!(value.chars().all(|c| c == 'é'));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_epoch_is_no_epoch_and_is_written_as_zero() {
        let r = Roster::from_json(br#"{"epoch":"","members":[]}"#).unwrap();
        assert_eq!(r.epoch, NO_EPOCH);
        let json = String::from_utf8(r.to_json()).unwrap();
        assert_eq!(json, r#"{"epoch":"0","members":[]}"#);
    }

    #[test]
    fn no_state_field_is_sent_and_unknown_fields_are_ignored() {
        let r = Roster {
            epoch: 1,
            members: vec![member("a", "h:1")],
            epoch_sig: None,
        };
        let json = String::from_utf8(r.to_json()).unwrap();
        assert!(!json.contains("state"), "{json}");
        let with_extras = br#"{"epoch":"1","future":true,"members":[{"id":"a","addr":"h:1","weight":1,"state":"dead","x":[1]}]}"#;
        assert_eq!(Roster::from_json(with_extras).unwrap(), r);
    }

    #[test]
    fn bad_bodies_are_clear_errors() {
        let e = Roster::from_json(b"not json").unwrap_err();
        assert!(e.to_string().starts_with("malformed roster JSON"), "{e}");
        let e = Roster::from_json(br#"{"epoch":"1"}"#).unwrap_err();
        assert!(
            matches!(e, RosterDecodeError::MissingField { field: "members" }),
            "{e}"
        );
        assert!(e.to_string().contains("members"), "{e}");
        let e = Roster::from_json(br#"{"members":[]}"#).unwrap_err();
        assert!(
            matches!(e, RosterDecodeError::MissingField { field: "epoch" }),
            "{e}"
        );
        let e =
            Roster::from_json(br#"{"epoch":"1","members":[{"id":"a","weight":1}]}"#).unwrap_err();
        assert!(
            matches!(
                e,
                RosterDecodeError::MissingMemberField {
                    index: 0,
                    field: "addr"
                }
            ),
            "{e}"
        );
        let e =
            Roster::from_json(br#"{"epoch":"1","members":[{"id":"","addr":"h:1","weight":1}]}"#)
                .unwrap_err();
        assert!(matches!(
            e,
            RosterDecodeError::Member {
                index: 0,
                problem: MemberProblem::EmptyId
            }
        ));
        let e =
            Roster::from_json(br#"{"epoch":"1","members":[{"id":"a","addr":"h:1","weight":-1}]}"#)
                .unwrap_err();
        assert!(matches!(
            e,
            RosterDecodeError::Member {
                problem: MemberProblem::BadWeight,
                ..
            }
        ));
        let big = vec![b' '; MAX_ROSTER_BYTES + 1];
        assert!(matches!(
            Roster::from_json(&big),
            Err(RosterDecodeError::TooLarge { .. })
        ));
        let long_id = "x".repeat(MAX_ID_LEN + 1);
        let body =
            format!(r#"{{"epoch":"1","members":[{{"id":"{long_id}","addr":"h:1","weight":1}}]}}"#);
        assert!(matches!(
            Roster::from_json(body.as_bytes()),
            Err(RosterDecodeError::Member {
                problem: MemberProblem::IdTooLong,
                ..
            })
        ));
    }

    #[test]
    fn too_many_members_rejected() {
        let r = Roster {
            epoch: 1,
            epoch_sig: None,
            members: (0..=MAX_ROSTER_MEMBERS)
                .map(|i| member(&i.to_string(), "h:1"))
                .collect(),
        };
        assert!(matches!(
            r.check(),
            Err(RosterBuildError::TooManyMembers { count, .. }) if count == MAX_ROSTER_MEMBERS + 1
        ));
        // Received, the same roster is the peer's fault, counted though not kept.
        let body = format!(
            r#"{{"epoch":"1","members":[{}]}}"#,
            vec![r#"{"id":"a","addr":"h:1","weight":1}"#; MAX_ROSTER_MEMBERS + 2].join(",")
        );
        assert!(matches!(
            Roster::from_json(body.as_bytes()),
            Err(RosterDecodeError::TooManyMembers { count, max })
                if count == MAX_ROSTER_MEMBERS + 2 && max == MAX_ROSTER_MEMBERS
        ));
        // Exactly the documented 4,096 members are read.
        let body = format!(
            r#"{{"epoch":"1","members":[{}]}}"#,
            vec![r#"{"id":"a","addr":"h:1","weight":1}"#; 4096].join(",")
        );
        let roster = Roster::from_json(body.as_bytes()).unwrap();
        assert_eq!(roster.members.len(), 4096);
        assert_eq!(roster.check(), Ok(()), "4,096 members may be sent too");
    }

    #[test]
    fn a_bad_member_in_our_own_roster_is_a_build_error() {
        let r = Roster {
            epoch: 1,
            members: vec![member("a", "h:1"), member("b", "")],
            epoch_sig: None,
        };
        assert_eq!(
            r.check(),
            Err(RosterBuildError::Member {
                index: 1,
                problem: MemberProblem::EmptyAddr
            })
        );
    }

    #[test]
    fn maximal_roster_fits_the_byte_bound() {
        let id = "i".repeat(MAX_ID_LEN);
        let addr = "a".repeat(MAX_ADDR_LEN);
        let r = Roster {
            epoch: u64::MAX,
            epoch_sig: None,
            members: (0..MAX_ROSTER_MEMBERS)
                .map(|_| RosterMember {
                    id: id.clone(),
                    addr: addr.clone(),
                    weight: f64::MAX,
                    record: Default::default(),
                })
                .collect(),
        };
        assert!(r.to_json().len() <= MAX_ROSTER_BYTES);
    }

    // What a reference Go peer writes: `json.Marshal` of the untagged structs
    // `Roster{Epoch string; Members []RosterMember}`, `RosterMember{ID, Addr string;
    // Weight float64}` (field names as keys, in declaration order, no spaces, a whole
    // float64 without a fraction, a nil slice as null).
    const GO_ROSTER: &[u8] =
        br#"{"Epoch":"7","Members":[{"ID":"n1","Addr":"127.0.0.1:7070","Weight":1}]}"#;
    const GO_ZERO_ROSTER: &[u8] = br#"{"Epoch":"","Members":null}"#;

    #[test]
    fn a_go_peers_roster_is_read() {
        let r = Roster::from_json(GO_ROSTER).unwrap();
        assert_eq!(
            r,
            Roster {
                epoch: 7,
                members: vec![RosterMember::new("n1", "127.0.0.1:7070", 1.0)],
                epoch_sig: None,
            }
        );
    }

    #[test]
    fn a_go_zero_roster_is_no_epoch_and_no_members() {
        let r = Roster::from_json(GO_ZERO_ROSTER).unwrap();
        assert_eq!(r.epoch, NO_EPOCH);
        assert!(r.members.is_empty());
    }

    #[test]
    fn weight_is_any_json_number() {
        let body = br#"{"Epoch":"1","Members":[{"ID":"a","Addr":"h:1","Weight":1},{"ID":"b","Addr":"h:2","Weight":1.0},{"ID":"c","Addr":"h:3","Weight":0.5},{"ID":"d","Addr":"h:4","Weight":2.5e0},{"ID":"e","Addr":"h:5","Weight":0}]}"#;
        let weights: Vec<f64> = Roster::from_json(body)
            .unwrap()
            .members
            .iter()
            .map(|m| m.weight)
            .collect();
        assert_eq!(weights, [1.0, 1.0, 0.5, 2.5, 0.0]);
    }

    #[test]
    fn keys_match_case_insensitively() {
        let body = br#"{"EPOCH":"2","mEmBeRs":[{"iD":"a","ADDR":"h:1","weight":1},{"Id":"b","addr":"h:2","WeIgHt":3}]}"#;
        let r = Roster::from_json(body).unwrap();
        assert_eq!(r.epoch, 2);
        assert_eq!(r.members[0], member("a", "h:1"));
        assert_eq!(r.members[1].id, "b");
        assert_eq!(r.members[1].weight, 3.0);
    }

    #[test]
    fn keys_fold_long_s_with_s_as_go_does() {
        // Go's foldName folds U+017F (ſ) with s, so a Go peer reads this as Members.
        let body =
            "{\"Epoch\":\"1\",\"Member\u{17F}\":[{\"ID\":\"a\",\"Addr\":\"h:1\",\"Weight\":1}]}";
        assert_eq!(Roster::from_json(body.as_bytes()).unwrap().members.len(), 1);
        // Escaped in the JSON text, the key is the same string.
        let escaped = br#"{"Epoch":"1","Member\u017f":[]}"#;
        assert!(Roster::from_json(escaped).unwrap().members.is_empty());
    }

    #[test]
    fn a_repeated_key_in_any_spelling_overwrites_the_earlier_one() {
        // Go v1 decodes every key that matches a field, in order: the last one wins, an
        // exact-case spelling earlier in the object does not.
        let r = Roster::from_json(br#"{"Epoch":"1","epoch":"2","members":[]}"#).unwrap();
        assert_eq!(r.epoch, 2);
        let r = Roster::from_json(br#"{"epoch":"2","Epoch":"1","Members":[]}"#).unwrap();
        assert_eq!(r.epoch, 1);
        let r = Roster::from_json(
            br#"{"Epoch":"1","Members":[{"ID":"a","Addr":"h:1","Weight":1}],"members":null}"#,
        )
        .unwrap();
        assert!(r.members.is_empty(), "null replaces the earlier members");
        let r = Roster::from_json(
            br#"{"Epoch":"1","Members":[{"ID":"a","id":"b","Addr":"h:1","Weight":1,"weight":2}]}"#,
        )
        .unwrap();
        assert_eq!((r.members[0].id.as_str(), r.members[0].weight), ("b", 2.0));
    }

    #[test]
    fn null_leaves_a_field_as_it_was() {
        let r = Roster::from_json(br#"{"Epoch":"5","Epoch":null,"Members":[]}"#).unwrap();
        assert_eq!(r.epoch, 5, "null after a value has no effect, as in Go");
        let r = Roster::from_json(br#"{"Epoch":null,"Members":null}"#).unwrap();
        assert_eq!(
            r.epoch, NO_EPOCH,
            "null alone is Go's zero value, the empty epoch"
        );
        let r = Roster::from_json(
            br#"{"Epoch":"1","Members":[{"ID":"a","Addr":"h:1","Weight":null}]}"#,
        )
        .unwrap();
        assert_eq!(r.members[0].weight, 0.0);
    }

    #[test]
    fn a_member_that_is_not_an_object_is_malformed() {
        for body in [
            br#"{"Epoch":"1","Members":[null]}"#.as_slice(),
            br#"{"Epoch":"1","Members":[1]}"#,
            br#"{"Epoch":"1","Members":{}}"#,
            br#"null"#,
        ] {
            assert!(
                matches!(Roster::from_json(body), Err(RosterDecodeError::Json(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_wrongly_typed_value_is_an_error_even_where_a_later_key_replaces_it() {
        // Go's Unmarshal reports a type mismatch even when a later key overwrites the field.
        let body =
            br#"{"Epoch":"2","Members":[{"ID":"a","Addr":"h:1","Weight":"b"}],"Members":null}"#;
        assert!(matches!(
            Roster::from_json(body),
            Err(RosterDecodeError::Json(_))
        ));
        // Past the member bound, elements are still decoded (and dropped), so a bad one is
        // malformed rather than merely counted.
        let mut items = vec![r#"{"id":"a","addr":"h:1","weight":1}"#; MAX_ROSTER_MEMBERS + 1];
        items.push("7");
        let body = format!(r#"{{"epoch":"1","members":[{}]}}"#, items.join(","));
        assert!(matches!(
            Roster::from_json(body.as_bytes()),
            Err(RosterDecodeError::Json(_))
        ));
    }

    #[test]
    fn we_write_lower_case_keys() {
        let json = String::from_utf8(
            Roster {
                epoch: 7,
                members: vec![member("n1", "127.0.0.1:7070")],
                epoch_sig: None,
            }
            .to_json(),
        )
        .unwrap();
        assert_eq!(
            json,
            r#"{"epoch":"7","members":[{"id":"n1","addr":"127.0.0.1:7070","weight":1.0}]}"#
        );
    }

    #[test]
    fn responder_omitting_itself_is_repaired() {
        let mut r = Roster {
            epoch: 1,
            members: vec![member("other", "h:2")],
            epoch_sig: None,
        };
        assert!(r.ensure_member("resp", "h:1"));
        assert!(r.contains("resp"));
        assert!(
            !r.ensure_member("resp", "elsewhere:1"),
            "present: untouched"
        );
        assert_eq!(r.members.len(), 2);
    }
}
