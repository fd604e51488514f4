//! The files of `deploy/`, each checked by its own tool (docs/deploy.md): the Dockerfile
//! by hadolint, the Kubernetes manifests by `kubernetes-validate` against the Kubernetes
//! schemas (offline), the systemd unit by `systemd-analyze verify`, the Prometheus rules
//! by `promtool check rules` and their unit tests by `promtool test rules`. Each check
//! also runs its tool on a broken copy first and insists that it is rejected, so a tool
//! that accepts anything cannot pass a test. A tool that is missing skips its test with
//! the reason printed (`.ci/run` installs them all). Containers cannot run on this
//! project's machines: the image is checked by lint and the manifests by schema.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::procs::{TempDir, BIN};

/// The repository's `deploy/` directory.
fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .join("deploy")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `tool ARGS`, bounded (killed past 120 s); `None` (with the reason printed) when the
/// tool is not installed.
fn tool(name: &str, args: &[&str]) -> Option<Output> {
    let child = match Command::new(name)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipping: `{name}` is not installed (.ci/run installs it)");
            return None;
        }
        Err(e) => panic!("cannot run {name}: {e}"),
    };
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(out) => Some(out.expect("collect the tool's output")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{name} {args:?} did not finish within 120 s");
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_dockerfile_passes_hadolint() {
    let dockerfile = deploy().join("Dockerfile");
    let content = read(&dockerfile);
    // What the issue asks of the image, which hadolint does not check.
    assert_eq!(
        content.lines().filter(|l| l.starts_with("FROM ")).count(),
        2,
        "multi-stage: a build stage and a runtime stage"
    );
    let user = content
        .lines()
        .rfind(|l| l.starts_with("USER "))
        .expect("a USER line");
    assert!(
        !user.contains("root") && !user.contains(" 0"),
        "runs as a non-root user: {user}"
    );
    assert!(content.contains("VOLUME [\"/var/lib/peerblock\"]"));
    let dir = TempDir::new("hadolint");
    let bad = dir.join("Dockerfile");
    std::fs::write(&bad, "FROM debian:latest\nRUN apt-get install -y curl\n").unwrap();
    let Some(out) = tool("hadolint", &[bad.to_str().unwrap()]) else {
        return;
    };
    assert!(!out.status.success(), "hadolint accepted a bad Dockerfile");
    let out = tool("hadolint", &[dockerfile.to_str().unwrap()]).expect("ran once already");
    assert!(out.status.success(), "hadolint: {}", text(&out));
}

/// The manifests, in the order `kubectl apply -f deploy/kubernetes/` applies them.
fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy().join("kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_kubernetes_manifests_validate_against_the_schemas() {
    let files = manifests();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "00-namespace.yaml",
            "10-configmap.yaml",
            "20-service.yaml",
            "30-daemonset.yaml"
        ]
    );
    let dir = TempDir::new("k8s-validate");
    let bad = dir.join("bad.yaml");
    // A DaemonSet whose probe port is a list: not a Kubernetes object.
    std::fs::write(
        &bad,
        read(&files[3]).replace("port: admin", "port: [admin]"),
    )
    .unwrap();
    let Some(out) = tool("kubernetes-validate", &["--strict", bad.to_str().unwrap()]) else {
        return;
    };
    assert!(
        !out.status.success(),
        "kubernetes-validate accepted a bad DaemonSet: {}",
        text(&out)
    );
    for file in &files {
        let out = tool("kubernetes-validate", &["--strict", file.to_str().unwrap()])
            .expect("ran once already");
        assert!(out.status.success(), "{}: {}", file.display(), text(&out));
        assert!(text(&out).contains("passed"), "{}", text(&out));
    }
}

#[test]
fn the_daemonset_advertises_the_pod_ip_and_probes_health_and_readiness() {
    let ds = read(&deploy().join("kubernetes/30-daemonset.yaml"));
    for needle in [
        "kind: DaemonSet",
        "- --listen=0.0.0.0:7070",
        "- --advertise=$(POD_IP):7070",
        "fieldPath: status.podIP",
        "- --seed=peerblock-seeds.peerblock.svc.cluster.local:7070",
        "path: /readyz",
        "path: /healthz",
        "prometheus.io/scrape: \"true\"",
        "runAsNonRoot: true",
    ] {
        assert!(ds.contains(needle), "the DaemonSet lacks {needle:?}");
    }
    let service = read(&deploy().join("kubernetes/20-service.yaml"));
    assert!(service.contains("clusterIP: None"), "a headless Service");
    assert!(
        service.contains("publishNotReadyAddresses: true"),
        "pods must find each other before they are ready (ready needs a roster)"
    );
}

#[test]
fn the_daemonset_grace_outlasts_the_node_shutdown_grace() {
    let ds = read(&deploy().join("kubernetes/30-daemonset.yaml"));
    let grace: u64 = ds
        .lines()
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds:"))
        .expect("terminationGracePeriodSeconds")
        .trim()
        .parse()
        .unwrap();
    assert!(
        Duration::from_secs(grace) > peerblock_node::node::SHUTDOWN_GRACE,
        "{grace} s is not longer than the node's shutdown grace"
    );
    let unit = read(&deploy().join("systemd/peerblock-node.service"));
    let stop = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .expect("TimeoutStopSec");
    let stop: u64 = stop.trim_end_matches('s').parse().unwrap();
    assert!(Duration::from_secs(stop) > peerblock_node::node::SHUTDOWN_GRACE);
}

#[test]
fn the_configmap_toml_is_a_valid_node_configuration() {
    let cm = read(&deploy().join("kubernetes/10-configmap.yaml"));
    let (_, toml) = cm.split_once("node.toml: |\n").expect("a node.toml key");
    let toml: String = toml
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = TempDir::new("configmap");
    let path = dir.join("node.toml");
    std::fs::write(&path, &toml).unwrap();
    let config = peerblock_tokio::config::NodeConfig::from_file(&path)
        .unwrap_or_else(|e| panic!("the ConfigMap's node.toml: {e}\n{toml}"));
    // It keeps the listener limits docs/security.md and docs/limits.md rely on.
    let defaults = peerblock_tokio::config::NodeConfig::default();
    assert_eq!(
        config.listener.max_sessions_per_source,
        defaults.listener.max_sessions_per_source
    );
    assert!(config.listener.max_sessions <= defaults.listener.max_sessions);
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let unit = read(&deploy().join("systemd/peerblock-node.service"));
    assert!(unit.contains("\nRestart=on-failure\n"));
    let dir = TempDir::new("systemd");
    // The unit as shipped, its binary the one under test and its environment file a
    // copy of the example (verify checks that the command exists).
    let env = dir.join("node.env");
    std::fs::copy(deploy().join("systemd/node.env"), &env).unwrap();
    let local = unit
        .replace("/usr/local/bin/peerblock-node", BIN)
        .replace("/etc/peerblock/node.env", env.to_str().unwrap());
    let bad = dir.join("bad.service");
    std::fs::write(
        &bad,
        local.replace("Restart=on-failure", "Restart=sometimes"),
    )
    .unwrap();
    let Some(out) = tool("systemd-analyze", &["verify", bad.to_str().unwrap()]) else {
        return;
    };
    // verify exits 0 on a directive it cannot parse: what it prints is the verdict.
    assert!(
        text(&out).contains("Failed to parse"),
        "systemd-analyze accepted a bad unit: {}",
        text(&out)
    );
    let good = dir.join("peerblock-node.service");
    std::fs::write(&good, &local).unwrap();
    let out = tool("systemd-analyze", &["verify", good.to_str().unwrap()]).expect("ran");
    assert!(
        out.status.success() && text(&out).trim().is_empty(),
        "systemd-analyze verify: {}",
        text(&out)
    );
}

#[test]
fn the_alert_rules_pass_promtool_check_rules() {
    let rules = deploy().join("prometheus/peerblock-rules.yml");
    let dir = TempDir::new("promtool-check");
    let bad = dir.join("bad.yml");
    std::fs::write(&bad, read(&rules).replace("> 0.5", "> > 0.5")).unwrap();
    let Some(out) = tool("promtool", &["check", "rules", bad.to_str().unwrap()]) else {
        return;
    };
    assert!(!out.status.success(), "promtool accepted a bad expression");
    let out = tool("promtool", &["check", "rules", rules.to_str().unwrap()]).expect("ran");
    assert!(out.status.success(), "{}", text(&out));
}

/// The alert names of the rules file.
fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_alert_fires_in_its_promtool_unit_test() {
    let dir = deploy().join("prometheus");
    let rules = read(&dir.join("peerblock-rules.yml"));
    let tests = read(&dir.join("peerblock-rules.test.yml"));
    let alerts = alert_names(&rules);
    assert_eq!(alerts.len(), 5, "{alerts:?}");
    for alert in &alerts {
        assert!(
            tests.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - exp_labels"
            )),
            "{alert} has no unit test in which it fires"
        );
    }
    // Broken: the refusal threshold raised so that the test's node no longer fires.
    let scratch = TempDir::new("promtool-test");
    std::fs::write(
        scratch.join("peerblock-rules.yml"),
        rules.replace("> 0.5", "> 0.8"),
    )
    .unwrap();
    std::fs::write(scratch.join("peerblock-rules.test.yml"), &tests).unwrap();
    let broken = scratch.join("peerblock-rules.test.yml");
    let Some(out) = tool("promtool", &["test", "rules", broken.to_str().unwrap()]) else {
        return;
    };
    assert!(!out.status.success(), "the unit tests passed broken rules");
    let shipped = dir.join("peerblock-rules.test.yml");
    let out = tool("promtool", &["test", "rules", shipped.to_str().unwrap()]).expect("ran");
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn the_dashboard_is_grafana_json_with_a_query_per_panel() {
    let path = deploy().join("grafana/peerblock.json");
    let dash: serde_json::Value = serde_json::from_str(&read(&path)).expect("valid JSON");
    assert!(dash["uid"].is_string() && dash["title"].is_string());
    let panels = dash["panels"].as_array().expect("panels");
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for wanted in [
        "Requests by status",
        "Refusals by reason",
        "Bytes served",
        "Relay cache hit ratio",
        "Breaker and cooldowns",
        "Read outcomes",
        "GET latency p99",
    ] {
        assert!(
            titles.contains(&wanted),
            "no panel {wanted:?} in {titles:?}"
        );
    }
    for p in panels {
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        for t in targets {
            assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
}

/// The node container's `args:` of the DaemonSet, in order.
fn daemonset_args(ds: &str) -> Vec<String> {
    let mut lines = ds.lines().skip_while(|l| l.trim() != "args:").skip(1);
    let mut args = Vec::new();
    for l in lines.by_ref() {
        let t = l.trim();
        if t.starts_with('#') {
            continue;
        }
        match t.strip_prefix("- ") {
            Some(arg) => args.push(arg.to_owned()),
            None => break,
        }
    }
    args
}

/// A `peerblock-node` process killed when dropped.
struct Started(std::process::Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_daemonset_command_line_starts_a_node_that_becomes_ready() {
    let ds = read(&deploy().join("kubernetes/30-daemonset.yaml"));
    let args = daemonset_args(&ds);
    assert_eq!(args.first().map(String::as_str), Some("serve"), "{args:?}");
    // The pod's world on loopback: its IP is 127.0.0.51, the peer port a free one, the
    // admin port the kernel's choice, the hostPath store and the ConfigMap's file in a
    // temporary directory, and the headless Service's name the pod's own address (the
    // first pod of a DaemonSet: ready alone). No outside DNS, no 0.0.0.0.
    let dir = TempDir::new("ds-args");
    let port = std::net::TcpListener::bind("127.0.0.51:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cm = read(&deploy().join("kubernetes/10-configmap.yaml"));
    let toml: String = cm
        .split_once("node.toml: |\n")
        .expect("a node.toml key")
        .1
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    std::fs::write(dir.join("node.toml"), toml).unwrap();
    let store = dir.join("store");
    let pod = |a: &str| {
        a.replace("$(POD_IP)", "127.0.0.51")
            .replace("0.0.0.0:7070", "127.0.0.51:7070")
            .replace("0.0.0.0:9100", "127.0.0.51:0")
            .replace("peerblock-seeds.peerblock.svc.cluster.local", "127.0.0.51")
            .replace(":7070", &format!(":{port}"))
            .replace("/var/lib/peerblock", store.to_str().unwrap())
            .replace(
                "/etc/peerblock/node.toml",
                dir.join("node.toml").to_str().unwrap(),
            )
    };
    let local: Vec<String> = args.iter().map(|a| pod(a)).collect();
    for a in &local {
        assert!(
            !a.contains("0.0.0.0") && !a.contains("svc.cluster"),
            "left unmapped: {a}"
        );
    }
    let mut child = Command::new(BIN)
        .args(&local)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn peerblock-node");
    let stdout = child.stdout.take().unwrap();
    let node = Started(child);
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the node printed its start-up lines in time (see its stderr above)")
    };
    assert_eq!(next(), format!("listening 127.0.0.51:{port}"));
    let admin = next();
    let admin = admin
        .strip_prefix("metrics ")
        .expect("a metrics line")
        .trim();
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    use std::io::{Read, Write};
    s.write_all(b"GET /readyz HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.split(' ').nth(1) == Some("200"), "{answer}");
    assert!(answer.ends_with("ready\n"), "{answer}");
    drop(node);
}
