//! Running a swarm: [`swarm`] brings the cluster up, runs the fault timeline and the
//! readers, and prints the simulator's report for what happened.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use peerblock_core::bytes::Bytes;
use peerblock_core::load::{KeyCounter, KeyCounterConfig};
use peerblock_core::rng::child_seed;
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use sim::metrics::{Metrics as SimMetrics, Summary};
use sim::model::content::Content;
use sim::net::LatencyModel;
use sim::scenario::{Transport, WhenFull};
use sim::world::RunResult;

use crate::metrics::Metrics;
use crate::node::NodeError;
use crate::source::FileStore;
use crate::swarm_origin;

use super::cluster::{blackhole, start_nodes, wait_members};
use super::plan::block_bytes;
use super::reads::{exchange_config, run_downloads};
use super::*;

fn note(quiet: bool, line: &str) {
    if !quiet {
        eprintln!("swarm: {line}");
    }
}

/// `swarm`: runs the plan; prints the report (and writes the JSON summary).
pub async fn swarm(plan: SwarmPlan) -> Result<(), NodeError> {
    let wall = Instant::now();
    let s = &plan.scenario;
    let quiet = plan.quiet;
    let origin_run = plan.nginx.is_some();
    if origin_run && !swarm_origin::in_namespace() {
        if swarm_origin::can_shape() {
            note(quiet, "file.placement = \"origin\": running again in a network namespace of its own (unshare -n, loopback only), where tc shapes nginx's upload to origin.upload_mbps");
            let code = swarm_origin::rerun_in_namespace().await?;
            std::process::exit(code);
        }
        note(quiet, "origin.upload_mbps is not applied: shaping nginx's upload needs root, unshare, ip and tc; nginx runs unshaped");
    }
    // Outputs first: a bad path costs no run.
    let mut json_out: Option<std::fs::File> = match &plan.json {
        Some(p) if p.as_os_str() != "-" => {
            Some(std::fs::File::create(p).map_err(|e| NodeError::Io {
                what: "cannot create --json",
                path: p.display().to_string(),
                source: e,
            })?)
        }
        _ => None,
    };
    let json_stdout = plan.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if s.network.transport == Transport::Multiplexed {
        note(quiet, "transport = \"multiplexed\" runs on peerblock's HTTP/1.1 (one request per connection at a time); max_channels and reserve_kib do not apply");
    }
    if s.listener.when_full == WhenFull::Silent {
        note(quiet, "when_full = \"silent\": the nodes stop accepting while every session is taken (accept queue of 4, then dials go unanswered) and close a request they would refuse, without an answer");
    }
    let seed = plan.seed;
    let placement = s.cluster.placement_seed.unwrap_or(seed);
    let content = Content::new(
        s.cluster.nodes,
        s.blocks(),
        s.cluster.close_group as usize,
        child_seed(placement, "node-ids"),
        child_seed(placement, "block-keys"),
    );
    let nat = sim::world::nat_nodes(s, seed);
    let steps = sim::faults::timeline(&s.faults, &content);
    let holders: Vec<Vec<u32>> = (0..s.blocks())
        .map(|b| content.holders(b).to_vec())
        .collect();
    let blocks: Vec<Bytes> = plan
        .scaled
        .block_len
        .iter()
        .zip(&content.keys)
        .map(|(len, key)| block_bytes(key, *len))
        .collect();
    let mut chunk = [0u8; 32];
    chunk.copy_from_slice(
        blake3::Hasher::new()
            .update(s.name.as_bytes())
            .update(&seed.to_le_bytes())
            .finalize()
            .as_bytes(),
    );
    let mut chunk = ChunkKey::from_array(chunk);
    let mut content = content;
    let mut holders = holders;
    let clock = Clock::new(Instant::now());

    // The origin: nginx serving the blocks as one object, the placement by its keys.
    let mut origin = None;
    if let Some(nginx) = &plan.nginx {
        let port = swarm_origin::origin_port()?;
        if swarm_origin::in_namespace() {
            swarm_origin::shape_origin(port, plan.scaled.origin_bytes_per_second)?;
        }
        std::fs::create_dir_all(&plan.work_dir).map_err(|e| {
            NodeError::Failed(format!("cannot create {}: {e}", plan.work_dir.display()))
        })?;
        let file: Vec<u8> = blocks.iter().flat_map(|b| b.iter().copied()).collect();
        let server =
            swarm_origin::OriginServer::start(nginx, &plan.work_dir.join("origin"), port, &file)
                .await?;
        drop(file);
        let url = peerblock_common::object::ObjectUrl::parse(&server.url)
            .map_err(|e| NodeError::Failed(format!("origin URL {}: {e}", server.url)))?;
        let client = crate::origin::ObjectClient::new(exchange_config(s), clock, None);
        let (size, validator) = crate::origin::probe(&client, &url)
            .await
            .map_err(|p| NodeError::Failed(format!("origin {}: {p}", server.url)))?;
        let identity = peerblock_common::object::ObjectIdentity::new(
            url,
            size,
            validator,
            plan.scaled.block_len[0],
        )
        .map_err(|e| NodeError::Failed(format!("origin {}: {e}", server.url)))?;
        if let Some(b) = (0..blocks.len()).find(|&b| {
            identity.block_range(b as u64).map(|r| r.1) != Some(plan.scaled.block_len[b])
        }) {
            return Err(NodeError::Failed(format!(
                "origin: block {b} of {} bytes is not the object's block {b} (blocks of {} bytes): the scenario's blocks are not of one size",
                plan.scaled.block_len[b], plan.scaled.block_len[0]
            )));
        }
        content = swarm_origin::object_content(&content, &identity);
        holders = (0..s.blocks())
            .map(|b| content.holders(b).to_vec())
            .collect();
        chunk = identity.key();
        let identity = Arc::new(identity);
        note(
            quiet,
            &format!(
                "origin nginx at {} ({size} bytes, ETag {}), {} bytes/s{}",
                server.url,
                identity.validator,
                plan.scaled.origin_bytes_per_second,
                if swarm_origin::in_namespace() {
                    ""
                } else {
                    " not applied"
                }
            ),
        );
        origin = Some(ObjectRun {
            header: Arc::from(identity.origin_header()),
            fetch: crate::origin::ObjectOrigin::new(client, identity.clone()),
            identity,
            server,
        });
    }

    // Stores and configs.
    let io = |what: &'static str, p: &Path, e: std::io::Error| NodeError::Io {
        what,
        path: p.display().to_string(),
        source: e,
    };
    let work = WorkDir {
        path: plan.work_dir.clone(),
        keep: plan.keep,
    };
    std::fs::create_dir_all(&work.path).map_err(|e| io("cannot create", &work.path, e))?;
    let config_path = work.path.join("node.toml");
    std::fs::write(&config_path, &plan.node_config)
        .map_err(|e| io("cannot write", &config_path, e))?;
    let mut nodes = Vec::with_capacity(s.cluster.nodes as usize);
    for i in 0..s.cluster.nodes {
        let store = work.path.join(format!("node-{i}"));
        let fs = FileStore::new(&store, MAX_BLOCK);
        std::fs::create_dir_all(&store).map_err(|e| io("cannot create", &store, e))?;
        for (b, h) in holders.iter().enumerate() {
            // At the origin only: no node holds a block at the start.
            if h.contains(&i) && !origin_run {
                let path = BlockPath {
                    key: chunk,
                    index: b as u64 + 1,
                };
                fs.put_blocking(&path, &blocks[b])
                    .map_err(|e| NodeError::Failed(format!("node {i} store: {e}")))?;
            }
        }
        nodes.push(NodeProc {
            index: i,
            id_hex: content.ids[i as usize].to_hex(),
            store,
            config: config_path.clone(),
            log: work.path.join(format!("node-{i}.log")),
            listen: SocketAddr::new(IpAddr::V4(node_ip(i)), 0),
            child: None,
            seed: None,
            metrics: origin_run,
            metrics_addr: None,
            members: Arc::default(),
        });
    }

    // Node processes, all at once.
    note(
        quiet,
        &format!(
            "starting {} node processes ({} behind NAT) on 127.1.0.0/16, work dir {}",
            nodes.len(),
            s.cluster.nat_nodes,
            work.path.display()
        ),
    );
    let health: Arc<Vec<AtomicU8>> =
        Arc::new((0..nodes.len()).map(|_| AtomicU8::new(UP)).collect());
    let mut cluster = Cluster {
        exe: plan.exe.clone(),
        driver: plan.driver,
        nodes: Vec::new(),
        _blackholes: Vec::new(),
        health: health.clone(),
    };
    let interrupted = crate::cmd::stop_signal();
    let started = async {
        if !origin_run || nodes.is_empty() {
            return start_nodes(&plan, nodes, &mut cluster).await;
        }
        // Node 0 first, then every other seeded with it; the run starts when every node
        // knows every member (parents are by each node's own roster).
        let mut rest = nodes;
        let first = rest.remove(0);
        start_nodes(&plan, vec![first], &mut cluster).await?;
        let seed = cluster.nodes[0].listen;
        for n in &mut rest {
            n.seed = Some(seed);
        }
        start_nodes(&plan, rest, &mut cluster).await?;
        wait_members(&cluster).await
    };
    tokio::pin!(interrupted);
    tokio::select! {
        r = started => r?,
        () = &mut interrupted => {
            cluster.stop().await;
            return Err(NodeError::Failed("interrupted while starting the nodes".into()));
        }
    }
    let mut addrs: Vec<String> = cluster.nodes.iter().map(|n| n.listen.to_string()).collect();
    let nat_ips: Vec<(usize, Ipv4Addr)> = (0..addrs.len())
        .filter(|&i| nat[i])
        .map(|i| (i, node_ip(i as u32)))
        .collect();
    let holes = tokio::task::spawn_blocking(move || {
        std::thread::scope(|scope| {
            let handles: Vec<_> = nat_ips
                .iter()
                .map(|&(i, ip)| scope.spawn(move || blackhole(ip).map(|b| (i, b))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("blackhole thread"))
                .collect::<Result<Vec<_>, _>>()
        })
    })
    .await
    .map_err(|e| NodeError::Failed(format!("blackholes: {e}")))??;
    for (i, hole) in holes {
        addrs[i] = hole.addr.to_string();
        cluster._blackholes.push(hole);
    }
    note(
        quiet,
        &format!(
            "{} nodes up in {:.1} s; scale {} (blocks of {} bytes, {} bytes/s per node, {} per connection), {} round(s) of {} readers",
            cluster.nodes.len(),
            wall.elapsed().as_secs_f64(),
            plan.scale,
            plan.scaled.block_len[0],
            plan.scaled.upload_bytes_per_second,
            plan.scaled.connection_bytes_per_second,
            plan.scaled.rounds,
            s.readers.count
        ),
    );

    let hints = s.client.lookup_load_hints.then(|| Hints {
        counters: Mutex::new(
            (0..s.cluster.nodes)
                .map(|_| KeyCounter::new(KeyCounterConfig::default()).expect("default config"))
                .collect(),
        ),
    });
    let rounds = plan.scaled.rounds;
    let world = Arc::new(World {
        s: s.clone(),
        seed,
        scale: plan.scale,
        latency: LatencyModel::new(s.network.latency.clone(), child_seed(seed, "latency")),
        content,
        nat,
        health,
        node_of_addr: addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (a.clone(), i as u32))
            .collect(),
        addrs,
        chunk,
        blocks,
        hints,
        clock,
        metrics: Metrics::new(),
        sim: Mutex::new(SimMetrics::new(
            s.cluster.nodes as usize,
            s.blocks() as usize,
            rounds as usize,
        )),
        reads: AtomicU64::new(0),
        downloads_done: AtomicU64::new(0),
        downloads_completed: AtomicU64::new(0),
        round_ends: Mutex::new(vec![None; rounds as usize]),
        origin,
    });

    // Faults on their own task; it hands the cluster back when told to stop.
    let t0 = tokio::time::Instant::now();
    let t0_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let (stop_faults, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let faults = tokio::spawn(async move {
        for step in &steps {
            let at = t0 + Duration::from_nanos(step.at.as_nanos());
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                _ = &mut stopped => return (cluster, Ok(())),
            }
            if let Err(e) = cluster.apply(step).await {
                return (cluster, Err(e));
            }
        }
        let _ = stopped.await;
        (cluster, Ok(()))
    });

    // The downloads.
    let total = u64::from(s.readers.count) * u64::from(rounds);
    let runs = run_downloads(&world, &plan, t0, rounds);
    let progress = async {
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.tick().await;
        loop {
            tick.tick().await;
            note(
                quiet,
                &format!(
                    "{:.0} s: downloads {}/{total} ended, {} completed",
                    t0.elapsed().as_secs_f64(),
                    world.downloads_done.load(Ordering::Relaxed),
                    world.downloads_completed.load(Ordering::Relaxed)
                ),
            );
        }
    };
    let outcome = tokio::select! {
        r = runs => r,
        () = progress => Ok(()),
        () = &mut interrupted => Err(NodeError::Failed("interrupted".into())),
    };
    let run_seconds = t0.elapsed().as_secs_f64();
    let _ = stop_faults.send(());
    let (mut cluster, fault_result) = faults
        .await
        .map_err(|e| NodeError::Failed(format!("fault task: {e}")))?;
    // The relays' counters, before the nodes stop.
    let mut relay = None;
    if let Some(o) = &world.origin {
        let mut sums: BTreeMap<String, f64> = BTreeMap::new();
        for n in &cluster.nodes {
            if let (Some(addr), true) = (n.metrics_addr, n.child.is_some()) {
                match swarm_origin::scrape(addr).await {
                    Ok(m) => {
                        for (k, v) in m {
                            *sums.entry(k).or_insert(0.0) += v;
                        }
                    }
                    Err(e) => note(quiet, &format!("node {}: {e}", n.index)),
                }
            }
        }
        let r = &s.readers;
        let starts: Vec<f64> = (0..rounds)
            .map(|k| t0_unix + r.first_round_at_secs + f64::from(k) * r.round_interval_secs)
            .collect();
        let spans: Vec<u64> = world
            .round_ends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .enumerate()
            .map(|(k, end)| {
                let start = t0.into_std()
                    + Duration::from_secs_f64(
                        r.first_round_at_secs + k as f64 * r.round_interval_secs,
                    );
                end.map_or(0, |e| e.saturating_duration_since(start).as_nanos() as u64)
            })
            .collect();
        let file: u64 = (0..s.blocks()).map(|b| s.block_bytes(b)).sum();
        relay = Some(
            swarm_origin::RealRelay {
                file_bytes: file,
                scale: plan.scale,
                served: &o.server.served()?,
                round_starts: &starts,
                round_span_ns: spans,
                reader_fetches: o.fetch.blocks(),
                nodes: &sums,
            }
            .metrics(),
        );
    }
    cluster.stop().await;
    outcome?;
    fault_result?;

    // The simulator's report and summary.
    let mut metrics = world.sim().clone();
    metrics.relay = relay;
    let summary = Summary::build(
        &s.name,
        seed,
        &metrics,
        run_seconds,
        wall.elapsed().as_secs_f64(),
        "real".to_owned(),
    );
    let mut shown = s.clone();
    shown.readers.rounds = rounds;
    let result = RunResult {
        summary,
        metrics,
        timeline: sim::faults::timeline(&s.faults, &world.content),
        holders,
    };
    let json = result.summary.to_json();
    if let Some(f) = json_out.as_mut() {
        writeln!(f, "{json}").map_err(|e| NodeError::Io {
            what: "cannot write --json",
            path: plan
                .json
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            source: e,
        })?;
    }
    let mut out = std::io::stdout().lock();
    let written = if json_stdout {
        writeln!(out, "{json}")
    } else {
        writeln!(
            out,
            "peerblock-node swarm: {} for real: {} `serve` processes (driver {:?}), {} in-process readers, scale {} (blocks, budgets and rates × {}; rounds {} → {})\n{}",
            plan.path.display(),
            s.cluster.nodes,
            plan.driver,
            s.readers.count,
            plan.scale,
            plan.scale,
            s.readers.rounds,
            rounds,
            sim::report::text(&shown, &result)
        )
    };
    written
        .and_then(|()| out.flush())
        .map_err(|e| NodeError::Io {
            what: "cannot write",
            path: "stdout".into(),
            source: e,
        })?;
    drop(work);
    Ok(())
}
