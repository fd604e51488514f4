//! The node configuration: every `[listener]` key reaches the core configuration it
//! names, and every kind of mistake is refused with a message naming its key.

use std::time::Duration;

use peerblock_core::server::{AdmissionConfig, RateLimit};
use peerblock_tokio::config::{ConfigError, NodeConfig};

fn parse(text: &str) -> Result<NodeConfig, ConfigError> {
    NodeConfig::from_toml_str(text)
}

fn refused(text: &str) -> String {
    match parse(text) {
        Ok(c) => panic!("accepted {text:?}: {c:?}"),
        Err(e) => e.to_string(),
    }
}

/// One `[listener]` admission key: its TOML value and how to read the field it sets.
struct Case {
    key: &'static str,
    toml: &'static str,
    field: fn(&AdmissionConfig) -> String,
    expected: &'static str,
}

fn admission_cases() -> Vec<Case> {
    vec![
        Case {
            key: "max_sessions",
            toml: "300",
            field: |a| a.max_sessions.to_string(),
            expected: "300",
        },
        Case {
            key: "max_sessions_per_source",
            toml: "3",
            field: |a| a.max_sessions_per_source.to_string(),
            expected: "3",
        },
        Case {
            key: "max_requests",
            toml: "600",
            field: |a| a.max_requests.to_string(),
            expected: "600",
        },
        Case {
            key: "max_requests_per_session",
            toml: "3",
            field: |a| a.max_requests_per_session.to_string(),
            expected: "3",
        },
        Case {
            key: "max_inflight_bytes",
            toml: "134217728",
            field: |a| a.max_inflight_bytes.to_string(),
            expected: "134217728",
        },
        Case {
            key: "max_inflight_bytes_per_source",
            toml: "8388608",
            field: |a| a.max_inflight_bytes_per_source.to_string(),
            expected: "8388608",
        },
        Case {
            key: "rate",
            toml: "{ per_second = 50, burst = 10 }",
            field: |a| format!("{:?}", a.rate),
            expected: "Some(RateLimit { per_second: 50, burst: 10 })",
        },
        Case {
            key: "max_tracked_sources",
            toml: "2048",
            field: |a| a.max_tracked_sources.to_string(),
            expected: "2048",
        },
        Case {
            key: "retry_after",
            toml: "\"7s\"",
            field: |a| format!("{:?}", a.retry_after),
            expected: "7s",
        },
        Case {
            key: "max_refusals",
            toml: "17",
            field: |a| a.max_refusals.to_string(),
            expected: "17",
        },
    ]
}

#[test]
fn every_listener_admission_key_sets_the_admission_field_it_names() {
    // Exhaustive destructuring: a new AdmissionConfig field breaks this test's build until
    // it gets a key and a case below.
    let AdmissionConfig {
        max_sessions: _,
        max_sessions_per_source: _,
        max_requests: _,
        max_requests_per_session: _,
        max_inflight_bytes: _,
        max_inflight_bytes_per_source: _,
        rate: _,
        max_tracked_sources: _,
        retry_after: _,
        max_refusals: _,
    } = AdmissionConfig::default();
    let cases = admission_cases();
    assert_eq!(cases.len(), 10, "one case per AdmissionConfig field");
    let default = AdmissionConfig::default();
    for case in cases {
        let text = format!("[listener]\n{} = {}\n", case.key, case.toml);
        let config = parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let admission = config.admission();
        assert_eq!((case.field)(&admission), case.expected, "key {}", case.key);
        assert_ne!(
            (case.field)(&default),
            case.expected,
            "key {}: the case must change the default",
            case.key
        );
        // Only that field changed.
        let changed = [
            admission.max_sessions != default.max_sessions,
            admission.max_sessions_per_source != default.max_sessions_per_source,
            admission.max_requests != default.max_requests,
            admission.max_requests_per_session != default.max_requests_per_session,
            admission.max_inflight_bytes != default.max_inflight_bytes,
            admission.max_inflight_bytes_per_source != default.max_inflight_bytes_per_source,
            admission.rate != default.rate,
            admission.max_tracked_sources != default.max_tracked_sources,
            admission.retry_after != default.retry_after,
            admission.max_refusals != default.max_refusals,
        ];
        assert_eq!(
            changed.iter().filter(|c| **c).count(),
            1,
            "key {} changed more than its field",
            case.key
        );
    }
}

#[test]
fn listener_rate_table_form_sets_the_rate_bucket() {
    let config = parse("[listener.rate]\nper_second = 20\nburst = 5\n").unwrap();
    assert_eq!(
        config.admission().rate,
        Some(RateLimit {
            per_second: 20,
            burst: 5
        })
    );
}

#[test]
fn listener_server_keys_set_the_server_deadlines_and_relay() {
    let config = parse(
        "[listener]\nidle_timeout = \"61s\"\nsource_timeout = \"2500ms\"\nsend_timeout = \"1m\"\n\
         linger = \"3s\"\nrefusal_head_timeout = \"750ms\"\nmax_hop = 5\n",
    )
    .unwrap();
    let s = config.server_config("a", "node-a.test:1");
    assert_eq!(s.idle_timeout, Duration::from_secs(61));
    assert_eq!(s.source_timeout, Duration::from_millis(2500));
    assert_eq!(s.send_timeout, Duration::from_secs(60));
    assert_eq!(s.linger, Duration::from_secs(3));
    assert_eq!(s.refusal_head_timeout, Duration::from_millis(750));
    assert_eq!(s.relay.map(|r| r.max_hop), Some(5));
    let off = parse("[listener]\nrelay = false\n").unwrap();
    assert!(off.server_config("a", "node-a.test:1").relay.is_none());
}

#[test]
fn listener_block_cache_bytes_sets_the_store_cache() {
    let config = parse("[listener]\nblock_cache_bytes = 1048576\n").unwrap();
    assert_eq!(config.listener.block_cache_bytes, 1 << 20);
    assert_eq!(
        parse("").unwrap().listener.block_cache_bytes,
        peerblock_tokio::source::DEFAULT_CACHE_BYTES
    );
}

#[test]
fn store_cache_bytes_sets_the_relay_cache_bound_and_defaults_to_a_gibibyte() {
    let config = parse("[store]\ncache_bytes = 0\n").unwrap();
    assert_eq!(config.store.cache_bytes, 0);
    assert_eq!(parse("").unwrap().store.cache_bytes, 1 << 30);
    let e = refused("[store]\ncache_size = 1\n");
    assert!(e.contains("cache_size"), "{e}");
}

#[test]
fn listener_body_path_is_buffered_by_default_and_refuses_other_words() {
    use peerblock_tokio::config::BodyPathKey;
    assert_eq!(parse("").unwrap().listener.body_path, BodyPathKey::Buffered);
    let config = parse("[listener]\nbody_path = \"sendfile\"\n").unwrap();
    assert_eq!(config.listener.body_path, BodyPathKey::Sendfile);
    let err = refused("[listener]\nbody_path = \"splice\"\n");
    assert!(err.contains("body_path"), "{err}");
}

#[test]
fn listener_upload_rates_are_off_by_default_and_refused_below_the_minimum_by_name() {
    let (node, conn) = parse("").unwrap().upload_pacing();
    assert_eq!((node, conn), (None, None));
    let config = parse(
        "[listener]\nupload_bytes_per_second = 2000000\nconnection_upload_bytes_per_second = 500000\n",
    )
    .unwrap();
    let (node, conn) = config.upload_pacing();
    assert_eq!(node.unwrap().bytes_per_second, 2_000_000);
    assert_eq!(node.unwrap().burst, 100_000, "50 ms of the rate");
    assert_eq!(conn.unwrap().bytes_per_second, 500_000);
    for key in [
        "upload_bytes_per_second",
        "connection_upload_bytes_per_second",
    ] {
        let err = refused(&format!("[listener]\n{key} = 100\n"));
        assert!(err.contains(&format!("listener.{key}")), "{err}");
        assert!(err.contains("at least 1024"), "{err}");
        let err = refused(&format!("[listener]\n{key} = -1\n"));
        assert!(err.contains(key), "{err}");
    }
}

#[test]
fn listener_when_full_is_refuse_by_default_silent_on_request_and_nothing_else() {
    use peerblock_tokio::config::WhenFullKey;
    assert_eq!(parse("").unwrap().listener.when_full, WhenFullKey::Refuse);
    let config = parse("[listener]\nwhen_full = \"silent\"\n").unwrap();
    assert_eq!(config.listener.when_full, WhenFullKey::Silent);
    let err = refused("[listener]\nwhen_full = \"drop\"\n");
    assert!(err.contains("when_full"), "{err}");
    let config = parse("[listener]\nwhen_full = \"silent\"\nmax_channels = 32\n").unwrap();
    assert_eq!(config.listener.max_channels, 32);
    let err = refused("[listener]\nmax_channels = 32\n");
    assert!(err.contains("listener.max_channels"), "{err}");
}

#[test]
fn client_read_and_roster_keys_reach_core_configs() {
    let config = parse(
        "[client]\ndial_timeout = \"2s\"\nmax_body = 1000\npool_idle_per_peer = 8\n\
         max_refusal_cooldown = \"20s\"\n\
         [read]\nclose_group_size = 5\nhedge_delay = \"300ms\"\nparallel = 16\n\
         [roster]\ninterval = \"10s\"\njitter = \"1s\"\ncapacity = 100\n",
    )
    .unwrap();
    let c = config.client_config();
    assert_eq!(c.deadlines.dial, Duration::from_secs(2));
    assert_eq!(c.max_body, 1000);
    assert_eq!(c.max_refusal_cooldown, Duration::from_secs(20));
    assert_eq!(config.pool().idle_per_peer, 8);
    let r = config.read_config();
    assert_eq!(r.close_group_size, 5);
    assert_eq!(r.hedge_delay, Duration::from_millis(300));
    assert_eq!(
        r.max_retry_after,
        Duration::from_secs(20),
        "one refusal cap for client and read"
    );
    assert_eq!(config.read.parallel, 16);
    let f = config.refresh_config(vec!["a:1".into()]);
    assert_eq!(f.interval, Duration::from_secs(10));
    assert_eq!(f.jitter, Duration::from_secs(1));
    assert_eq!(f.seeds, vec!["a:1".to_string()]);
    assert_eq!(config.roster.capacity, 100);
}

#[test]
fn an_empty_file_is_every_default() {
    let config = parse("").unwrap();
    assert_eq!(config.admission(), AdmissionConfig::default());
    assert_eq!(config, NodeConfig::default());
}

#[test]
fn an_unknown_key_is_refused_naming_the_key_and_its_line() {
    let msg = refused("[listener]\nmax_sessions = 10\nmax_sesions = 3\n");
    assert!(msg.contains("max_sesions"), "{msg}");
    assert!(msg.contains("line 3"), "{msg}");
    assert!(msg.contains("unknown field"), "{msg}");
}

#[test]
fn an_unknown_table_is_refused() {
    let msg = refused("[listner]\nmax_sessions = 10\n");
    assert!(msg.contains("listner"), "{msg}");
}

#[test]
fn a_value_of_the_wrong_type_is_refused_naming_the_key() {
    let msg = refused("[listener]\nmax_sessions = -1\n");
    assert!(msg.contains("max_sessions"), "{msg}");
    assert!(msg.contains("line 2"), "{msg}");
}

#[test]
fn a_duration_without_a_unit_is_refused_naming_the_key() {
    let msg = refused("[listener]\nretry_after = \"15\"\n");
    assert!(msg.contains("retry_after"), "{msg}");
    assert!(msg.contains("no unit"), "{msg}");
    let msg = refused("[listener]\nretry_after = 15\n");
    assert!(msg.contains("retry_after"), "{msg}");
}

#[test]
fn a_zero_limit_is_refused_naming_the_key() {
    let e = parse("[listener]\nmax_sessions = 0\n").unwrap_err();
    assert_eq!(e.key(), Some("listener.max_sessions"));
    assert!(e.to_string().contains("zero"), "{e}");
}

#[test]
fn a_zero_server_timeout_is_refused_naming_the_key() {
    let e = parse("[listener]\nlinger = \"0s\"\n").unwrap_err();
    assert_eq!(e.key(), Some("listener.linger"), "{e}");
}

#[test]
fn per_source_sessions_above_sessions_is_refused_naming_the_key() {
    let e = parse(
        "[listener]\nmax_sessions = 8\nmax_sessions_per_source = 16\nmax_tracked_sources = 8\n",
    )
    .unwrap_err();
    assert_eq!(e.key(), Some("listener.max_sessions_per_source"), "{e}");
    assert!(e.to_string().contains("exceeds `max_sessions`"), "{e}");
}

#[test]
fn one_source_able_to_take_every_request_slot_is_refused() {
    let e = parse("[listener]\nmax_requests = 8\nmax_sessions_per_source = 4\n").unwrap_err();
    assert_eq!(e.key(), Some("listener.max_sessions_per_source"), "{e}");
    assert!(e.to_string().contains("every request slot"), "{e}");
}

#[test]
fn a_source_table_smaller_than_sessions_is_refused() {
    let e = parse("[listener]\nmax_tracked_sources = 100\n").unwrap_err();
    assert_eq!(e.key(), Some("listener.max_tracked_sources"), "{e}");
}

#[test]
fn a_zero_rate_is_refused_naming_the_key() {
    let e = parse("[listener]\nrate = { per_second = 0, burst = 1 }\n").unwrap_err();
    assert_eq!(e.key(), Some("listener.rate.per_second"), "{e}");
}

#[test]
fn a_zero_max_hop_is_refused() {
    let e = parse("[listener]\nmax_hop = 0\n").unwrap_err();
    assert_eq!(e.key(), Some("listener.max_hop"), "{e}");
}

#[test]
fn client_errors_name_the_client_key() {
    let e = parse("[client]\nresponse_header_timeout = \"0ms\"\n").unwrap_err();
    assert_eq!(e.key(), Some("client.response_header_timeout"), "{e}");
    let e = parse("[client]\npool_idle_per_peer = 600\n").unwrap_err();
    assert_eq!(e.key(), Some("client.pool_idle_per_peer"), "{e}");
    let e = parse("[client]\nmax_refusal_cooldown = \"10m\"\n").unwrap_err();
    assert_eq!(e.key(), Some("client.max_refusal_cooldown"), "{e}");
}

#[test]
fn read_errors_name_the_read_key() {
    let e = parse("[read]\nclose_group_size = 17\n").unwrap_err();
    assert_eq!(e.key(), Some("read.close_group_size"), "{e}");
    let e = parse("[read]\nparallel = 0\n").unwrap_err();
    assert_eq!(e.key(), Some("read.parallel"), "{e}");
}

#[test]
fn roster_errors_name_the_roster_key() {
    let e = parse("[roster]\ninterval = \"5s\"\njitter = \"5s\"\n").unwrap_err();
    assert_eq!(e.key(), Some("roster.jitter"), "{e}");
    let e = parse("[roster]\ncapacity = 0\n").unwrap_err();
    assert_eq!(e.key(), Some("roster.capacity"), "{e}");
}

#[test]
fn a_duration_above_a_day_is_refused() {
    let msg = refused("[listener]\nidle_timeout = \"25h\"\n");
    assert!(msg.contains("idle_timeout") && msg.contains("24h"), "{msg}");
}

#[test]
fn failed_dial_cooldown_defaults_to_the_references_30_minutes_and_is_tunable() {
    assert_eq!(
        parse("").unwrap().client.failed_dial_cooldown,
        Duration::from_secs(30 * 60)
    );
    let config = parse("[client]\nfailed_dial_cooldown = \"2s\"\n").unwrap();
    assert_eq!(config.client.failed_dial_cooldown, Duration::from_secs(2));
    let err = refused("[client]\nfailed_dial_cooldown = \"0s\"\n");
    assert!(err.contains("client.failed_dial_cooldown"), "{err}");
}

#[test]
fn roster_membership_keys_set_the_membership_policy() {
    use peerblock_core::roster::record::{hex, sign_epoch};
    use peerblock_core::roster::{MembershipMode, NodeKey};
    let authority = NodeKey::from_seed(&[4; 32]);
    let sig = hex(&sign_epoch(&authority, 9));
    let c = parse(&format!(
        "[roster]\nmembership = \"verified-only\"\nkey_file = \"/tmp/k\"\nauthority_key = \"{}\"\nepoch = 9\nepoch_signature = \"{sig}\"\nmax_new_per_source = 32\nmax_checks_per_source = 64\nlearn_interval = \"2m\"\n",
        hex(&authority.public())
    ))
    .unwrap();
    let p = c.membership_policy().unwrap();
    assert_eq!(p.mode, MembershipMode::VerifiedOnly);
    assert_eq!(p.authority, Some(authority.public()));
    assert_eq!((p.max_new_per_source, p.max_checks_per_source), (32, 64));
    assert_eq!(p.learn_interval, Duration::from_secs(120));
    assert_eq!(c.signed_epoch().unwrap().0, 9);
    assert_eq!(
        c.roster.key_file.as_deref(),
        Some(std::path::Path::new("/tmp/k"))
    );
    // Defaults: open, no authority, 256 per 30 s.
    let d = parse("").unwrap().membership_policy().unwrap();
    assert_eq!(d.mode, MembershipMode::Open);
    assert_eq!((d.authority, d.max_new_per_source), (None, 256));
}

#[test]
fn roster_membership_mistakes_name_their_key() {
    let authority = peerblock_core::roster::NodeKey::from_seed(&[4; 32]);
    let key = peerblock_core::roster::record::hex(&authority.public());
    for (text, key_named) in [
        ("[roster]\nmembership = \"closed\"\n", "membership"),
        (
            "[roster]\nauthority_key = \"abc\"\n",
            "roster.authority_key",
        ),
        (
            "[roster]\nmax_new_per_source = 0\n",
            "roster.max_new_per_source",
        ),
        (
            "[roster]\nmax_checks_per_source = 0\n",
            "roster.max_checks_per_source",
        ),
        (
            "[roster]\nlearn_interval = \"0s\"\n",
            "roster.learn_interval",
        ),
        (
            &format!("[roster]\nepoch_signature = \"{}\"\n", "00".repeat(64)),
            "roster.epoch_signature",
        ),
        (
            &format!(
                "[roster]\nauthority_key = \"{key}\"\nepoch = 3\nepoch_signature = \"{}\"\n",
                "00".repeat(64)
            ),
            "roster.epoch_signature",
        ),
    ] {
        let e = refused(text);
        assert!(e.contains(key_named), "{text}: {e}");
    }
}

/// Rule (issue 25): `membership = "admitted"` without `authority_key` is refused naming
/// the key; with it, the allow list and the placement budgets reach the policy.
#[test]
fn admitted_membership_needs_the_authority_key_and_takes_its_allow_list() {
    let e = refused("[roster]\nmembership = \"admitted\"\n");
    assert!(e.contains("roster.authority_key"), "{e}");
    let authority = peerblock_core::roster::NodeKey::from_seed(&[3; 32]);
    let text = format!(
        "[roster]\nmembership = \"admitted\"\nauthority_key = \"{}\"\nallow = [\"10.0.0.7:7070\"]\nmax_placed_per_host = 2\nmax_placed_per_prefix = 9\n",
        peerblock_core::roster::record::hex(&authority.public())
    );
    let policy = parse(&text).unwrap().membership_policy().unwrap();
    assert_eq!(
        policy.mode,
        peerblock_core::roster::MembershipMode::Admitted
    );
    assert_eq!(policy.allow, vec!["10.0.0.7:7070".to_owned()]);
    assert_eq!(
        (policy.max_placed_per_host, policy.max_placed_per_prefix),
        (2, 9)
    );
    let e = refused("[roster]\nmax_placed_per_host = 0\n");
    assert!(e.contains("roster.max_placed_per_host"), "{e}");
}

/// Rule: a node's `admission` must be the authority's certificate for that node's own key;
/// anything else is refused naming `roster.admission`.
#[test]
fn a_node_admission_is_checked_against_the_authority_and_the_nodes_key() {
    use peerblock_core::roster::record::{hex, sign_admission};
    use peerblock_core::roster::NodeKey;
    let (authority, node, other) = (
        NodeKey::from_seed(&[3; 32]),
        NodeKey::from_seed(&[4; 32]),
        NodeKey::from_seed(&[5; 32]),
    );
    let with = |cert: &[u8; 64]| {
        parse(&format!(
            "[roster]\nauthority_key = \"{}\"\nadmission = \"{}\"\n",
            hex(&authority.public()),
            hex(cert)
        ))
        .unwrap()
    };
    let cert = sign_admission(&authority, &node.public());
    assert_eq!(
        with(&cert).node_admission(&node.public()).unwrap(),
        Some(cert)
    );
    let e = with(&cert).node_admission(&other.public()).unwrap_err();
    assert!(e.to_string().contains("roster.admission"), "{e}");
    let rogue = sign_admission(&other, &node.public());
    assert!(with(&rogue).node_admission(&node.public()).is_err());
    let bare = parse("[roster]\nadmission = \"00\"\n").unwrap();
    assert!(bare.node_admission(&node.public()).is_err());
}
