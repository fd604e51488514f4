//! The `peerblock-node` binary: help on every command, `import`, and start-up refusals
//! that stop before anything is served.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use peerblock_node::node::EXIT_USAGE;

mod common;

/// Bound on one run of the binary: every command here ends on its own in milliseconds.
const RUN_BOUND: Duration = Duration::from_secs(20);

/// Runs the binary with `args`, bounded by [`RUN_BOUND`].
fn run(args: &[&str]) -> Output {
    common::procs::run(args, RUN_BOUND)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("peerblock-cli-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self, p: &str) -> String {
        self.0.join(p).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn help_on_every_command_exits_0_and_names_its_flags() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--help"],
            &["serve", "import", "fetch", "get", "Exit codes", "RUST_LOG"],
        ),
        (
            &["serve", "--help"],
            &[
                "--listen",
                "--id",
                "--store",
                "--seed",
                "--config",
                "--metrics",
            ],
        ),
        (&["import", "--help"], &["FILE", "--store", "--block-size"]),
        (
            &["fetch", "--help"],
            &["CHUNK", "--seed", "-o", "--config", "--parallel"],
        ),
        (
            &["get", "--help"],
            &["--peer", "CHUNK", "INDEX", "--expected", "-o"],
        ),
    ];
    for (args, flags) in cases {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let help = text(&out.stdout);
        for flag in *flags {
            assert!(help.contains(flag), "{args:?} help lacks {flag}:\n{help}");
        }
    }
}

#[test]
fn import_prints_the_chunk_key_and_creates_the_store_layout() {
    let s = Scratch::new("import");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(s.0.join("file"), &data).unwrap();
    let store = s.path("store");
    let out = run(&[
        "import",
        &s.path("file"),
        "--store",
        &store,
        "--block-size",
        "64KiB",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let key = stdout.trim();
    assert_eq!(key.len(), 64, "{stdout:?}");
    assert!(key
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    let dir = Path::new(&store).join(key);
    let manifest = std::fs::read(dir.join("0")).unwrap();
    assert_eq!(blake3::hash(&manifest).to_hex().as_str(), key);
    for i in 1..=5 {
        assert!(dir.join(i.to_string()).is_file(), "block {i}");
    }
    assert!(!dir.join("6").exists());
    assert!(
        text(&out.stderr).contains("5 blocks"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn import_refuses_a_bad_block_size_with_a_message() {
    let s = Scratch::new("bs");
    std::fs::write(s.0.join("file"), b"abc").unwrap();
    for bad in ["0", "65MiB", "12XB", "lots"] {
        let out = run(&[
            "import",
            &s.path("file"),
            "--store",
            &s.path("st"),
            "--block-size",
            bad,
        ]);
        assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)), "{bad}");
        let err = text(&out.stderr);
        assert!(err.contains("--block-size"), "{bad}: {err}");
    }
    assert!(
        !s.0.join("st").exists(),
        "nothing written for a refused import"
    );
}

#[test]
fn import_of_a_missing_file_is_an_io_error() {
    let s = Scratch::new("missing");
    let out = run(&["import", &s.path("nope"), "--store", &s.path("st")]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nope"));
}

#[test]
fn serve_with_a_bad_config_exits_with_the_usage_code_naming_the_key() {
    let s = Scratch::new("badcfg");
    let cfg = s.path("bad.toml");
    std::fs::write(
        &cfg,
        "[listener]\nmax_sessions = 8\nmax_sessions_per_source = 9\n",
    )
    .unwrap();
    let out = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--id",
        "n1",
        "--store",
        &s.path("st"),
        "--config",
        &cfg,
    ]);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
    let err = text(&out.stderr);
    assert!(err.contains("listener.max_sessions_per_source"), "{err}");
    assert!(
        !s.0.join("st").exists(),
        "refused before the store was touched"
    );
}

#[test]
fn serve_with_an_unknown_config_key_exits_naming_it() {
    let s = Scratch::new("unknown");
    let cfg = s.path("bad.toml");
    std::fs::write(&cfg, "[listener]\nmax_sesions = 8\n").unwrap();
    let out = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--id",
        "n1",
        "--store",
        &s.path("st"),
        "--config",
        &cfg,
    ]);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
    assert!(
        text(&out.stderr).contains("max_sesions"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn serve_refuses_a_bad_listen_address_and_a_bad_seed() {
    let s = Scratch::new("flags");
    let out = run(&[
        "serve",
        "--listen",
        "localhost",
        "--id",
        "n1",
        "--store",
        &s.path("st"),
    ]);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
    assert!(
        text(&out.stderr).contains("--listen"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--id",
        "n1",
        "--store",
        &s.path("st"),
        "--seed",
        "nohost",
    ]);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
    assert!(
        text(&out.stderr).contains("--seed"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn fetch_refuses_a_chunk_key_that_is_not_64_hex_digits() {
    let s = Scratch::new("fetch");
    let out = run(&[
        "fetch",
        "abcd",
        "--seed",
        "seed.test:1",
        "-o",
        &s.path("out"),
    ]);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
    assert!(text(&out.stderr).contains("CHUNK"), "{}", text(&out.stderr));
}

#[test]
fn sendfile_without_the_mio_driver_is_refused_naming_the_key() {
    let s = Scratch::new("sendfile-tokio");
    let cfg = s.path("sendfile.toml");
    std::fs::write(&cfg, "[listener]\nbody_path = \"sendfile\"\n").unwrap();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--id",
        "n1",
        "--store",
        &s.path("st"),
        "--config",
        &cfg,
    ];
    let out = run(&args);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
    let err = text(&out.stderr);
    assert!(err.contains("listener.body_path"), "{err}");
    assert!(err.contains("--driver mio"), "{err}");
}

#[test]
fn threads_without_the_mio_driver_and_a_bad_driver_are_refused() {
    let s = Scratch::new("threads-tokio");
    let store = s.path("st");
    let base = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--id",
        "n1",
        "--store",
        &store,
    ];
    let mut with_threads = base.to_vec();
    with_threads.extend(["--threads", "2"]);
    let out = run(&with_threads);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
    assert!(
        text(&out.stderr).contains("--threads"),
        "{}",
        text(&out.stderr)
    );
    let mut bad_driver = base.to_vec();
    bad_driver.extend(["--driver", "uring"]);
    let out = run(&bad_driver);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
    assert!(text(&out.stderr).contains("uring"), "{}", text(&out.stderr));
    let mut zero_threads = base.to_vec();
    zero_threads.extend(["--driver", "mio", "--threads", "0"]);
    let out = run(&zero_threads);
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)));
}
