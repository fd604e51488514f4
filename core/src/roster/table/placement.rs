//! Placement: which members may be placed, the per-address, per-host and per-prefix
//! budgets, and how hosts and prefixes are compared.

use std::collections::{BTreeMap, BTreeSet};

#[cfg(doc)]
use super::MembershipPolicy;
use super::{Entry, Membership, MembershipMode};
use crate::roster::record::{verify_admission, Attestation, RecordSig};
use crate::roster::RosterMember;
use crate::time::Instant;

/// Highest placement weight a member is placed with: a member that signs (or claims) a
/// larger weight is placed as if it had signed this one. Honest nodes sign weight 1, so a
/// member can take at most 4 default members' share of the keys, never all of them (an
/// unbounded weight wins every key's rendezvous).
pub const MAX_PLACED_WEIGHT: f64 = 4.0;

impl Membership {
    /// Whether `id`'s entry may be placed at all (before the budgets): its record verified,
    /// or (unverified) it spoke for itself from the host of the address it names. Unverified
    /// hearsay is never placed: it may be asked for rosters, but owns no key until it has
    /// spoken for itself. In [`MembershipMode::Admitted`]: only a verified record with a
    /// valid admission certificate, or an unverified member that spoke for itself from an
    /// address of [`MembershipPolicy::allow`]. The node itself is always placeable.
    pub fn placeable(&self, id: &str) -> bool {
        if id == self.me.id {
            return true;
        }
        self.peers.get(id).is_some_and(|e| self.entry_placeable(e))
    }

    fn entry_placeable(&self, e: &Entry) -> bool {
        match self.policy.mode {
            MembershipMode::Admitted => {
                e.admitted
                    || (e.record.is_none() && e.at_addr && self.policy.allow.contains(&e.addr))
            }
            _ => e.record.is_some() || e.at_addr,
        }
    }

    /// Whether `record` carries an admission certificate the policy's authority signed for
    /// its key (one signature check, counted; only in [`MembershipMode::Admitted`]).
    pub(super) fn admits(&mut self, record: &RecordSig) -> bool {
        let (MembershipMode::Admitted, Some(authority), Some(cert)) =
            (self.policy.mode, self.policy.authority, record.admission)
        else {
            return false;
        };
        self.stats.signature_checks += 1;
        verify_admission(&authority, &record.key, &cert)
    }

    /// The members placement may use: the node itself first, then every placeable member
    /// ([`placeable`](Self::placeable)) within the placement budgets, by id. Budgets: one
    /// member per address (`host:port`: one listener is one node), at
    /// most [`MembershipPolicy::max_placed_per_host`] members per host of their address
    /// (an IP, or a host name) and [`MembershipPolicy::max_placed_per_prefix`] per
    /// network prefix (IPv4 /24, IPv6 /48). The node itself counts first; then members
    /// with a verified record that also spoke from their address, then other verified
    /// members, then unverified members that spoke from their address; within each, the
    /// longest known first (ties by id). A newcomer therefore never displaces an
    /// established member, and inventing members at one address places at most the host's
    /// budget of them. Each member is returned with its weight capped at
    /// [`MAX_PLACED_WEIGHT`] and its record (if verified).
    pub fn placed(&self) -> Vec<RosterMember> {
        let mut order: Vec<(u8, Instant, &String, &Entry)> = self
            .peers
            .iter()
            .filter(|(_, e)| self.entry_placeable(e))
            .map(|(id, e)| {
                let class = match (e.admitted || e.record.is_some(), e.at_addr) {
                    (true, true) => 0,
                    (true, false) => 1,
                    _ => 2,
                };
                (class, e.since, id, e)
            })
            .collect();
        order.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
        let mut hosts: BTreeMap<String, usize> = BTreeMap::new();
        let mut prefixes: BTreeMap<String, usize> = BTreeMap::new();
        let (per_host, per_prefix) = (
            self.policy.max_placed_per_host,
            self.policy.max_placed_per_prefix,
        );
        let mut addrs: BTreeSet<String> = BTreeSet::new();
        let mut admit = |addr: &str| -> bool {
            // One listener is one node: a second member at an address already placed is
            // an id invented for it.
            if addrs.contains(&addr.to_ascii_lowercase()) {
                return false;
            }
            let host = normal_host(host_of(addr));
            let prefix = prefix_of(&host);
            let h = hosts.get(&host).copied().unwrap_or(0);
            let p = prefixes.get(&prefix).copied().unwrap_or(0);
            if h >= per_host || p >= per_prefix {
                return false;
            }
            hosts.insert(host, h + 1);
            prefixes.insert(prefix, p + 1);
            addrs.insert(addr.to_ascii_lowercase());
            true
        };
        let mut me = self.me.clone();
        me.weight = me.weight.min(MAX_PLACED_WEIGHT);
        admit(&me.addr);
        let mut members = vec![me];
        for (_, _, id, e) in order {
            if admit(&e.addr) {
                members.push(RosterMember {
                    id: id.clone(),
                    addr: e.addr.clone(),
                    weight: e.weight.min(MAX_PLACED_WEIGHT),
                    record: match e.record {
                        Some(r) => Attestation::Signed(r),
                        None => Attestation::Unsigned,
                    },
                });
            }
        }
        members[1..].sort_by(|a, b| a.id.cmp(&b.id));
        members
    }
}

/// The host part of an address or a learning source: `host` of `host:port`, the text
/// between the brackets of `[v6]:port`, and the whole text otherwise (an IP without a
/// port, as a caller's source is given; a bare IPv6 address).
pub(crate) fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        Some((host, _)) if !host.contains(':') => host,
        _ => addr,
    }
}

/// A host as compared: an IP address in its canonical text (an IPv4-mapped IPv6 address
/// as its IPv4 address, as a dual-stack listener reports an IPv4 caller), a name in lower
/// case.
fn normal_host(host: &str) -> String {
    match host.parse::<core::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().to_string(),
        Err(_) => host.to_ascii_lowercase(),
    }
}

/// Whether a claim learned from `source` came from the host of the address `addr` it
/// names.
pub(super) fn same_host(source: &str, addr: &str) -> bool {
    normal_host(host_of(source)) == normal_host(host_of(addr))
}

/// The network prefix a (normalised) host counts against: an IPv4 /24, an IPv6 /48, a
/// host name itself.
pub(super) fn prefix_of(host: &str) -> String {
    match host.parse::<core::net::IpAddr>() {
        Ok(core::net::IpAddr::V4(v4)) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.0/24")
        }
        Ok(core::net::IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
        Err(_) => host.to_owned(),
    }
}
