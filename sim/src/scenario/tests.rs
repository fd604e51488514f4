//! Unit tests of scenario parsing, validation and key lookup.

use super::*;

#[test]
fn defaults_are_valid_and_give_13_blocks() {
    let s = Scenario::parse("", "x.toml", "x").unwrap();
    assert_eq!(s.name, "x");
    assert_eq!(s.blocks(), 13);
    assert_eq!(s.block_bytes(12), 2 * 1024 * 1024);
}

#[test]
fn unknown_key_is_rejected_with_its_name_and_line() {
    let e = Scenario::parse("[cluster]\nnodes = 3\nnodez = 4\n", "a.toml", "a").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("nodez"), "{msg}");
    assert!(msg.contains("line 3"), "{msg}");
}

#[test]
fn wrong_type_is_rejected_with_its_line() {
    let e = Scenario::parse("[readers]\n\ncount = \"many\"\n", "a.toml", "a").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("line 3"), "{msg}");
}

#[test]
fn impossible_value_names_key_and_line() {
    let e = Scenario::parse("[cluster]\nnodes = 10\nnat_nodes = 11\n", "a.toml", "a").unwrap_err();
    assert_eq!(
        e.to_string(),
        "a.toml:3: invalid value for `cluster.nat_nodes`: must be between 0 and 10 \
         (NAT nodes are some of cluster.nodes), got 11"
    );
}

#[test]
fn fault_errors_point_at_the_right_array_entry() {
    let text = "[[faults]]\nat_secs = 1\nkind = \"crash\"\nnode = 0\n\n[[faults]]\nat_secs = 2\nkind = \"slow\"\nnode = 1\nfactor = -1.0\n";
    let e = Scenario::parse(text, "f.toml", "f").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("f.toml:10: invalid value for `faults[1].factor`"),
        "{e}"
    );
}

#[test]
fn hedge_rule_key_parses_and_defaults_to_on_silence() {
    let s = Scenario::parse("", "x.toml", "x").unwrap();
    assert_eq!(s.client.hedge, HedgePolicy::OnSilence);
    let s = Scenario::parse("[client]\nhedge = \"after-delay\"\n", "x.toml", "x").unwrap();
    assert_eq!(s.client.hedge, HedgePolicy::AfterDelay);
    assert!(Scenario::parse("[client]\nhedge = \"sometimes\"\n", "x.toml", "x").is_err());
}

#[test]
fn read_config_bounds_are_checked_with_the_scenario() {
    let e = Scenario::parse("[client]\nrefused_cooldown_secs = 301\n", "a.toml", "a").unwrap_err();
    assert!(
        e.to_string()
            .contains("invalid value for `client.refused_cooldown_secs`"),
        "{e}"
    );
}

#[test]
fn missing_file_says_so() {
    let e = Scenario::load(Path::new("/nonexistent/dir/s.toml")).unwrap_err();
    assert!(e
        .to_string()
        .starts_with("cannot read scenario file /nonexistent/dir/s.toml"));
}
