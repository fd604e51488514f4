//! Object identity for plain-URL origins (`peerblock-node fetch URL`): an HTTP/1.1 or
//! HTTPS object (nginx, an object store, a presigned link) read by byte ranges.
//!
//! - [`ObjectUrl::parse`] takes an `http://` or `https://` URL apart (anything else is an
//!   error naming the input).
//! - [`ObjectIdentity`] is what every reader of the same object agrees on: scheme,
//!   lower-case host, port, path, size, validator (ETag, else `Last-Modified`) and block
//!   size. Its [`key`](ObjectIdentity::key) is the chunk key of the object's blocks:
//!   BLAKE3 over a tagged, length-prefixed encoding of those fields. Never the query
//!   string (it carries a requester's credential: two readers with different signatures
//!   read the same object) and never the fragment.
//! - Block `i` is the byte range `[i·B, min((i+1)·B, size))`, `i` from 0.
//! - The identity travels in the origin header itself, as the URL's fragment (which an
//!   HTTP client never sends to the origin):
//!   `https://h/p?sig#peerblock-object=v1;size=N;bs=B;validator=PCT` ([`ObjectIdentity::origin_header`]).
//!   A relay parses it ([`parse_origin`]), recomputes the key and declines (404, before
//!   any cache or upstream access) a request whose chunk key or block index disagrees
//!   ([`ObjectOriginIdentity`], core's `OriginIdentity`). An origin without that fragment
//!   keeps its old meaning: a peer speaking the wire form.

use peerblock_core::server::OriginIdentity;
use peerblock_core::wire::{BlockPath, ChunkKey};

/// The fragment's prefix that makes an origin an object origin.
pub const FRAGMENT_PREFIX: &str = "peerblock-object=";

/// The only identity version there is.
pub const IDENTITY_VERSION: &str = "v1";

/// Domain separation of the object key's hash.
const KEY_TAG: &[u8] = b"peerblock/object-key/v1";

/// Longest URL accepted (bytes). An origin header is bounded by the request head
/// (`MAX_REQUEST_HEAD_BYTES`, 8 KiB); a presigned link is 1 to 2 KiB.
pub const MAX_URL_BYTES: usize = 4096;

/// Longest validator accepted (bytes, decoded). ETags are short; a `Last-Modified` date
/// is 29 bytes.
pub const MAX_VALIDATOR_BYTES: usize = 256;

/// Largest block size of an object read (64 MiB, the largest block the relay's index
/// bound assumes, `MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX`).
pub const MAX_OBJECT_BLOCK_SIZE: u64 = peerblock_core::server::MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX;

/// A URL's scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `http`, default port 80.
    Http,
    /// `https`, default port 443.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// 80 or 443.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Why a URL or an origin header's identity is refused. Each names the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// Not `http://` or `https://`.
    #[error("`{0}`: not an http:// or https:// URL")]
    Scheme(String),
    /// The URL is malformed (the reason says where).
    #[error("`{url}`: {why}")]
    Url {
        /// The URL (cut to 200 bytes).
        url: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The identity fragment is malformed (the reason says which field).
    #[error("origin identity `{fragment}`: {why}")]
    Fragment {
        /// The fragment (cut to 200 bytes).
        fragment: String,
        /// What is wrong.
        why: &'static str,
    },
}

fn cut(s: &str) -> String {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// An `http`/`https` object URL taken apart. The fragment is dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectUrl {
    /// The scheme.
    pub scheme: Scheme,
    /// The host, lower-cased (an IPv6 literal keeps its brackets).
    pub host: String,
    /// The port (the scheme's default when the URL names none).
    pub port: u16,
    /// The path as written (percent-encoding kept), `/` when empty.
    pub path: String,
    /// The query without its `?`, as written; `None` when there is none.
    pub query: Option<String>,
}

impl ObjectUrl {
    /// Parses `url`: `http://` or `https://` (any ASCII case), an authority `host[:port]`
    /// (no user info, a non-empty host of letters, digits, `-`, `.`, `_`, or an IPv6
    /// literal in brackets; a decimal port 1..=65535), then an optional path and query.
    /// The fragment, if any, is dropped. Only visible ASCII is accepted anywhere (a URL
    /// is sent as a request target).
    pub fn parse(url: &str) -> Result<ObjectUrl, ObjectError> {
        let bad = |why| ObjectError::Url { url: cut(url), why };
        if url.len() > MAX_URL_BYTES {
            return Err(bad("longer than 4096 bytes"));
        }
        let (scheme, rest) = match url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("http") => (Scheme::Http, rest),
            Some((s, rest)) if s.eq_ignore_ascii_case("https") => (Scheme::Https, rest),
            _ => return Err(ObjectError::Scheme(cut(url))),
        };
        if !url.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(bad("holds a space, a control byte or a non-ASCII byte"));
        }
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, rest) = rest.split_at(end);
        if authority.contains('@') {
            return Err(bad("user info in the URL is not supported"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (inner, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("unclosed IPv6 literal"))?;
            if inner.is_empty()
                || !inner
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
            {
                return Err(bad("malformed IPv6 literal"));
            }
            (format!("[{}]", inner.to_ascii_lowercase()), after)
        } else {
            let colon = authority.find(':').unwrap_or(authority.len());
            let (host, after) = authority.split_at(colon);
            if host.is_empty() {
                return Err(bad("no host"));
            }
            if !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            {
                return Err(bad("the host holds a character a host name cannot"));
            }
            (host.to_ascii_lowercase(), after)
        };
        let port = match port.strip_prefix(':') {
            None if port.is_empty() => scheme.default_port(),
            None => return Err(bad("junk after the host")),
            Some("") => scheme.default_port(),
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(bad("the port is not a number from 1 to 65535")),
            },
        };
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q.to_owned())),
            None => (rest, None),
        };
        let path = if path.is_empty() { "/" } else { path };
        Ok(ObjectUrl {
            scheme,
            host,
            port,
            path: path.to_owned(),
            query,
        })
    }

    /// The request target: path and query, as sent to the origin.
    pub fn target(&self) -> String {
        match &self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.clone(),
        }
    }

    /// The `Host` header: the host, with `:port` unless it is the scheme's default.
    pub fn host_header(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// `host:port` to dial.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The host without IPv6 brackets (the TLS server name).
    pub fn server_name(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }

    /// The URL without its fragment, in a normal form (lower-case scheme and host,
    /// explicit port only when not the default).
    pub fn without_fragment(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.host_header(),
            self.target()
        )
    }
}

/// What every reader of the same object agrees on, and so what its chunk key is derived
/// from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectIdentity {
    /// The object's URL (its query and fragment are never part of the key).
    pub url: ObjectUrl,
    /// The object's size in bytes.
    pub size: u64,
    /// Its validator: the ETag (quotes included), else the `Last-Modified` date, else
    /// empty (the origin sent neither: only the size can show a change).
    pub validator: String,
    /// The block size: block `i` is `[i·B, min((i+1)·B, size))`.
    pub block_size: u64,
}

fn put(h: &mut blake3::Hasher, field: &[u8]) {
    h.update(&(field.len() as u64).to_be_bytes());
    h.update(field);
}

impl ObjectIdentity {
    /// The identity of `url`'s object of `size` bytes with `validator`, read in blocks of
    /// `block_size` (1..=[`MAX_OBJECT_BLOCK_SIZE`]).
    pub fn new(
        url: ObjectUrl,
        size: u64,
        validator: String,
        block_size: u64,
    ) -> Result<ObjectIdentity, ObjectError> {
        let bad = |why| ObjectError::Fragment {
            fragment: String::new(),
            why,
        };
        if block_size == 0 || block_size > MAX_OBJECT_BLOCK_SIZE {
            return Err(bad("the block size is not 1 byte to 64 MiB"));
        }
        if validator.len() > MAX_VALIDATOR_BYTES {
            return Err(bad("the validator is longer than 256 bytes"));
        }
        if validator.bytes().any(|b| !(0x20..0x7f).contains(&b)) {
            return Err(bad("the validator holds a control or non-ASCII byte"));
        }
        Ok(ObjectIdentity {
            url,
            size,
            validator,
            block_size,
        })
    }

    /// The chunk key of the object's blocks: BLAKE3 over the tag, then each of scheme,
    /// lower-case host, port, path, size, validator and block size, each prefixed with
    /// its length (so no two field lists encode alike).
    pub fn key(&self) -> ChunkKey {
        let mut h = blake3::Hasher::new();
        put(&mut h, KEY_TAG);
        put(&mut h, self.url.scheme.as_str().as_bytes());
        put(&mut h, self.url.host.as_bytes());
        put(&mut h, &self.url.port.to_be_bytes());
        put(&mut h, self.url.path.as_bytes());
        put(&mut h, &self.size.to_be_bytes());
        put(&mut h, self.validator.as_bytes());
        put(&mut h, &self.block_size.to_be_bytes());
        ChunkKey::from_array(*h.finalize().as_bytes())
    }

    /// How many blocks the object has (`ceil(size / block_size)`; 0 for an empty one).
    pub fn blocks(&self) -> u64 {
        self.size.div_ceil(self.block_size)
    }

    /// Block `index`'s byte range as (start, length), or `None` past the last block.
    pub fn block_range(&self, index: u64) -> Option<(u64, u64)> {
        if index >= self.blocks() {
            return None;
        }
        let start = index * self.block_size; // < size: no overflow
        Some((start, self.block_size.min(self.size - start)))
    }

    /// Block `index`'s wire path.
    pub fn path(&self, index: u64) -> BlockPath {
        BlockPath {
            key: self.key(),
            index,
        }
    }

    /// The identity fragment (without `#`):
    /// `peerblock-object=v1;size=N;bs=B;validator=PCT`.
    pub fn fragment(&self) -> String {
        format!(
            "{FRAGMENT_PREFIX}{IDENTITY_VERSION};size={};bs={};validator={}",
            self.size,
            self.block_size,
            percent_encode(&self.validator)
        )
    }

    /// The `X-DART-Origin` value of every GET of the read: the URL (query kept, so a relay
    /// can fetch with the requester's credential) with the identity fragment.
    pub fn origin_header(&self) -> String {
        format!("{}#{}", self.url.without_fragment(), self.fragment())
    }

    /// Whether `path` is a block of this object: its key is the object's and its index in
    /// range. What a relay checks before any cache or upstream access.
    pub fn agrees(&self, chunk_key: &[u8], index: u64) -> bool {
        self.key().as_bytes() == chunk_key && index < self.blocks()
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = core::str::from_utf8(hex).ok()?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if s.len() > 1 && s.starts_with('0') {
        return None; // one spelling per number
    }
    s.parse().ok()
}

/// The object identity an origin header carries, or `None` when it carries none (no
/// fragment, or a fragment that is not `peerblock-object=...`: a wire-form origin).
/// A `peerblock-object` fragment that is malformed in any way is an error naming the
/// field: exactly `v1;size=N;bs=B;validator=PCT`, in that order, decimal numbers without
/// leading zeros, a block size of 1 byte to 64 MiB, a percent-encoded validator of at most
/// 256 bytes.
pub fn parse_origin(origin: &str) -> Result<Option<ObjectIdentity>, ObjectError> {
    let Some((url, fragment)) = origin.split_once('#') else {
        return Ok(None);
    };
    let Some(fields) = fragment.strip_prefix(FRAGMENT_PREFIX) else {
        return Ok(None);
    };
    let bad = |why| ObjectError::Fragment {
        fragment: cut(fragment),
        why,
    };
    let mut parts = fields.split(';');
    if parts.next() != Some(IDENTITY_VERSION) {
        return Err(bad("not version v1"));
    }
    let mut field = |name: &str, why_missing| {
        parts
            .next()
            .and_then(|p| p.strip_prefix(name))
            .ok_or_else(|| bad(why_missing))
    };
    let size = field("size=", "no size= second")?;
    let size = decimal(size).ok_or_else(|| bad("size is not a decimal number"))?;
    let bs = field("bs=", "no bs= third")?;
    let bs = decimal(bs).ok_or_else(|| bad("bs is not a decimal number"))?;
    let validator = field("validator=", "no validator= fourth")?;
    let validator =
        percent_decode(validator).ok_or_else(|| bad("validator is not percent-encoded text"))?;
    if parts.next().is_some() {
        return Err(bad("fields after validator="));
    }
    let url = ObjectUrl::parse(url)?;
    ObjectIdentity::new(url, size, validator, bs)
        .map(Some)
        .map_err(|e| match e {
            ObjectError::Fragment { why, .. } => bad(why),
            other => other,
        })
}

/// Core's `OriginIdentity` for object origins: a request whose origin carries an object
/// identity agrees only if its chunk key is the identity's key and its index is below the
/// object's block count; a malformed identity never agrees; an origin without one (a
/// wire-form origin) always agrees, as before.
#[derive(Clone, Copy, Debug, Default)]
pub struct ObjectOriginIdentity;

impl OriginIdentity for ObjectOriginIdentity {
    fn agrees(&self, origin: &str, chunk_key: &[u8], block_index: u64) -> bool {
        match parse_origin(origin) {
            Ok(None) => true,
            Ok(Some(id)) => id.agrees(chunk_key, block_index),
            Err(e) => {
                tracing::debug!(error = %e, "relay: a malformed object identity in X-DART-Origin");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(url: &str) -> ObjectIdentity {
        ObjectIdentity::new(
            ObjectUrl::parse(url).unwrap(),
            5 << 20,
            "\"65f-500000\"".into(),
            1 << 20,
        )
        .unwrap()
    }

    #[test]
    fn only_http_and_https_urls_are_objects_and_the_error_names_the_input() {
        for bad in ["ftp://h/x", "file:///etc/passwd", "h/x", "//h/x"] {
            let e = ObjectUrl::parse(bad).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
        assert_eq!(
            ObjectUrl::parse("HTTPS://h/x").unwrap().scheme,
            Scheme::Https
        );
    }

    #[test]
    fn malformed_urls_are_refused_with_a_reason() {
        for bad in [
            "http:///x",
            "http://u:p@h/x",
            "http://h:0/x",
            "http://h:65536/x",
            "http://h:8a/x",
            "http://h x/",
            "http://h/é",
            "http://[::1/x",
            "http://h%20/x",
        ] {
            assert!(
                matches!(ObjectUrl::parse(bad), Err(ObjectError::Url { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_query_is_never_part_of_the_key() {
        assert_eq!(
            id("https://s3.test/b/o.bin?X-Amz-Signature=aaa").key(),
            id("https://s3.test/b/o.bin?X-Amz-Signature=bbb").key()
        );
        assert_eq!(
            id("https://s3.test/b/o.bin").key(),
            id("https://s3.test/b/o.bin?x").key()
        );
    }

    #[test]
    fn the_fragment_is_never_part_of_the_key() {
        assert_eq!(id("http://h/o#a").key(), id("http://h/o#b").key());
    }

    #[test]
    fn the_host_is_compared_in_lower_case() {
        assert_eq!(
            id("http://EXAMPLE.test/o").key(),
            id("http://example.test/o").key()
        );
    }

    #[test]
    fn a_default_port_written_or_not_is_the_same_object() {
        assert_eq!(id("http://h/o").key(), id("http://h:80/o").key());
        assert_eq!(id("https://h/o").key(), id("https://h:443/o").key());
        assert_ne!(id("http://h/o").key(), id("http://h:8080/o").key());
        assert_eq!(
            ObjectUrl::parse("http://h:80/o").unwrap().host_header(),
            "h"
        );
        assert_eq!(
            ObjectUrl::parse("http://h:81/o").unwrap().host_header(),
            "h:81"
        );
    }

    #[test]
    fn any_field_change_changes_the_key() {
        let base = id("http://h:8080/o");
        let k = base.key();
        let mut v = base.clone();
        v.url.scheme = Scheme::Https;
        assert_ne!(v.key(), k, "scheme");
        let mut v = base.clone();
        v.url.host = "g".into();
        assert_ne!(v.key(), k, "host");
        let mut v = base.clone();
        v.url.port = 8081;
        assert_ne!(v.key(), k, "port");
        let mut v = base.clone();
        v.url.path = "/p".into();
        assert_ne!(v.key(), k, "path");
        let mut v = base.clone();
        v.size += 1;
        assert_ne!(v.key(), k, "size");
        let mut v = base.clone();
        v.validator = "\"other\"".into();
        assert_ne!(v.key(), k, "validator");
        let mut v = base.clone();
        v.block_size = 512 << 10;
        assert_ne!(v.key(), k, "block size");
    }

    #[test]
    fn length_prefixes_keep_field_boundaries_apart() {
        // "/ab" + "c" vs "/a" + "bc" cannot collide: path and validator are prefixed.
        let mut a = id("http://h/ab");
        a.validator = "c".into();
        let mut b = id("http://h/a");
        b.validator = "bc".into();
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn blocks_are_byte_ranges_the_last_one_short() {
        let mut o = id("http://h/o");
        o.size = 2 * o.block_size + 5;
        assert_eq!(o.blocks(), 3);
        assert_eq!(o.block_range(0), Some((0, o.block_size)));
        assert_eq!(o.block_range(2), Some((2 * o.block_size, 5)));
        assert_eq!(o.block_range(3), None);
        o.size = 0;
        assert_eq!((o.blocks(), o.block_range(0)), (0, None));
    }

    #[test]
    fn the_origin_header_round_trips_to_the_same_identity() {
        let mut o = id("https://H.test:8443/b/o.bin?X-Sig=a%2Fb");
        o.validator = "W/\"a b;c=d#e\"".into();
        let header = o.origin_header();
        assert!(
            header.starts_with("https://h.test:8443/b/o.bin?X-Sig=a%2Fb#peerblock-object=v1;"),
            "{header}"
        );
        assert_eq!(parse_origin(&header).unwrap(), Some(o.clone()));
        assert!(o.agrees(o.key().as_bytes(), 4));
        assert!(
            !o.agrees(o.key().as_bytes(), 5),
            "index past the last block"
        );
        assert!(!o.agrees(&[0; 32], 0), "another key");
    }

    #[test]
    fn an_origin_without_the_identity_fragment_is_a_wire_form_origin() {
        assert_eq!(parse_origin("http://127.0.0.1:7070"), Ok(None));
        assert_eq!(parse_origin("http://h/o#section-2"), Ok(None));
        assert!(ObjectOriginIdentity.agrees("http://127.0.0.1:7070", &[1; 32], 9));
    }

    #[test]
    fn crafted_fragments_are_refused_with_a_named_reason() {
        let why = |f: &str| match parse_origin(&format!("http://h/o#{f}")) {
            Err(ObjectError::Fragment { why, .. }) => why,
            other => panic!("{f}: {other:?}"),
        };
        assert_eq!(
            why("peerblock-object=v2;size=1;bs=1;validator="),
            "not version v1"
        );
        assert_eq!(
            why("peerblock-object=v1;bs=1;size=1;validator="),
            "no size= second"
        );
        assert_eq!(
            why("peerblock-object=v1;size=1;validator=;bs=1"),
            "no bs= third"
        );
        assert_eq!(
            why("peerblock-object=v1;size=1;bs=1"),
            "no validator= fourth"
        );
        assert_eq!(
            why("peerblock-object=v1;size=-1;bs=1;validator="),
            "size is not a decimal number"
        );
        assert_eq!(
            why("peerblock-object=v1;size=018;bs=1;validator="),
            "size is not a decimal number"
        );
        assert_eq!(
            why("peerblock-object=v1;size=99999999999999999999999;bs=1;validator="),
            "size is not a decimal number"
        );
        assert_eq!(
            why("peerblock-object=v1;size=1;bs=0;validator="),
            "the block size is not 1 byte to 64 MiB"
        );
        assert_eq!(
            why("peerblock-object=v1;size=1;bs=67108865;validator="),
            "the block size is not 1 byte to 64 MiB"
        );
        assert_eq!(
            why("peerblock-object=v1;size=1;bs=1;validator=%zz"),
            "validator is not percent-encoded text"
        );
        assert_eq!(
            why("peerblock-object=v1;size=1;bs=1;validator=a b"),
            "validator is not percent-encoded text"
        );
        assert_eq!(
            why("peerblock-object=v1;size=1;bs=1;validator=%0A"),
            "the validator holds a control or non-ASCII byte"
        );
        assert_eq!(
            why("peerblock-object=v1;size=1;bs=1;validator=;extra=1"),
            "fields after validator="
        );
        // A crafted identity never agrees with anything.
        assert!(!ObjectOriginIdentity.agrees(
            "http://h/o#peerblock-object=v1;size=1;bs=0;validator=",
            &[0; 32],
            0
        ));
    }

    #[test]
    fn a_huge_size_with_a_tiny_block_size_stays_in_u64() {
        let o = ObjectIdentity::new(
            ObjectUrl::parse("http://h/o").unwrap(),
            u64::MAX,
            String::new(),
            1,
        )
        .unwrap();
        assert_eq!(o.blocks(), u64::MAX);
        assert_eq!(o.block_range(u64::MAX - 1), Some((u64::MAX - 1, 1)));
    }
}
