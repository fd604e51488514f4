//! The `peerblock-node` command line: its arguments ([`Cli`]), their validation into plans
//! ([`ServePlan`], [`FetchPlan`], [`GetPlan`]), the exit codes, and the node id rule.
//!
//! Everything an operator can get wrong is checked here, before anything is bound or
//! served: a bad flag or configuration ends start-up with [`EXIT_USAGE`] and a message
//! naming the flag or key and the rule. The binary (`src/bin/peerblock-node.rs`) parses
//! the command line, builds a plan with [`plan_serve`] / [`plan_fetch`] / [`plan_get`] /
//! [`plan_check`](crate::run::plan_check), and runs it with
//! [`serve_node`](crate::run::serve_node) / [`fetch`](crate::run::fetch) /
//! [`get`](crate::run::get) / [`check`](crate::run::check) ([`crate::run`]). This module
//! imports none of the commands' modules: they import it, for their plans.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};
use peerblock_core::placement::PeerId;
use peerblock_core::roster::{NodeKey, MAX_ADDR_LEN, MAX_ID_LEN};
use peerblock_core::wire::ChunkKey;

use crate::config::{self, NodeConfig, MAX_PARALLEL};
use crate::identity;
use crate::manifest::{self, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE};

pub use crate::error::{NodeError, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_IO, EXIT_OK, EXIT_USAGE};

/// How long `serve` lets in-flight responses finish after SIGINT/SIGTERM before it closes
/// every connection: a 1 MiB block takes milliseconds on a healthy link; a client slower
/// than this is cut (core's own send-progress deadline is 30 s). An orchestrator's grace
/// period before SIGKILL must be longer (docs/deploy.md).
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Domain-separation tag for ids derived from names: a node started with `--id NAME`
/// (anything but 64 hex digits) has the id BLAKE3(`NODE_ID_TAG` ‖ NAME).
pub const NODE_ID_TAG: &[u8] = b"peerblock-node-id-v1\0";

/// `peerblock-node`: a peerblock storage node.
#[derive(Debug, Parser)]
#[command(
    name = "peerblock-node",
    version,
    about = "A peerblock node: serves blocks to peers, imports files as content-addressed blocks, fetches them back from a cluster",
    long_about = None,
    after_help = "Logs go to stderr, filtered by RUST_LOG (default `info`, e.g. RUST_LOG=peerblock_node=debug,peerblock_tokio=debug).\nExit codes: 0 ok, 1 operation failed, 2 usage or configuration error, 3 local I/O error.\nSee docs/node.md."
)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the blocks in a store to peers, and keep a roster of the cluster.
    Serve(ServeArgs),
    /// Split a file into blocks in a store and print its chunk key.
    Import(ImportArgs),
    /// Download a whole imported file from the cluster known through a seed.
    Fetch(FetchArgs),
    /// Fetch one block from one peer (one exchange, for debugging).
    Get(GetArgs),
    /// Verify every chunk of a store (manifests, blocks, missing blocks, stale temporary
    /// files); with --repair quarantine rotten files and, with --seed, re-fetch them.
    Check(CheckArgs),
    /// Run a simulator scenario for real on this machine: one `serve` process per node on
    /// its own 127.1.x.y address, the readers in-process, the simulator's report and JSON.
    /// A scenario whose file starts at the origin runs nginx as that origin (as root, in a
    /// network namespace of its own where tc shapes its upload).
    Swarm(SwarmArgs),
    /// Manage Ed25519 keys: a node's key file, or the cluster authority's key that signs
    /// epochs (docs/security.md, key management).
    #[command(subcommand)]
    Key(KeyCommand),
}

/// `key` subcommands (kept with the key files in [`crate::identity`]).
pub use crate::identity::KeyCommand;

/// Default `--scale`: blocks, file, budgets and rates × 1/8, rounds × 1/8 (at least one):
/// a testnet arm (60 nodes, 64 readers, 13 blocks of 512 KiB at 4 Mbit/s per transfer)
/// runs in well under a minute on two cores.
pub const DEFAULT_SCALE: f64 = 0.125;

/// Default `--max-downloads`: downloads running at once. The testnet arms run at most 192
/// at once, so the bound never binds on them; it keeps a larger scenario from opening more
/// connections than two cores and the file-descriptor limit take.
pub const DEFAULT_MAX_DOWNLOADS: usize = 256;

/// `swarm` arguments.
#[derive(Debug, Args)]
#[command(
    after_help = "Every node is a `peerblock-node serve` process on loopback (kernel-picked ports); all are stopped at exit, on error and on Ctrl-C. Progress goes to stderr, the simulator's report to stdout. See docs/sim.md, \"Simulated vs real\"."
)]
pub struct SwarmArgs {
    /// The simulator scenario (docs/sim.md), parsed and validated by the simulator.
    #[arg(value_name = "SCENARIO.toml")]
    pub scenario: PathBuf,
    /// Seed of the run: placement, NAT'd nodes, start times, reads (default: the
    /// scenario's `seed`).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Multiplies block and file sizes, byte budgets, upload rates and the number of
    /// rounds (at least 1); times stay the scenario's. More than 0, at most 1.
    #[arg(long, value_name = "F", default_value_t = DEFAULT_SCALE)]
    pub scale: f64,
    /// Write the simulator's JSON summary (same keys) here (`-` = stdout instead of the
    /// report).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The nodes' driver (`serve --driver`).
    #[arg(long, value_enum, default_value_t = DriverKind::Tokio)]
    pub driver: DriverKind,
    /// Downloads running at once (a bound for small machines; the testnet arms never
    /// reach the default).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DOWNLOADS)]
    pub max_downloads: usize,
    /// No progress on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Directory for the nodes' stores, config and logs (default: a fresh one under the
    /// temporary directory, removed at exit).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Keep the work directory (stores, node.toml, node-N.log) after the run.
    #[arg(long)]
    pub keep: bool,
}

/// `serve` arguments.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to accept peer connections on (IP:PORT; port 0 picks a free port). An
    /// unspecified address (`0.0.0.0`, `[::]`) needs --advertise.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The address peers are told to dial (HOST:PORT), in the roster and the node's signed
    /// record: where this node is reachable, e.g. `--advertise $(POD_IP):7070` in a pod.
    /// Default: --listen, when it names a specific address (with port 0, the bound port).
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// This node's id. Default: the id its key certifies (SHA-256 of the public key of the
    /// key file), signed. Legacy: 64 hex digits used as is, or any other name, hashed into
    /// an id (BLAKE3 of a fixed tag and the name); such a node cannot sign its record and
    /// peers learn it as unverified.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Store directory, created if missing (layout DIR/CHUNK-HEX/INDEX).
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,
    /// A peer (HOST:PORT) asked for the roster at start; repeat for several. A DNS name
    /// that resolves to several addresses (a Kubernetes headless Service) counts once per
    /// address, each asked, and is resolved again whenever the node knows nobody.
    #[arg(long = "seed", value_name = "ADDR")]
    pub seeds: Vec<String>,
    /// TOML configuration file (tables listener, client, read, roster; see docs/node.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Admin address serving GET /metrics (Prometheus text), GET /healthz (the process is
    /// alive) and GET /readyz (listener bound, store readable, a roster learned when there
    /// are seeds: 200, else 503 with the reasons), e.g. 127.0.0.1:9100 (port 0 picks a
    /// free port; the bound address is printed as `metrics ADDR` on stdout).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Which driver runs the peer server, the roster service and the node's client:
    /// tokio (async tasks) or mio (readiness loops; needed for
    /// `[listener] body_path = "sendfile"`). The metrics endpoint always runs on tokio.
    #[arg(long, value_enum, default_value_t = DriverKind::Tokio)]
    pub driver: DriverKind,
    /// Worker threads of the mio driver (default: the machine's cores; 1 to 256).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: Option<u16>,
}

/// `serve --driver`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DriverKind {
    /// The tokio driver (`peerblock-tokio`).
    Tokio,
    /// The mio driver (`peerblock-mio`).
    Mio,
}

/// `import` arguments.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The file to import.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Store directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,
    /// Block size in bytes, or with a suffix: 256KiB, 4MiB (1 byte to 64 MiB).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BLOCK_SIZE, value_parser = parse_block_size)]
    pub block_size: u64,
}

/// `check` arguments.
#[derive(Debug, Args)]
#[command(
    after_help = "Prints one line per chunk (`CHUNK ok: N blocks`, or what is rotten, missing, quarantined or repaired) and a summary on stdout; progress on stderr.\nExit status: 0 if the store is clean (after repairs), 1 if damage remains, 2 usage, 3 I/O.\n`check` may run while `serve` serves the store: a running node verifies what it serves anyway, and quarantines what it finds rotten.\nSee docs/node.md, `check`."
)]
pub struct CheckArgs {
    /// The store directory to check (never created).
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,
    /// Repair: quarantine rotten files (renamed `.<index>.corrupt`), remove stale
    /// temporary files of processes that are gone, and with --seed re-fetch what is rotten
    /// or missing.
    #[arg(long)]
    pub repair: bool,
    /// A node (HOST:PORT) whose roster introduces the cluster to re-fetch damaged blocks
    /// from (validated, as `fetch` does); repeat for several. Needs --repair.
    #[arg(long = "seed", value_name = "ADDR")]
    pub seeds: Vec<String>,
    /// TOML configuration file (its client, read and roster tables apply to re-fetches).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `fetch` arguments.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// The file's chunk key (64 hex digits, as `import` printed it), or the URL of an
    /// object on a plain HTTP/1.1 or HTTPS server (`http://...`, `https://...`: nginx, an
    /// object store, a presigned link), read in byte ranges through the cluster.
    #[arg(value_name = "CHUNK|URL")]
    pub chunk: String,
    /// A node (HOST:PORT) whose roster introduces the cluster; repeat for several.
    #[arg(long = "seed", value_name = "ADDR", required = true)]
    pub seeds: Vec<String>,
    /// Where to write the file (replaced once it is complete and valid).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// TOML configuration file (its client, read and roster tables apply).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Blocks read at once (1 to 64; default: the read table's parallel, 8).
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,
    /// The file's origin, a node speaking the peer wire form (`http://HOST:PORT`,
    /// typically the node that imported the file). Every GET names it (`X-DART-Origin`):
    /// a holder that misses fetches the block through the block's parent or from the
    /// origin on our behalf, and the read asks the origin itself as its last resort.
    #[arg(long, value_name = "URL")]
    pub origin: Option<String>,
    /// The local address every connection is made from (an IP of this host): on a host
    /// with several addresses, the one peers' per-source limits see.
    #[arg(long, value_name = "IP")]
    pub bind: Option<std::net::IpAddr>,
    /// With a URL: the block size the object is read in (1 byte to 64 MiB; suffixes as
    /// `import`). Every reader of the object must use the same one to share its blocks.
    #[arg(long, value_name = "N", value_parser = parse_block_size)]
    pub block_size: Option<u64>,
    /// With a URL: the whole file's SHA-256 (64 hex digits), checked before the output
    /// is moved into place. Without a hash only block lengths are checked.
    #[arg(long, value_name = "HEX", conflicts_with = "blake3")]
    pub sha256: Option<String>,
    /// With a URL: the whole file's BLAKE3 (64 hex digits), checked as --sha256 is.
    #[arg(long, value_name = "HEX")]
    pub blake3: Option<String>,
    /// With an https:// URL: a PEM file of CA certificates trusted besides the system's.
    #[arg(long, value_name = "FILE")]
    pub origin_ca: Option<PathBuf>,
}

/// `get` arguments.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The peer to ask (HOST:PORT).
    #[arg(long, value_name = "ADDR")]
    pub peer: String,
    /// The chunk key (hex).
    #[arg(value_name = "CHUNK")]
    pub chunk: String,
    /// The block index (0 is the manifest).
    #[arg(value_name = "INDEX")]
    pub index: u64,
    /// The block's exact length: the body is validated against it and cut at LEN + 1.
    #[arg(long, value_name = "LEN")]
    pub expected: Option<u64>,
    /// Write the block here (default: stdout).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// TOML configuration file (its client table applies).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// `X-DART-Origin`: the origin URL (`http://HOST:PORT`) a relay-capable peer may fetch
    /// the block from on our behalf when it does not hold it.
    #[arg(long, value_name = "URL")]
    pub origin: Option<String>,
    /// `X-DART-Hop`: the relay depth to send (a peer relays only below its bound).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub hop: u32,
}

/// Parses a `--block-size`: decimal bytes, optionally with `KiB`, `MiB` (or `K`, `M`),
/// 1 byte to [`MAX_BLOCK_SIZE`].
pub fn parse_block_size(text: &str) -> Result<u64, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size: use bytes (65536) or 256KiB, 4MiB"))?;
    let mult = match unit {
        "" => 1,
        "K" | "KiB" | "k" => 1024,
        "M" | "MiB" => 1024 * 1024,
        _ => {
            return Err(format!(
                "{text:?} has unit {unit:?}: use no unit (bytes), KiB or MiB"
            ))
        }
    };
    let size = n
        .checked_mul(mult)
        .ok_or_else(|| format!("{text:?} is too large: at most 64MiB"))?;
    manifest::check_block_size(size).map_err(|e| e.to_string())?;
    Ok(size)
}

/// The node id of `--id`: 64 hex digits are used as is; any other non-empty name (at most
/// 128 bytes) is turned into BLAKE3([`NODE_ID_TAG`] ‖ name). Returns the id and whether it
/// was derived from a name.
pub fn node_id(id: &str) -> Result<(PeerId, bool), NodeError> {
    if let Ok(peer) = id.parse::<PeerId>() {
        return Ok((peer, false));
    }
    if id.is_empty() || id.len() > MAX_ID_LEN || id.chars().any(char::is_control) {
        return Err(NodeError::usage(
            "--id",
            format!(
                "{:?} is not an id: give 64 hex digits or a name of 1 to {MAX_ID_LEN} bytes without control characters",
                id.chars().take(40).collect::<String>()
            ),
        ));
    }
    let mut h = blake3::Hasher::new();
    h.update(NODE_ID_TAG);
    h.update(id.as_bytes());
    Ok((PeerId(*h.finalize().as_bytes()), true))
}

/// Checks a peer address (`HOST:PORT`, port 1 to 65535, at most 272 bytes).
pub fn check_peer_addr(flag: &'static str, addr: &str) -> Result<(), NodeError> {
    let bad = |why: &str| NodeError::usage(flag, format!("{addr:?} is not HOST:PORT: {why}"));
    if addr.len() > MAX_ADDR_LEN {
        return Err(bad("too long"));
    }
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("empty or unusable host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("port must be 1 to 65535")),
    }
}

/// Parses a chunk key of 64 hex digits (a BLAKE3 chunk key), for `fetch`.
pub fn parse_chunk(flag: &'static str, text: &str) -> Result<ChunkKey, NodeError> {
    let key = ChunkKey::parse_hex(text.as_bytes())
        .map_err(|e| NodeError::usage(flag, format!("{text:?} is not a chunk key: {e}")))?;
    Ok(key)
}

fn load_config(path: Option<&Path>) -> Result<NodeConfig, NodeError> {
    Ok(match path {
        Some(p) => NodeConfig::from_file(p)?,
        None => NodeConfig::default(),
    })
}

/// Everything `serve` needs, validated.
#[derive(Clone, Debug)]
pub struct ServePlan {
    /// The address to bind for peers.
    pub listen: SocketAddr,
    /// This node's id.
    pub peer_id: PeerId,
    /// Whether `peer_id` was derived from a name (`--id` was not 64 hex digits).
    pub id_derived: bool,
    /// The id as the server announces it (`X-DART-Node`, roster): 64 lower-case hex digits.
    pub node_id: String,
    /// The address advertised in the roster: `--advertise`, else `--listen` as given
    /// (with port 0, replace it with the bound address once bound: see
    /// [`advertise_given`](Self::advertise_given)).
    pub advertised_addr: String,
    /// Whether `--advertise` named the advertised address (then it is used as is, whatever
    /// port the listener bound).
    pub advertise_given: bool,
    /// The store directory (exists).
    pub store: PathBuf,
    /// Roster seeds for the refresh: `--seed` expanded by [`expand_seeds`] (every address
    /// a name resolved to, then the name).
    pub seeds: Vec<String>,
    /// Every address the seeds named or resolved to at start (names left out), for
    /// readiness: a node whose seeds are all its own address has nobody to learn from.
    pub seed_addrs: Vec<String>,
    /// Whether some `--seed` name resolved to no address at start.
    pub seeds_unresolved: bool,
    /// The admin address for `/metrics`, if any.
    pub metrics: Option<SocketAddr>,
    /// The validated configuration.
    pub config: NodeConfig,
    /// The node's key (read from `key_file`, or created there).
    pub key: NodeKey,
    /// The key file (`[roster] key_file`, default `STORE/node.key`).
    pub key_file: PathBuf,
    /// Whether the node signs its record: its id is the one its key certifies (`--id`
    /// omitted, or equal to it).
    pub signed: bool,
    /// The driver.
    pub driver: DriverKind,
    /// The mio driver's worker threads.
    pub threads: usize,
}

/// Validates `serve`'s arguments and configuration, creates the store directory if it is
/// missing and reads or creates the node's key file. Binds nothing.
pub fn plan_serve(args: &ServeArgs) -> Result<ServePlan, NodeError> {
    plan_serve_with(args, &SystemResolver)
}

/// [`plan_serve`] with the resolver that turns `--seed` names into addresses (the
/// system's, [`SystemResolver`], for the binary; a fixed table in tests).
pub fn plan_serve_with(
    args: &ServeArgs,
    resolver: &dyn SeedResolver,
) -> Result<ServePlan, NodeError> {
    let advertised_addr = advertised_addr(args.listen, args.advertise.as_deref())?;
    let config = load_config(args.config.as_deref())?;
    ensure_store(&args.store)?;
    let key_file = config
        .roster
        .key_file
        .clone()
        .unwrap_or_else(|| args.store.join(identity::DEFAULT_KEY_FILE));
    let (key, created) = identity::load_or_create_key(&key_file)?;
    if created {
        tracing::info!(key_file = %key_file.display(), id = %key.id(), "created the node key");
    }
    let (peer_id, id_derived) = match &args.id {
        Some(id) => node_id(id)?,
        None => (
            key.id()
                .parse::<PeerId>()
                .expect("a key-derived id is 64 hex digits"),
            false,
        ),
    };
    let signed = peer_id.to_hex() == key.id();
    if !signed {
        tracing::warn!(id = %peer_id.to_hex(), "--id is not the id the node key certifies: the node's record is unsigned and peers learn it as unverified");
    }
    for seed in &args.seeds {
        check_peer_addr("--seed", seed)?;
    }
    config
        .refresh_config(args.seeds.clone())
        .validate()
        .map_err(|e| config::refresh_error(&e))?;
    let expanded = expand_seeds(&args.seeds, resolver);
    let node_id = peer_id.to_hex();
    config
        .server_config(node_id.clone(), advertised_addr.clone())
        .validate()
        .map_err(|e| config::server_error(&e))?;
    if let Some(m) = args.metrics {
        if m == args.listen && m.port() != 0 {
            return Err(NodeError::usage(
                "--metrics",
                format!("{m} is the peer address (--listen): the admin address must be another"),
            ));
        }
    }
    if config.listener.body_path == crate::config::BodyPathKey::Sendfile
        && args.driver != DriverKind::Mio
    {
        return Err(NodeError::usage(
            "listener.body_path",
            "\"sendfile\" is the mio driver's zero-copy path: add --driver mio".to_owned(),
        ));
    }
    if args.driver == DriverKind::Mio {
        for (key, rate) in [
            (
                "listener.upload_bytes_per_second",
                config.listener.upload_bytes_per_second,
            ),
            (
                "listener.connection_upload_bytes_per_second",
                config.listener.connection_upload_bytes_per_second,
            ),
        ] {
            if rate != 0 {
                return Err(NodeError::usage(
                    key,
                    "upload pacing is implemented in the tokio driver only: use --driver tokio or set 0"
                        .to_owned(),
                ));
            }
        }
        if config.listener.when_full == crate::config::WhenFullKey::Silent {
            return Err(NodeError::usage(
                "listener.when_full",
                "\"silent\" is implemented in the tokio driver only: use --driver tokio".to_owned(),
            ));
        }
    }
    if args.threads.is_some() && args.driver != DriverKind::Mio {
        return Err(NodeError::usage(
            "--threads",
            "sets the mio driver's workers: add --driver mio".to_owned(),
        ));
    }
    Ok(ServePlan {
        listen: args.listen,
        peer_id,
        id_derived,
        node_id,
        advertised_addr,
        advertise_given: args.advertise.is_some(),
        store: args.store.clone(),
        seeds: expanded.seeds,
        seed_addrs: expanded.addrs,
        seeds_unresolved: expanded.unresolved,
        metrics: args.metrics,
        config,
        key,
        key_file,
        signed,
        driver: args.driver,
        threads: args
            .threads
            .map_or_else(peerblock_mio::default_threads, usize::from),
    })
}

/// The address `serve` advertises: `--advertise` when given (checked: `HOST:PORT`, port
/// 1 to 65535, not an unspecified IP), else `--listen` when it names a specific address.
/// An unspecified `--listen` (`0.0.0.0`, `[::]`) without `--advertise` is refused: it
/// accepts on every address but names none a peer could dial.
pub fn advertised_addr(listen: SocketAddr, advertise: Option<&str>) -> Result<String, NodeError> {
    let Some(advertise) = advertise else {
        if listen.ip().is_unspecified() {
            return Err(NodeError::usage(
                "--listen",
                format!(
                    "{listen} accepts on every address but names none peers can dial: add --advertise HOST:PORT, the address peers reach this node at (in a pod: --advertise $(POD_IP):{})",
                    listen.port()
                ),
            ));
        }
        return Ok(listen.to_string());
    };
    check_peer_addr("--advertise", advertise)?;
    if let Ok(addr) = advertise.parse::<SocketAddr>() {
        if addr.ip().is_unspecified() {
            return Err(NodeError::usage(
                "--advertise",
                format!("{advertise:?} is an unspecified address: give the address peers dial"),
            ));
        }
    }
    Ok(advertise.to_owned())
}

/// Turns a seed (`HOST:PORT`) into socket addresses: DNS (or a hosts file) for a name.
pub trait SeedResolver {
    /// Every address `seed` stands for, in the resolver's order (empty or an error when it
    /// resolves to none).
    fn resolve(&self, seed: &str) -> std::io::Result<Vec<SocketAddr>>;
}

/// The system's resolver (`getaddrinfo` through std's `ToSocketAddrs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl SeedResolver for SystemResolver {
    fn resolve(&self, seed: &str) -> std::io::Result<Vec<SocketAddr>> {
        use std::net::ToSocketAddrs;
        Ok(seed.to_socket_addrs()?.collect())
    }
}

/// `--seed` values expanded for the roster refresh ([`expand_seeds`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpandedSeeds {
    /// The refresh's seed list: each literal address as given; for each name, every
    /// address it resolved to, then the name itself.
    pub seeds: Vec<String>,
    /// The addresses alone (literals and resolved), without names.
    pub addrs: Vec<String>,
    /// Whether some name resolved to no address.
    pub unresolved: bool,
}

/// Expands `--seed` values: an `IP:PORT` stays as it is; a name (a Kubernetes headless
/// Service's, say, which resolves to one address per ready pod) becomes every address it
/// resolves to, each a seed the refresh may ask, followed by the name itself, which the
/// client resolves again whenever the refresh asks it (a round while the node knows
/// nobody: the pods behind the name change). A name that does not resolve now is kept
/// (with a warning) for the same reason. Duplicates are dropped and the list is bounded
/// by core's [`MAX_REFRESH_SEEDS`](peerblock_core::roster::MAX_REFRESH_SEEDS): the names
/// given always fit (they were checked against it), resolved addresses past it are left
/// out with a warning.
pub fn expand_seeds(seeds: &[String], resolver: &dyn SeedResolver) -> ExpandedSeeds {
    use peerblock_core::roster::MAX_REFRESH_SEEDS;
    let mut out = ExpandedSeeds::default();
    let mut room = MAX_REFRESH_SEEDS.saturating_sub(seeds.len());
    let mut dropped = 0usize;
    for seed in seeds {
        if seed.parse::<SocketAddr>().is_ok() {
            if !out.seeds.contains(seed) {
                out.seeds.push(seed.clone());
                out.addrs.push(seed.clone());
            }
            continue;
        }
        match resolver.resolve(seed) {
            Ok(addrs) if !addrs.is_empty() => {
                let mut named = Vec::new();
                for addr in addrs {
                    let addr = addr.to_string();
                    if out.seeds.contains(&addr) || named.contains(&addr) {
                        continue;
                    }
                    if !out.addrs.contains(&addr) {
                        out.addrs.push(addr.clone());
                    }
                    if room == 0 {
                        dropped += 1;
                        continue;
                    }
                    room -= 1;
                    named.push(addr);
                }
                tracing::info!(seed = %seed, addresses = ?named, "seed name resolved");
                out.seeds.extend(named);
            }
            Ok(_) => {
                out.unresolved = true;
                tracing::warn!(seed = %seed, "seed name resolved to no address: asked again whenever the node knows nobody");
            }
            Err(e) => {
                out.unresolved = true;
                tracing::warn!(seed = %seed, error = %e, "seed name does not resolve: asked again whenever the node knows nobody");
            }
        }
        if !out.seeds.contains(seed) {
            out.seeds.push(seed.clone());
        }
    }
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "seed names resolved to more addresses than the refresh keeps ({MAX_REFRESH_SEEDS}): the rest are learned from rosters"
        );
    }
    out
}

/// Creates the store directory if missing; refuses a path that is not a directory.
pub fn ensure_store(store: &Path) -> Result<(), NodeError> {
    if store.exists() && !store.is_dir() {
        return Err(NodeError::usage(
            "--store",
            format!("{} exists and is not a directory", store.display()),
        ));
    }
    std::fs::create_dir_all(store).map_err(|source| NodeError::Io {
        what: "cannot create store directory",
        path: store.display().to_string(),
        source,
    })
}

/// Everything `fetch` needs, validated.
#[derive(Clone, Debug)]
pub struct FetchPlan {
    /// The file's chunk key.
    pub chunk: ChunkKey,
    /// Roster seeds (`--seed`).
    pub seeds: Vec<String>,
    /// Where the file goes.
    pub output: PathBuf,
    /// Blocks read at once.
    pub parallel: usize,
    /// The origin (`--origin`), an `http://HOST:PORT` URL.
    pub origin: Option<String>,
    /// The source address of every connection (`--bind`); `None`: the kernel's choice.
    pub bind: Option<std::net::IpAddr>,
    /// `fetch URL`: the object to read by ranges (then `chunk` is unused: the object's
    /// key is derived from its identity once probed).
    pub object: Option<ObjectPlan>,
    /// The validated configuration.
    pub config: NodeConfig,
}

/// The whole-file hash `fetch URL` checks before the rename.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileHash {
    /// `--sha256`.
    Sha256([u8; 32]),
    /// `--blake3`.
    Blake3([u8; 32]),
}

/// `fetch URL`'s part of the plan.
#[derive(Clone, Debug)]
pub struct ObjectPlan {
    /// The object's URL.
    pub url: peerblock_common::object::ObjectUrl,
    /// The block size (`--block-size`, default 1 MiB).
    pub block_size: u64,
    /// The whole-file hash, if given.
    pub hash: Option<FileHash>,
    /// `--origin-ca`.
    pub origin_ca: Option<PathBuf>,
}

fn parse_hash(flag: &'static str, text: &str) -> Result<[u8; 32], NodeError> {
    let bad = || NodeError::usage(flag, format!("{text:?} is not 64 hex digits"));
    if text.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
        out[i] = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// `fetch URL`'s plan, or `None` when `args.chunk` is not a URL.
fn plan_object(args: &FetchArgs) -> Result<Option<ObjectPlan>, NodeError> {
    let lower = args.chunk.to_ascii_lowercase();
    let is_url = lower.starts_with("http://") || lower.starts_with("https://");
    if !is_url {
        for (flag, given) in [
            ("--block-size", args.block_size.is_some()),
            ("--sha256", args.sha256.is_some()),
            ("--blake3", args.blake3.is_some()),
            ("--origin-ca", args.origin_ca.is_some()),
        ] {
            if given {
                return Err(NodeError::usage(flag, "only with a URL (fetch URL ...)"));
            }
        }
        return Ok(None);
    }
    if args.origin.is_some() {
        return Err(NodeError::usage(
            "--origin",
            "not with a URL: the URL is the origin",
        ));
    }
    if args.chunk.contains('#') {
        return Err(NodeError::usage(
            "URL",
            format!(
                "{:?} has a fragment: give the object's URL without one",
                args.chunk
            ),
        ));
    }
    let url = peerblock_common::object::ObjectUrl::parse(&args.chunk)
        .map_err(|e| NodeError::usage("URL", e.to_string()))?;
    let hash = match (&args.sha256, &args.blake3) {
        (Some(h), _) => Some(FileHash::Sha256(parse_hash("--sha256", h)?)),
        (None, Some(h)) => Some(FileHash::Blake3(parse_hash("--blake3", h)?)),
        (None, None) => None,
    };
    if let Some(ca) = &args.origin_ca {
        if !ca.is_file() {
            return Err(NodeError::usage(
                "--origin-ca",
                format!("{} is not a readable file", ca.display()),
            ));
        }
    }
    Ok(Some(ObjectPlan {
        url,
        block_size: args.block_size.unwrap_or(DEFAULT_BLOCK_SIZE),
        hash,
        origin_ca: args.origin_ca.clone(),
    }))
}

/// Validates `fetch`'s arguments and configuration.
pub fn plan_fetch(args: &FetchArgs) -> Result<FetchPlan, NodeError> {
    let config = load_config(args.config.as_deref())?;
    let object = plan_object(args)?;
    let chunk = match &object {
        Some(_) => ChunkKey::from_array([0; 32]),
        None => parse_chunk("CHUNK", &args.chunk)?,
    };
    if chunk.as_bytes().len() != 32 {
        return Err(NodeError::usage(
            "CHUNK",
            format!(
                "{:?} has {} hex digits: a file's chunk key has 64",
                args.chunk,
                args.chunk.len()
            ),
        ));
    }
    for seed in &args.seeds {
        check_peer_addr("--seed", seed)?;
    }
    config
        .refresh_config(args.seeds.clone())
        .validate()
        .map_err(|e| config::refresh_error(&e))?;
    check_output(&args.output)?;
    let parallel = args.parallel.unwrap_or(config.read.parallel);
    if parallel == 0 || parallel > MAX_PARALLEL {
        return Err(NodeError::usage(
            "--parallel",
            format!("{parallel} is out of range: 1 to {MAX_PARALLEL}"),
        ));
    }
    if let Some(origin) = &args.origin {
        if crate::relay::origin_authority(origin).is_none() {
            return Err(NodeError::usage(
                "--origin",
                format!("{origin:?} is not an http://HOST:PORT URL of a node speaking the peer wire form"),
            ));
        }
    }
    Ok(FetchPlan {
        chunk,
        seeds: args.seeds.clone(),
        output: args.output.clone(),
        parallel,
        origin: args.origin.clone(),
        bind: args.bind,
        object,
        config,
    })
}

/// An output path must name a regular file (or a path that does not exist yet) in an
/// existing directory: `fetch` replaces it by renaming a verified temporary file over it,
/// which would replace a device node, a FIFO or a socket with a plain file.
pub fn check_output(output: &Path) -> Result<(), NodeError> {
    if let Ok(meta) = std::fs::metadata(output) {
        if !meta.is_file() {
            return Err(NodeError::usage(
                "-o",
                format!(
                    "{} is {}: fetch writes only regular files (or a new path)",
                    output.display(),
                    file_kind(&meta)
                ),
            ));
        }
    }
    let parent = output.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        if !parent.is_dir() {
            return Err(NodeError::usage(
                "-o",
                format!("directory {} does not exist", parent.display()),
            ));
        }
    }
    Ok(())
}

/// What kind of file `meta` describes, in words, for an error message.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Everything `get` needs, validated.
#[derive(Clone, Debug)]
pub struct GetPlan {
    /// The peer to ask.
    pub peer: String,
    /// The chunk key.
    pub chunk: ChunkKey,
    /// The block index.
    pub index: u64,
    /// The block's exact length, if known.
    pub expected: Option<u64>,
    /// Where the block goes (`None`: stdout).
    pub output: Option<PathBuf>,
    /// `X-DART-Origin` to send, if any.
    pub origin: Option<String>,
    /// `X-DART-Hop` to send.
    pub hop: u32,
    /// The validated configuration.
    pub config: NodeConfig,
}

/// Validates `get`'s arguments.
pub fn plan_get(args: &GetArgs) -> Result<GetPlan, NodeError> {
    let config = load_config(args.config.as_deref())?;
    check_peer_addr("--peer", &args.peer)?;
    let chunk = parse_chunk("CHUNK", &args.chunk)?;
    if let Some(len) = args.expected {
        let max = MAX_BLOCK_SIZE.max(manifest::MAX_MANIFEST_BYTES as u64);
        if len > max {
            return Err(NodeError::usage(
                "--expected",
                format!("{len} is above the largest block ({max} bytes)"),
            ));
        }
    }
    if let Some(o) = &args.output {
        check_output(o)?;
    }
    Ok(GetPlan {
        peer: args.peer.clone(),
        chunk,
        index: args.index,
        expected: args.expected,
        output: args.output.clone(),
        origin: args.origin.clone(),
        hop: args.hop,
        config,
    })
}
