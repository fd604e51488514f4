//! The membership policy: the modes, the learning and placement bounds with their
//! defaults, and their validation.

use crate::time::Duration;

#[cfg(doc)]
use super::Membership;

/// Default [`MembershipPolicy::max_new_per_source`]: 256 new members per source per
/// interval. A node joining a cluster of 4096 learns it in 16 intervals from one source,
/// in about 8 rounds (4 minutes at the default 30 s) with the refresh's fanout of 2, while
/// one hostile source can introduce at most 256 invented members per 30 s.
pub const DEFAULT_MAX_NEW_PER_SOURCE: usize = 256;

/// Default [`MembershipPolicy::max_checks_per_source`]: 512 signature checks per source per
/// interval, twice the default budget of new members: room for a source's new members and as
/// many updates (higher sequence numbers) of known ones, while a source relaying garbage
/// records with invented higher sequence numbers for every known member costs at most
/// 512 checks (about 20 ms here) per interval, not one per member per exchange.
pub const DEFAULT_MAX_CHECKS_PER_SOURCE: usize = 512;

/// Default [`MembershipPolicy::learn_interval`]: 30 s, the roster refresh's interval, so
/// a source's budget refills once per round.
pub const DEFAULT_LEARN_INTERVAL: Duration = Duration::from_secs(30);

/// Longest [`MembershipPolicy::learn_interval`]: one day.
pub const MAX_LEARN_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// Default [`MembershipPolicy::max_placed_per_host`]: 4 members placed per host (IP
/// address, or host name). A machine with a few disks runs a node per disk; one address
/// owning more than 4 members is an address inventing them. With the close group of 7,
/// an outsider needs members on 2 hosts to fill one key's close group
/// (`docs/security.md`, "Placement").
pub const DEFAULT_MAX_PLACED_PER_HOST: usize = 4;

/// Default [`MembershipPolicy::max_placed_per_prefix`]: 64 members placed per network
/// prefix (an IPv4 /24, an IPv6 /48; a host name is its own prefix). A rack or a subnet
/// holds many honest nodes; one /24 holds at most 256 addresses, so this bounds what one
/// rented block of addresses can place to 64 members.
pub const DEFAULT_MAX_PLACED_PER_PREFIX: usize = 64;

/// Whether the table learns unverified claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MembershipMode {
    /// Verified records and unverified claims (reference peers, nodes without keys) are
    /// both learned; an unverified claim never replaces a verified record's address.
    #[default]
    Open,
    /// Only verified records are learned (`membership = "verified-only"`).
    VerifiedOnly,
    /// Learned as in [`Open`](Self::Open), but placed only when admitted: a verified
    /// record carrying the cluster authority's admission certificate for its key
    /// ([`super::record::sign_admission`](crate::roster::record::sign_admission)), or an unverified member at an address of
    /// [`MembershipPolicy::allow`] that spoke for itself from it (reference peers named by
    /// the operator). Needs [`MembershipPolicy::authority`] (`membership = "admitted"`).
    Admitted,
}

/// How a [`Membership`] table decides what it learns ([`Membership::with_policy`]).
#[derive(Clone, Debug, PartialEq)]
pub struct MembershipPolicy {
    /// Whether unverified claims are learned (default [`MembershipMode::Open`]).
    pub mode: MembershipMode,
    /// The cluster authority's public key: a roster's higher epoch is adopted only when
    /// this key signed it. `None` (the default): no peer ever changes the table's epoch,
    /// which only [`Membership::raise_epoch`] moves.
    pub authority: Option<[u8; 32]>,
    /// New members one source (a fetched roster's address; a caller's IP) may add per
    /// `learn_interval` (default [`DEFAULT_MAX_NEW_PER_SOURCE`]; at least 1).
    pub max_new_per_source: usize,
    /// Signature checks one source's claims may cost per `learn_interval` (default
    /// [`DEFAULT_MAX_CHECKS_PER_SOURCE`]; at least 1). Claims beyond it are rate-limited
    /// unverified (records already held or cached cost no check and pass).
    pub max_checks_per_source: usize,
    /// The window of `max_new_per_source` and `max_checks_per_source` (default [`DEFAULT_LEARN_INTERVAL`]; positive, at
    /// most [`MAX_LEARN_INTERVAL`]).
    pub learn_interval: Duration,
    /// Members placed per host (default [`DEFAULT_MAX_PLACED_PER_HOST`]; at least 1):
    /// see [`Membership::placed`].
    pub max_placed_per_host: usize,
    /// Members placed per network prefix, an IPv4 /24 or an IPv6 /48 (default
    /// [`DEFAULT_MAX_PLACED_PER_PREFIX`]; at least 1): see [`Membership::placed`].
    pub max_placed_per_prefix: usize,
    /// In [`MembershipMode::Admitted`]: addresses (`host:port`, as members advertise them)
    /// whose unsigned member is placed once it spoke for itself from there (Go reference
    /// peers, which have no key). Ignored in the other modes. Default empty.
    pub allow: Vec<String>,
}

impl Default for MembershipPolicy {
    fn default() -> Self {
        MembershipPolicy {
            mode: MembershipMode::Open,
            authority: None,
            max_new_per_source: DEFAULT_MAX_NEW_PER_SOURCE,
            max_checks_per_source: DEFAULT_MAX_CHECKS_PER_SOURCE,
            learn_interval: DEFAULT_LEARN_INTERVAL,
            max_placed_per_host: DEFAULT_MAX_PLACED_PER_HOST,
            max_placed_per_prefix: DEFAULT_MAX_PLACED_PER_PREFIX,
            allow: Vec::new(),
        }
    }
}

/// A [`MembershipPolicy`] field out of range (local misuse). Names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A count or duration that must be positive is zero.
    #[error("membership policy `{field}` is zero")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// `learn_interval` is above [`MAX_LEARN_INTERVAL`].
    #[error("membership policy `learn_interval` {value:?} is above {MAX_LEARN_INTERVAL:?}")]
    IntervalTooLong {
        /// The value given.
        value: Duration,
    },
    /// `authority` is not a valid Ed25519 public key.
    #[error("membership policy `authority` is not a valid Ed25519 public key")]
    BadAuthority,
    /// [`MembershipMode::Admitted`] without an `authority` to check certificates with.
    #[error("membership policy `mode` admitted needs an `authority` key")]
    AdmittedWithoutAuthority,
}

impl PolicyError {
    /// The policy field at fault.
    pub fn field(&self) -> &'static str {
        match self {
            PolicyError::Zero { field } => field,
            PolicyError::IntervalTooLong { .. } => "learn_interval",
            PolicyError::BadAuthority | PolicyError::AdmittedWithoutAuthority => "authority",
        }
    }
}

impl MembershipPolicy {
    /// Checks every bound.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.max_new_per_source == 0 {
            return Err(PolicyError::Zero {
                field: "max_new_per_source",
            });
        }
        if self.max_checks_per_source == 0 {
            return Err(PolicyError::Zero {
                field: "max_checks_per_source",
            });
        }
        if self.max_placed_per_host == 0 {
            return Err(PolicyError::Zero {
                field: "max_placed_per_host",
            });
        }
        if self.max_placed_per_prefix == 0 {
            return Err(PolicyError::Zero {
                field: "max_placed_per_prefix",
            });
        }
        if self.learn_interval.is_zero() {
            return Err(PolicyError::Zero {
                field: "learn_interval",
            });
        }
        if self.learn_interval > MAX_LEARN_INTERVAL {
            return Err(PolicyError::IntervalTooLong {
                value: self.learn_interval,
            });
        }
        if self.mode == MembershipMode::Admitted && self.authority.is_none() {
            return Err(PolicyError::AdmittedWithoutAuthority);
        }
        if let Some(key) = &self.authority {
            match ed25519_dalek::VerifyingKey::from_bytes(key) {
                Ok(k) if !k.is_weak() => {}
                _ => return Err(PolicyError::BadAuthority),
            }
        }
        Ok(())
    }
}
