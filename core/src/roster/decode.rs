//! The roster decoder: reads what the reference's Go peers write.
//!
//! The reference declares `Roster { Epoch string; Members []RosterMember }` and
//! `RosterMember { ID, Addr string; Weight float64 }` without JSON tags, so a Go peer writes
//! `{"Epoch":"7","Members":[{"ID":"n1","Addr":"127.0.0.1:7070","Weight":1}]}` and Go's
//! `encoding/json` reads keys case-insensitively. This decoder follows Go's reading rules
//! where they matter for what a peer can send:
//!
//! - **Keys** match a field the way Go's `foldName` does: ASCII letters ignoring case, plus
//!   the two non-ASCII runes whose Unicode simple-fold set contains an ASCII letter
//!   (`ſ` U+017F folds with `s`, `K` U+212A with `k`). Go prefers an exact match only to
//!   choose between several struct fields that fold alike; the roster field names (ours included: `epoch_sig`, `seq`, `key`, `sig`) are
//!   distinct under folding, so every key names at most one field.
//! - **A repeated key** (in any spelling) overwrites the earlier value: the last one wins,
//!   as in Go v1 (which, despite documenting a preference for exact matches, decodes every
//!   matching key in order; golang/go#43664, #28190).
//! - **`null`** leaves a string or number field as it was (Go: "no effect"), so
//!   `"Epoch":null` is the empty epoch; `"Members":null` is no members (Go's nil slice).
//! - **Unknown keys** are ignored.
//!
//! Stricter than Go, deliberately: every field a Go peer always writes must be present
//! (Go's encoder writes every field, so a body without them is not a roster); a member must
//! be an object; strings must be valid UTF-8; the bounds of [`super`] hold.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::MAX_ROSTER_MEMBERS;

/// A roster field, by the spelling we write (see `docs/wire.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    Epoch,
    Members,
    Id,
    Addr,
    Weight,
    Seq,
    Key,
    Sig,
    Adm,
    EpochSig,
    Other,
}

/// Whether `key` names the field whose upper-case ASCII name is `upper`, by Go's rule.
pub(crate) fn go_key_matches(key: &str, upper: &str) -> bool {
    let mut want = upper.bytes();
    for c in key.chars() {
        let folded = match c {
            'a'..='z' => c.to_ascii_uppercase(),
            '\u{17F}' => 'S',
            '\u{212A}' => 'K',
            c => c,
        };
        match want.next() {
            Some(w) if folded == char::from(w) => {}
            _ => return false,
        }
    }
    want.next().is_none()
}

fn roster_field(key: &str) -> Field {
    if go_key_matches(key, "EPOCH") {
        Field::Epoch
    } else if go_key_matches(key, "MEMBERS") {
        Field::Members
    } else if go_key_matches(key, "EPOCH_SIG") {
        Field::EpochSig
    } else {
        Field::Other
    }
}

fn member_field(key: &str) -> Field {
    if go_key_matches(key, "ID") {
        Field::Id
    } else if go_key_matches(key, "ADDR") {
        Field::Addr
    } else if go_key_matches(key, "WEIGHT") {
        Field::Weight
    } else if go_key_matches(key, "SEQ") {
        Field::Seq
    } else if go_key_matches(key, "KEY") {
        Field::Key
    } else if go_key_matches(key, "SIG") {
        Field::Sig
    } else if go_key_matches(key, "ADM") {
        Field::Adm
    } else {
        Field::Other
    }
}

/// A member as it arrived: each field present or not, `null` leaving the zero value.
#[derive(Debug, Default)]
pub(super) struct RawMember<'de> {
    pub id: Option<String>,
    pub addr: Option<String>,
    pub weight: Option<f64>,
    /// The record's fields (ours; a reference peer sends none), borrowed from the body
    /// when they hold no escape: they are only parsed, never kept.
    pub seq: Option<Cow<'de, str>>,
    pub key: Option<Cow<'de, str>>,
    pub sig: Option<Cow<'de, str>>,
    /// The admission certificate (`adm`), as text.
    pub adm: Option<Cow<'de, str>>,
}

/// A roster as it arrived, before the field and bound checks.
#[derive(Debug, Default)]
pub(super) struct RawRoster<'de> {
    /// `Some` once the key was seen: the text (`""` for Go's zero value or `null`).
    pub epoch: Option<String>,
    /// The authority's signature over the epoch, as text.
    pub epoch_sig: Option<String>,
    /// Whether a members key was seen.
    pub members_seen: bool,
    /// The members kept (at most [`MAX_ROSTER_MEMBERS`]).
    pub members: Vec<RawMember<'de>>,
    /// How many the last members array listed (may exceed what was kept).
    pub members_listed: usize,
}

/// A string field; `null` keeps `current` (Go: no effect).
struct NullableString<'a>(&'a mut Option<String>);

impl<'de> DeserializeSeed<'de> for NullableString<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let v: Option<String> = Option::deserialize(d)?;
        match v {
            Some(s) => *self.0 = Some(s),
            None => {
                self.0.get_or_insert_with(String::new);
            }
        }
        Ok(())
    }
}

/// A text field that is only parsed (a record's): `null` keeps `current`, as
/// [`NullableString`], and the text is borrowed from the body when it can be.
struct NullableText<'a, 'de>(&'a mut Option<Cow<'de, str>>);

impl<'de> DeserializeSeed<'de> for NullableText<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match Option::<KeyText<'de>>::deserialize(d)? {
            Some(text) => *self.0 = Some(text.0),
            None => {
                self.0.get_or_insert(Cow::Borrowed(""));
            }
        }
        Ok(())
    }
}

struct MemberVisitor;

impl<'de> Visitor<'de> for MemberVisitor {
    type Value = RawMember<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a roster member object {\"id\",\"addr\",\"weight\"}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMember<'de>, A::Error> {
        let mut m = RawMember::default();
        while let Some(key) = map.next_key::<KeyText>()? {
            match member_field(&key.0) {
                Field::Id => map.next_value_seed(NullableString(&mut m.id))?,
                Field::Addr => map.next_value_seed(NullableString(&mut m.addr))?,
                Field::Seq => map.next_value_seed(NullableText(&mut m.seq))?,
                Field::Key => map.next_value_seed(NullableText(&mut m.key))?,
                Field::Sig => map.next_value_seed(NullableText(&mut m.sig))?,
                Field::Adm => map.next_value_seed(NullableText(&mut m.adm))?,
                Field::Weight => match map.next_value::<Option<f64>>()? {
                    Some(w) => m.weight = Some(w),
                    None => {
                        m.weight.get_or_insert(0.0);
                    }
                },
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(m)
    }
}

impl<'de> Deserialize<'de> for RawMember<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MemberVisitor)
    }
}

/// An object key (or a text only parsed), borrowed when the input allows it.
struct KeyText<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for KeyText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The members array: keeps at most [`MAX_ROSTER_MEMBERS`] and counts the rest, so a
/// hostile body cannot make the decoder hold more than the bound. Every element is decoded
/// (one at a time, the excess dropped at once), so an element of the wrong shape is an
/// error wherever it sits.
struct MembersSeed<'a, 'de>(&'a mut RawRoster<'de>);

impl<'de> DeserializeSeed<'de> for MembersSeed<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MembersSeed<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the members array or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        // Go's nil slice: no members.
        self.0.members.clear();
        self.0.members_listed = 0;
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.visit_none()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let raw = self.0;
        raw.members.clear();
        raw.members_listed = 0;
        while let Some(m) = seq.next_element::<RawMember>()? {
            if raw.members_listed < MAX_ROSTER_MEMBERS {
                raw.members.push(m);
            }
            raw.members_listed += 1;
        }
        Ok(())
    }
}

struct RosterVisitor;

impl<'de> Visitor<'de> for RosterVisitor {
    type Value = RawRoster<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a roster object {\"epoch\",\"members\"}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRoster<'de>, A::Error> {
        let mut r = RawRoster::default();
        while let Some(key) = map.next_key::<KeyText>()? {
            match roster_field(&key.0) {
                Field::Epoch => map.next_value_seed(NullableString(&mut r.epoch))?,
                Field::EpochSig => map.next_value_seed(NullableString(&mut r.epoch_sig))?,
                Field::Members => {
                    r.members_seen = true;
                    map.next_value_seed(MembersSeed(&mut r))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(r)
    }
}

impl<'de> Deserialize<'de> for RawRoster<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RosterVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decoder keeps at most the documented 4,096 members and only counts the rest.
    #[test]
    fn members_past_4096_are_counted_not_kept() {
        let body = format!(
            r#"{{"epoch":"1","members":[{}]}}"#,
            vec![r#"{"id":"a","addr":"h:1","weight":1}"#; 4098].join(",")
        );
        let raw: RawRoster = serde_json::from_str(&body).unwrap();
        assert_eq!((raw.members.len(), raw.members_listed), (4096, 4098));
    }

    /// The JSON error names what was expected where the body went wrong.
    #[test]
    fn a_json_error_says_what_was_expected() {
        for (body, expected) in [
            (
                &br#"{"epoch":"1","members":[5]}"#[..],
                "a roster member object",
            ),
            (
                br#"{"epoch":"1","members":"x"}"#,
                "the members array or null",
            ),
            (br#"5"#, "a roster object"),
        ] {
            let e = crate::roster::Roster::from_json(body)
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{e}");
        }
    }

    #[test]
    fn keys_fold_as_gos_fold_name_does() {
        for key in ["Epoch", "epoch", "EPOCH", "ePoCh"] {
            assert!(go_key_matches(key, "EPOCH"), "{key}");
        }
        // U+017F (long s) and U+212A (Kelvin sign) fold with ASCII letters in Go.
        assert!(go_key_matches("member\u{17F}", "MEMBERS"));
        assert!(go_key_matches("\u{212A}", "K"));
        // Other non-ASCII look-alikes do not (dotless i is not in i's simple-fold set).
        assert!(!go_key_matches("\u{131}d", "ID"));
        assert!(!go_key_matches("\u{130}D", "ID"));
        for key in ["", "epoc", "epochs", "e poch", "_epoch"] {
            assert!(!go_key_matches(key, "EPOCH"), "{key}");
        }
    }
}
