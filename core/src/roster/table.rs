//! The bounded membership table a node keeps and serves.

use std::collections::BTreeMap;

use super::{check_identity, MemberProblem, Roster, RosterMember, DEFAULT_WEIGHT};
use crate::time::Instant;

/// One known peer (never the node itself, which is held separately).
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    addr: String,
    weight: f64,
    /// Last time the peer spoke for itself (it answered our roster request as the
    /// responder, or it called us and identified itself). `None` for hearsay: listed in
    /// someone else's roster only.
    heard: Option<Instant>,
}

/// What a [`Membership::merge`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Members that were not known before.
    pub added: usize,
    /// Known members whose address or weight changed.
    pub updated: usize,
    /// Members not taken because the table was full of better-known peers.
    pub dropped: usize,
    /// Whether the table's epoch moved up to the roster's.
    pub epoch_advanced: bool,
}

/// A node's bounded view of the membership: itself plus up to `capacity` peers.
///
/// Rules (deterministic: ties are broken by id order, no hash order leaks):
///
/// - **Self is fixed.** The node's own entry comes from construction and is never
///   changed by what others say about it; a roster or caller claiming the node's id is
///   ignored for that entry.
/// - **First-hand beats hearsay.** A peer describing itself (the responder's own entry in
///   its roster, credited to the id in its `X-DART-Node` header; or a caller's
///   `X-DART-Node` + `X-DART-Peer-Addr`) always sets that peer's address and, when given,
///   weight, and stamps it as heard now. Entries about third parties are hearsay.
/// - **Epoch.** A roster with a higher epoch than the table's is newer: its hearsay
///   overwrites known address/weight and the table adopts its epoch. At an equal or lower
///   epoch, hearsay only adds unknown members and never overwrites. Epochs never go down.
///   A roster without an epoch (a Go peer's `""`, read as [`super::NO_EPOCH`], 0) is
///   therefore never newer than anything.
/// - **Nothing is removed by a merge.** A member missing from someone's roster may simply
///   be unknown to them; liveness is a local decision ([`Membership::remove`]).
/// - **Bounded.** When full, a newcomer evicts: a hearsay newcomer may only displace a
///   hearsay entry (lowest id first); a first-hand newcomer displaces a hearsay entry if
///   any, else the peer heard from longest ago. Otherwise the newcomer is dropped.
#[derive(Clone, Debug)]
pub struct Membership {
    me: RosterMember,
    epoch: u64,
    peers: BTreeMap<String, Entry>,
    capacity: usize,
}

impl Membership {
    /// A table for the node `me`, holding at most `capacity` peers besides itself
    /// (typically [`super::MAX_ROSTER_MEMBERS`]` - 1`, so a full snapshot still fits a roster).
    pub fn new(me: RosterMember, epoch: u64, capacity: usize) -> Result<Self, MemberProblem> {
        me.check()?;
        Ok(Membership {
            me,
            epoch,
            peers: BTreeMap::new(),
            capacity: capacity.min(super::MAX_ROSTER_MEMBERS - 1),
        })
    }

    /// The node's own entry.
    pub fn me(&self) -> &RosterMember {
        &self.me
    }

    /// The table's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Raises the epoch (a local membership change the operator or application versions).
    /// Lower values are ignored: epochs never go down.
    pub fn raise_epoch(&mut self, epoch: u64) {
        self.epoch = self.epoch.max(epoch);
    }

    /// Peers known (not counting the node itself).
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no peer is known.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// The known address of `id` (the node's own included).
    pub fn addr(&self, id: &str) -> Option<&str> {
        if id == self.me.id {
            return Some(&self.me.addr);
        }
        self.peers.get(id).map(|e| e.addr.as_str())
    }

    /// When `id` last spoke for itself, if ever.
    pub fn heard(&self, id: &str) -> Option<Instant> {
        self.peers.get(id).and_then(|e| e.heard)
    }

    /// Forgets a peer (a local liveness decision). Returns whether it was known.
    pub fn remove(&mut self, id: &str) -> bool {
        self.peers.remove(id).is_some()
    }

    /// The roster this node serves: its epoch and every member, itself first, then by id.
    pub fn snapshot(&self) -> Roster {
        let mut members = Vec::with_capacity(1 + self.peers.len());
        members.push(self.me.clone());
        members.extend(self.peers.iter().map(|(id, e)| RosterMember {
            id: id.clone(),
            addr: e.addr.clone(),
            weight: e.weight,
        }));
        Roster {
            epoch: self.epoch,
            members,
        }
    }

    /// The inbound half: a caller identified itself with `X-DART-Node: id` and
    /// `X-DART-Peer-Addr: addr`. Learns exactly that advertised pair (never the
    /// connection's source address, whose port is ephemeral). The caller that omits
    /// either header is anonymous and must not reach this call. Returns `Ok(true)` if the
    /// table changed beyond the heard stamp.
    pub fn learn(&mut self, now: Instant, id: &str, addr: &str) -> Result<bool, MemberProblem> {
        check_identity(id, addr)?;
        if id == self.me.id {
            return Ok(false);
        }
        Ok(self.upsert(id, addr, None, Some(now)).0)
    }

    /// The outbound half: merges a roster fetched from `responder` (the id in its
    /// `X-DART-Node` header) at `now`. See the type's rules.
    pub fn merge(&mut self, now: Instant, responder: &str, roster: &Roster) -> MergeReport {
        let newer = roster.epoch > self.epoch;
        let mut report = MergeReport::default();
        for m in &roster.members {
            if m.id == self.me.id || m.check().is_err() {
                continue;
            }
            let first_hand = m.id == responder;
            let known = self.peers.contains_key(&m.id);
            if known && !first_hand && !newer {
                continue;
            }
            let heard = first_hand.then_some(now);
            let (changed, taken) = self.upsert(&m.id, &m.addr, Some(m.weight), heard);
            match (known, taken) {
                (false, true) => report.added += 1,
                (false, false) => report.dropped += 1,
                (true, _) if changed => report.updated += 1,
                _ => {}
            }
        }
        if newer {
            self.epoch = roster.epoch;
            report.epoch_advanced = true;
        }
        report
    }

    /// Inserts or updates; returns (changed address/weight or inserted, present afterwards).
    fn upsert(
        &mut self,
        id: &str,
        addr: &str,
        weight: Option<f64>,
        heard: Option<Instant>,
    ) -> (bool, bool) {
        if let Some(e) = self.peers.get_mut(id) {
            let mut changed = false;
            if e.addr != addr {
                e.addr = addr.to_owned();
                changed = true;
            }
            if let Some(w) = weight {
                if e.weight != w {
                    e.weight = w;
                    changed = true;
                }
            }
            if heard.is_some() {
                e.heard = heard.max(e.heard);
            }
            return (changed, true);
        }
        if self.peers.len() >= self.capacity && !self.evict_for(heard.is_some()) {
            return (false, false);
        }
        self.peers.insert(
            id.to_owned(),
            Entry {
                addr: addr.to_owned(),
                weight: weight.unwrap_or(DEFAULT_WEIGHT),
                heard,
            },
        );
        (true, true)
    }

    /// Frees one slot for a newcomer, per the eviction rule. Returns whether it did.
    fn evict_for(&mut self, first_hand: bool) -> bool {
        let hearsay = self
            .peers
            .iter()
            .find(|(_, e)| e.heard.is_none())
            .map(|(id, _)| id.clone());
        let victim = match hearsay {
            Some(id) => Some(id),
            None if first_hand => self
                .peers
                .iter()
                .min_by_key(|(_, e)| e.heard)
                .map(|(id, _)| id.clone()),
            None => None,
        };
        match victim {
            Some(id) => {
                self.peers.remove(&id);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, addr: &str, weight: f64) -> RosterMember {
        RosterMember {
            id: id.into(),
            addr: addr.into(),
            weight,
        }
    }

    fn table(cap: usize) -> Membership {
        Membership::new(m("me", "10.0.0.1:7070", 1.0), 5, cap).unwrap()
    }

    const T1: Instant = Instant::from_secs(1);
    const T2: Instant = Instant::from_secs(2);

    #[test]
    fn snapshot_always_includes_self_first() {
        let mut t = table(8);
        t.learn(T1, "b", "h:2").unwrap();
        let r = t.snapshot();
        assert_eq!(r.members[0].id, "me");
        assert_eq!(r.epoch, 5);
        assert!(r.contains("b"));
    }

    #[test]
    fn learn_takes_the_advertised_address_and_ignores_self_claims() {
        let mut t = table(8);
        assert_eq!(t.learn(T1, "b", "10.0.0.2:7070"), Ok(true));
        assert_eq!(t.addr("b"), Some("10.0.0.2:7070"));
        assert_eq!(t.heard("b"), Some(T1));
        // A caller's self-report overrides what we heard about it.
        assert_eq!(t.learn(T2, "b", "10.0.0.3:7070"), Ok(true));
        assert_eq!(t.addr("b"), Some("10.0.0.3:7070"));
        assert_eq!(t.learn(T2, "me", "evil:1"), Ok(false));
        assert_eq!(t.addr("me"), Some("10.0.0.1:7070"));
        assert_eq!(t.learn(T2, "", "h:1"), Err(MemberProblem::EmptyId));
    }

    #[test]
    fn lower_or_equal_epoch_only_adds_unknown_members() {
        let mut t = table(8);
        t.learn(T1, "b", "b:1").unwrap();
        let r = Roster {
            epoch: 5,
            members: vec![
                m("resp", "r:1", 2.0),
                m("b", "stale:1", 9.0),
                m("c", "c:1", 1.0),
            ],
        };
        let rep = t.merge(T2, "resp", &r);
        assert_eq!(rep.added, 2);
        assert_eq!(rep.updated, 0);
        assert!(!rep.epoch_advanced);
        assert_eq!(
            t.addr("b"),
            Some("b:1"),
            "hearsay at an old epoch never overwrites"
        );
        assert_eq!(
            t.heard("resp"),
            Some(T2),
            "liveness credited to the responder id"
        );
        assert_eq!(t.heard("c"), None, "third parties are hearsay");
        assert_eq!(t.epoch(), 5);
    }

    #[test]
    fn higher_epoch_overwrites_and_is_adopted_but_never_self() {
        let mut t = table(8);
        t.learn(T1, "b", "b:1").unwrap();
        let r = Roster {
            epoch: 9,
            members: vec![m("b", "b:2", 3.0), m("me", "elsewhere:1", 0.0)],
        };
        let rep = t.merge(T2, "x", &r);
        assert_eq!(rep.updated, 1);
        assert!(rep.epoch_advanced);
        assert_eq!(t.epoch(), 9);
        assert_eq!(t.addr("b"), Some("b:2"));
        assert_eq!(t.addr("me"), Some("10.0.0.1:7070"));
        // Epochs never go down.
        t.merge(
            T2,
            "x",
            &Roster {
                epoch: 1,
                members: vec![],
            },
        );
        t.raise_epoch(3);
        assert_eq!(t.epoch(), 9);
    }

    #[test]
    fn table_is_bounded_and_first_hand_beats_hearsay() {
        let mut t = table(3);
        t.learn(T1, "a", "a:1").unwrap();
        t.learn(T2, "b", "b:1").unwrap();
        let r = Roster {
            epoch: 1,
            members: (0..10).map(|i| m(&format!("h{i}"), "h:1", 1.0)).collect(),
        };
        let rep = t.merge(T2, "nobody", &r);
        assert_eq!(t.len(), 3);
        assert_eq!(rep.added, 10, "hearsay displaces hearsay");
        assert_eq!(t.heard("a"), Some(T1));
        assert_eq!(t.heard("b"), Some(T2));
        // A first-hand newcomer takes the hearsay slot.
        t.learn(T2, "c", "c:1").unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.addr("a").is_some() && t.addr("b").is_some() && t.addr("c").is_some());
        // Now all first-hand: hearsay is dropped, a first-hand newcomer evicts the oldest.
        let rep = t.merge(T2, "nobody", &r);
        assert_eq!(rep.dropped, 10);
        t.learn(Instant::from_secs(3), "d", "d:1").unwrap();
        assert_eq!(t.addr("a"), None, "a was heard from longest ago");
        assert_eq!(t.len(), 3);
    }
}
