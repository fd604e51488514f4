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
//!   ([`Membership::learn`]); a caller that omits either teaches nothing.
//!
//! Wire form:
//!
//! ```json
//! {"epoch":"18446744073709551615","members":[{"id":"n1","addr":"10.0.0.1:7070","weight":1.0}]}
//! ```
//!
//! [`Membership`] is the bounded table a node keeps; its merge and epoch rules are
//! documented on the type.

mod table;

pub use table::{Membership, MergeReport};

use serde::{Deserialize, Serialize};

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

/// Weight given to a member learned without one (a caller's self-identification, or a
/// responder repaired from its header).
pub const DEFAULT_WEIGHT: f64 = 1.0;

/// A membership snapshot as exchanged on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roster {
    /// Version of the membership view; a full u64, carried as a decimal string.
    #[serde(with = "epoch_string")]
    pub epoch: u64,
    /// Known members, including the sender itself.
    pub members: Vec<RosterMember>,
}

/// One member: its stable id, the address it advertises, and its placement weight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RosterMember {
    /// Stable node id (what liveness and placement are keyed on; never the address, which
    /// pod-IP reuse can recycle to a different member).
    pub id: String,
    /// Advertised `host:port` of the member's peer listener.
    pub addr: String,
    /// Relative placement weight (rendezvous hashing); finite and non-negative.
    pub weight: f64,
}

/// What was wrong with a roster body or member. Errors in a received body are the remote
/// peer's fault; the same checks guard what this node sends.
#[derive(Debug, thiserror::Error)]
pub enum RosterError {
    /// The body is longer than [`MAX_ROSTER_BYTES`].
    #[error("roster body of {len} bytes exceeds the {max}-byte bound")]
    TooLarge {
        /// Body length.
        len: usize,
        /// [`MAX_ROSTER_BYTES`].
        max: usize,
    },
    /// The body is not the roster JSON form (syntax, missing field, number epoch, ...).
    #[error("malformed roster JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// More than [`MAX_ROSTER_MEMBERS`] members.
    #[error("roster lists {count} members, more than the {max} allowed")]
    TooManyMembers {
        /// Members listed.
        count: usize,
        /// [`MAX_ROSTER_MEMBERS`].
        max: usize,
    },
    /// A member entry is unusable.
    #[error("roster member {index}: {problem}")]
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

impl Roster {
    /// Decodes and checks a roster body. Unknown fields are ignored; a numeric epoch, a
    /// member over the bounds or a body over [`MAX_ROSTER_BYTES`] is an error.
    pub fn from_json(body: &[u8]) -> Result<Roster, RosterError> {
        if body.len() > MAX_ROSTER_BYTES {
            return Err(RosterError::TooLarge {
                len: body.len(),
                max: MAX_ROSTER_BYTES,
            });
        }
        let roster: Roster = serde_json::from_slice(body)?;
        roster.check()?;
        Ok(roster)
    }

    /// Checks member count and every member.
    pub fn check(&self) -> Result<(), RosterError> {
        if self.members.len() > MAX_ROSTER_MEMBERS {
            return Err(RosterError::TooManyMembers {
                count: self.members.len(),
                max: MAX_ROSTER_MEMBERS,
            });
        }
        for (index, m) in self.members.iter().enumerate() {
            m.check()
                .map_err(|problem| RosterError::Member { index, problem })?;
        }
        Ok(())
    }

    /// Appends the JSON form to `out`.
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
        self.members.push(RosterMember {
            id: id.to_owned(),
            addr: addr.to_owned(),
            weight: DEFAULT_WEIGHT,
        });
        true
    }
}

/// The epoch as a decimal string, in and out: a JSON number would lose precision above
/// 2^53 in any double-based parser, so a number is rejected rather than guessed at.
mod epoch_string {
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(epoch: &u64, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = itoa_buf(*epoch);
        s.serialize_str(buf.as_str())
    }

    struct Buf {
        bytes: [u8; 20],
        start: usize,
    }
    impl Buf {
        fn as_str(&mut self) -> &str {
            core::str::from_utf8(&self.bytes[self.start..]).unwrap_or("0")
        }
    }

    fn itoa_buf(mut v: u64) -> Buf {
        let mut bytes = [0u8; 20];
        let mut i = bytes.len();
        loop {
            i -= 1;
            bytes[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        Buf { bytes, start: i }
    }

    struct EpochVisitor;

    impl Visitor<'_> for EpochVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("the epoch as a decimal string of at most 20 digits (not a JSON number)")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(E::invalid_value(de::Unexpected::Str(v), &self));
            }
            v.parse::<u64>()
                .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_str(EpochVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, addr: &str) -> RosterMember {
        RosterMember {
            id: id.into(),
            addr: addr.into(),
            weight: 1.0,
        }
    }

    #[test]
    fn round_trip_preserves_everything() {
        let r = Roster {
            epoch: 42,
            members: vec![member("a", "10.0.0.1:1"), member("b", "10.0.0.2:1")],
        };
        let json = r.to_json();
        assert_eq!(Roster::from_json(&json).unwrap(), r);
    }

    #[test]
    fn epoch_is_a_string_and_survives_above_2_pow_53() {
        let r = Roster {
            epoch: (1u64 << 53) + 1,
            members: vec![],
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
        };
        assert_eq!(Roster::from_json(&max.to_json()).unwrap().epoch, u64::MAX);
        // As a JSON number through a double it would not survive: the control.
        let as_double = ((1u64 << 53) + 1) as f64;
        assert_ne!(as_double as u64, (1u64 << 53) + 1);
    }

    #[test]
    fn numeric_or_signed_epoch_is_rejected() {
        for bad in [
            r#"{"epoch":5,"members":[]}"#,
            r#"{"epoch":"+5","members":[]}"#,
            r#"{"epoch":"-5","members":[]}"#,
            r#"{"epoch":"","members":[]}"#,
            r#"{"epoch":"18446744073709551616","members":[]}"#,
        ] {
            assert!(
                matches!(Roster::from_json(bad.as_bytes()), Err(RosterError::Json(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn no_state_field_is_sent_and_unknown_fields_are_ignored() {
        let r = Roster {
            epoch: 1,
            members: vec![member("a", "h:1")],
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
        assert!(e.to_string().contains("members"), "{e}");
        let e =
            Roster::from_json(br#"{"epoch":"1","members":[{"id":"","addr":"h:1","weight":1}]}"#)
                .unwrap_err();
        assert!(matches!(
            e,
            RosterError::Member {
                index: 0,
                problem: MemberProblem::EmptyId
            }
        ));
        let e =
            Roster::from_json(br#"{"epoch":"1","members":[{"id":"a","addr":"h:1","weight":-1}]}"#)
                .unwrap_err();
        assert!(matches!(
            e,
            RosterError::Member {
                problem: MemberProblem::BadWeight,
                ..
            }
        ));
        let big = vec![b' '; MAX_ROSTER_BYTES + 1];
        assert!(matches!(
            Roster::from_json(&big),
            Err(RosterError::TooLarge { .. })
        ));
        let long_id = "x".repeat(MAX_ID_LEN + 1);
        let body =
            format!(r#"{{"epoch":"1","members":[{{"id":"{long_id}","addr":"h:1","weight":1}}]}}"#);
        assert!(matches!(
            Roster::from_json(body.as_bytes()),
            Err(RosterError::Member {
                problem: MemberProblem::IdTooLong,
                ..
            })
        ));
    }

    #[test]
    fn too_many_members_rejected() {
        let r = Roster {
            epoch: 1,
            members: (0..=MAX_ROSTER_MEMBERS)
                .map(|i| member(&i.to_string(), "h:1"))
                .collect(),
        };
        assert!(matches!(r.check(), Err(RosterError::TooManyMembers { .. })));
    }

    #[test]
    fn maximal_roster_fits_the_byte_bound() {
        let id = "i".repeat(MAX_ID_LEN);
        let addr = "a".repeat(MAX_ADDR_LEN);
        let r = Roster {
            epoch: u64::MAX,
            members: (0..MAX_ROSTER_MEMBERS)
                .map(|_| RosterMember {
                    id: id.clone(),
                    addr: addr.clone(),
                    weight: f64::MAX,
                })
                .collect(),
        };
        assert!(r.to_json().len() <= MAX_ROSTER_BYTES);
    }

    #[test]
    fn responder_omitting_itself_is_repaired() {
        let mut r = Roster {
            epoch: 1,
            members: vec![member("other", "h:2")],
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
