//! Issue 25's attack, as an outsider with no key runs it, through the `peerblock-node`
//! binary on loopback: four signed nodes, a 4 MiB file imported on the first (A). The
//! outsider introduces itself to A (one roster request naming its own address) and
//! answers every roster request with itself plus invented members whose ids it ground to
//! be the rendezvous owners of the file's blocks, all at one tarpit address that accepts
//! connections and never answers. Its own address answers block requests with garbage, or
//! is a tarpit too. The fetch through A must be byte-exact, within the deadlines' bound;
//! no invented member is ever asked for a block. The time each fetch took is printed
//! (`--nocapture` shows it). Every wait is bounded; every process and thread stops when
//! the test ends.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::procs::{fetch, import, metric_value, random_file, run, Node, TempDir, FETCH_BOUND};
use peerblock_common::manifest::block_key;
use peerblock_core::placement::{owners, rendezvous_score, Key, Member, PeerId};
use peerblock_core::roster::{Attestation, NodeKey, Roster, RosterMember};
use peerblock_core::wire::ChunkKey;

/// What the outsider's own address does with a block request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Blocks {
    /// Answers 200 with 1 MiB of garbage (the length of the file's blocks).
    Garbage,
    /// Reads the request and never answers (until the test ends).
    Tarpit,
}

/// A loopback server of the outsider's, on `ip`: accepts until dropped, each connection
/// on a thread of its own that ends when the test does (reads bounded by 1 s timeouts
/// while it checks the stop flag).
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Block requests received.
    block_requests: Arc<AtomicU64>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// `roster`: the body answered to a roster request once set, with `X-DART-Node: id`
    /// (unset: roster requests are tarpitted too).
    fn start(ip: Ipv4Addr, id: &str, roster: Arc<OnceLock<String>>, blocks: Blocks) -> Server {
        let listener = TcpListener::bind((ip, 0)).expect("bind the outsider's server");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let block_requests = Arc::new(AtomicU64::new(0));
        let (s, b, id) = (stop.clone(), block_requests.clone(), id.to_owned());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (s, b, id, roster) = (s.clone(), b.clone(), id.clone(), roster.clone());
                std::thread::spawn(move || {
                    serve(conn, &s, &b, &id, roster.get().map(String::as_str), blocks)
                });
            }
        });
        Server {
            addr,
            stop,
            block_requests,
            accept: Some(accept),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// One connection: request heads in, answers (or silence) out, until the peer closes or
/// the test ends.
fn serve(
    mut conn: TcpStream,
    stop: &AtomicBool,
    block_requests: &AtomicU64,
    id: &str,
    roster: Option<&str>,
    blocks: Blocks,
) {
    conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match conn.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                continue
            }
            Err(_) => return,
        }
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let answer = if head.starts_with("GET /peer/v1/roster") {
                roster.map(|body| {
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-DART-Node: {id}\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .into_bytes()
                })
            } else {
                block_requests.fetch_add(1, Ordering::Relaxed);
                match blocks {
                    Blocks::Garbage => {
                        let mut a =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 1 << 20)
                                .into_bytes();
                        a.extend((0..1u32 << 20).map(|i| (i * 7 + 3) as u8));
                        Some(a)
                    }
                    Blocks::Tarpit => None,
                }
            };
            match answer {
                Some(a) => {
                    if conn.write_all(&a).is_err() {
                        return;
                    }
                }
                None => {
                    // Silent from now on: hold the connection until the test ends.
                    while !stop.load(Ordering::Relaxed) {
                        match conn.read(&mut chunk) {
                            Ok(0) => return,
                            Ok(_) => {}
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => return,
                        }
                    }
                    return;
                }
            }
        }
    }
}

/// `per_key` members ground to be the first rendezvous owners of each of `keys` among
/// `honest` (each beats every honest member for its key), as an outsider computes them:
/// bare ids, or (`signed`) keys of its own whose ids win, each with a record it signs for
/// its address, `addrs` in turn.
fn ground(
    keys: &[Key],
    honest: &[Member],
    per_key: usize,
    signed: bool,
    addrs: &[String],
) -> Vec<RosterMember> {
    let mut out = Vec::new();
    let mut n = 0u64;
    for key in keys {
        let best = honest
            .iter()
            .map(|m| rendezvous_score(key, m))
            .fold(0.0, f64::max);
        let mut found = 0;
        while found < per_key {
            n += 1;
            let addr = addrs[out.len() % addrs.len()].as_str();
            let seed = *blake3::hash(&n.to_be_bytes()).as_bytes();
            let (id, record) = if signed {
                let k = NodeKey::from_seed(&seed);
                let r = k.sign(addr, 1.0, 1).unwrap();
                (k.id().parse::<PeerId>().unwrap(), Attestation::Signed(r))
            } else {
                (PeerId(seed), Attestation::Unsigned)
            };
            let m = Member {
                id,
                addr: String::new(),
                weight: 1.0,
            };
            if rendezvous_score(key, &m) > best {
                out.push(RosterMember {
                    record,
                    ..RosterMember::new(id.to_hex(), addr, 1.0)
                });
                found += 1;
            }
        }
    }
    out
}

/// A roster naming `me` at `addr` (unsigned) and `invented`, as JSON.
fn crafted_roster(me: &str, addr: &str, invented: &[RosterMember]) -> String {
    let mut members = vec![RosterMember::new(me, addr, 1.0)];
    members.extend(invented.iter().cloned());
    String::from_utf8(Roster::of(members).to_json()).unwrap()
}

/// The outsider's one roster request to `node`, from its own IP, naming its own id and
/// address (no record: it has no key).
fn introduce(from: Ipv4Addr, node: &str, id: &str, addr: &str) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    s.connect_timeout(
        &node.parse::<SocketAddr>().unwrap().into(),
        Duration::from_secs(5),
    )
    .expect("connect to A");
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /peer/v1/roster HTTP/1.1\r\nHost: {node}\r\nX-DART-Node: {id}\r\nX-DART-Peer-Addr: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "A answered {out}");
}

/// A node's roster, fetched anonymously (teaches it nothing), bounded.
fn roster_of(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /peer/v1/roster HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The `(id, weight)` of every member a roster body lists.
fn members_of(answer: &str) -> Vec<(String, f64)> {
    let body = answer.split_once("\r\n\r\n").expect("a head").1;
    let v: serde_json::Value = serde_json::from_str(body).expect("roster JSON");
    v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_owned(),
                m["weight"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The attack, then a fetch through A, byte-exact; returns how long the fetch took and
/// the block requests the tarpit received.
/// One run of the attack.
struct Attack<'a> {
    blocks: Blocks,
    tag: &'a str,
    outsider_ip: Ipv4Addr,
    tarpit_ip: Ipv4Addr,
    fetch_args: &'a [&'a str],
    /// The invented members carry records signed by keys the outsider made.
    signed: bool,
    /// The cluster runs `membership = "admitted"`, every node admitted by the authority.
    admitted: bool,
}

/// The value of `name = "..."` in `peerblock-node key` output.
fn line_value(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no {name} in {out}"))
        .to_owned()
}

/// The attack, then a fetch through A, byte-exact; returns how long the fetch took, the
/// block requests the invented members' tarpit and the outsider received, the fetch's
/// report and the outsider's address.
fn attack_then_fetch(attack: Attack<'_>) -> (Duration, u64, u64, String, String) {
    let Attack {
        blocks,
        tag,
        outsider_ip,
        tarpit_ip,
        fetch_args,
        signed,
        admitted,
    } = attack;
    let dir = TempDir::new(tag);
    let stores: Vec<TempDir> = (0..4)
        .map(|i| TempDir::new(&format!("{tag}-{i}")))
        .collect();
    // Roster rounds every second: A fetches the outsider's roster within seconds.
    let mut common_cfg = "[roster]\ninterval = \"1s\"\njitter = \"100ms\"\n".to_owned();
    if admitted {
        let auth = dir.join("authority.key");
        let out = run(
            &["key", "new", auth.to_str().unwrap()],
            Duration::from_secs(20),
        );
        assert!(out.status.success());
        let public = line_value(&String::from_utf8_lossy(&out.stdout), "public_key");
        common_cfg.push_str(&format!(
            "membership = \"admitted\"\nauthority_key = \"{public}\"\n"
        ));
        // Each node's key made before its first start, and admitted.
        for s in &stores {
            let key = s.join("node.key");
            assert!(run(
                &["key", "new", key.to_str().unwrap()],
                Duration::from_secs(20)
            )
            .status
            .success());
            let out = run(
                &[
                    "key",
                    "admit",
                    "--key",
                    auth.to_str().unwrap(),
                    key.to_str().unwrap(),
                ],
                Duration::from_secs(20),
            );
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let cert = line_value(&String::from_utf8_lossy(&out.stdout), "admission");
            std::fs::write(
                s.join("node.toml"),
                format!("{common_cfg}admission = \"{cert}\"\n"),
            )
            .unwrap();
        }
    } else {
        for s in &stores {
            std::fs::write(s.join("node.toml"), &common_cfg).unwrap();
        }
    }
    // The fetch's own configuration: the cluster's policy.
    let fetch_cfg = dir.join("fetch.toml");
    std::fs::write(&fetch_cfg, &common_cfg).unwrap();
    let cfg = |s: &TempDir| s.join("node.toml").to_str().unwrap().to_owned();
    let file = dir.join("input.bin");
    let data = random_file(&file, 4 << 20, 25);
    let chunk = import(&file, &stores[0].0, 1 << 20);
    let a = Node::start(
        &stores[0].0,
        &[],
        &["--config", &cfg(&stores[0]), "--metrics", "127.0.0.1:0"],
    );
    let a_metrics = a.metrics_addr();
    let _others: Vec<Node> = stores[1..]
        .iter()
        .map(|s| Node::start(&s.0, &[&a.addr], &["--config", &cfg(s)]))
        .collect();
    a.wait_members(4);

    // The outsider grinds ids that beat every honest member (their ids and weights are
    // public: A's roster) for each block's key, the manifest's included: 7 per key, a
    // whole close group each.
    let honest: Vec<Member> = members_of(&roster_of(&a.addr))
        .into_iter()
        .map(|(id, weight)| Member {
            id: id.parse().expect("a signed node's id"),
            addr: String::new(),
            weight,
        })
        .collect();
    assert_eq!(honest.len(), 4);
    let chunk_key = ChunkKey::parse_hex(chunk.as_bytes()).unwrap();
    let keys: Vec<Key> = (0..=4).map(|i| block_key(&chunk_key, i)).collect();
    // The invented members' tarpit: one listener, or (signed members, which are placed
    // up to the host budget) as many listeners on one host as it places members.
    let tarpits: Vec<Server> = (0..if signed { 4 } else { 1 })
        .map(|_| Server::start(tarpit_ip, "tarpit", Arc::default(), Blocks::Tarpit))
        .collect();
    let tarpit_addrs: Vec<String> = tarpits.iter().map(|t| t.addr.to_string()).collect();
    let invented = ground(&keys, &honest, 7, signed, &tarpit_addrs);
    let ids: Vec<PeerId> = invented.iter().map(|m| m.id.parse().unwrap()).collect();
    let mut all = honest.clone();
    all.extend(ids.iter().map(|&id| Member {
        id,
        addr: String::new(),
        weight: 1.0,
    }));
    for key in &keys {
        assert!(
            owners(key, &all)[..7].iter().all(|m| ids.contains(&m.id)),
            "placed as before this issue, the invented members own every close group"
        );
    }
    let outsider_id = PeerId(*blake3::hash(b"outsider").as_bytes()).to_hex();
    let body = Arc::new(OnceLock::new());
    let outsider = Server::start(outsider_ip, &outsider_id, body.clone(), blocks);
    body.set(crafted_roster(
        &outsider_id,
        &outsider.addr.to_string(),
        &invented,
    ))
    .unwrap();
    introduce(
        outsider_ip,
        &a.addr,
        &outsider_id,
        &outsider.addr.to_string(),
    );
    // The attack has taken: A learned the invented members (from the outsider's roster).
    let deadline = Instant::now() + Duration::from_secs(30);
    let last = invented.last().unwrap().id.clone();
    while !roster_of(&a.addr).contains(&last) {
        assert!(
            Instant::now() < deadline,
            "A never learned the invented members"
        );
        std::thread::sleep(Duration::from_millis(100)); // polling an observable, bounded
    }

    // What A places now: its own view of the attack (the gauge is set as rosters are
    // answered and merged, which the wait above saw happen).
    let placed_at_a = metric_value(&a_metrics, "peerblock_roster_placed_members");
    eprintln!("issue 25 attack ({tag}): A places {placed_at_a} members");
    if admitted {
        assert_eq!(placed_at_a, 4, "A placed a member it did not admit");
    } else if !signed {
        assert_eq!(
            placed_at_a, 5,
            "A places the four nodes and the outsider only"
        );
    }

    let out = dir.join("out.bin");
    let started = Instant::now();
    let mut args = vec!["--config", fetch_cfg.to_str().unwrap()];
    args.extend_from_slice(fetch_args);
    let fetched = fetch(&chunk, &a.addr, &out, &args);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&fetched.stdout);
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert!(
        fetched.status.success(),
        "fetch failed after {took:?}: {stderr}\n{stdout}"
    );
    assert!(
        std::fs::read(&out).unwrap() == data,
        "the file is not byte-exact"
    );
    assert!(took < FETCH_BOUND);
    eprintln!("issue 25 attack ({tag}): fetch of 4 MiB through A took {took:?}\n{stdout}");
    (
        took,
        tarpits
            .iter()
            .map(|t| t.block_requests.load(Ordering::Relaxed))
            .sum(),
        outsider.block_requests.load(Ordering::Relaxed),
        stdout.into_owned(),
        outsider.addr.to_string(),
    )
}

/// Rule: unverified hearsay owns no key. With the invented members learned, a fetch is
/// byte-exact, well under a minute, and never asks one of them for a block; the
/// outsider's own garbage is charged to it (each block once, then the failed cooldown).
#[test]
fn an_outsiders_invented_close_groups_and_garbage_never_make_a_file_unreadable() {
    let (took, tarpit_blocks, _, report, outsider) = attack_then_fetch(Attack {
        blocks: Blocks::Garbage,
        tag: "attack-garbage",
        outsider_ip: Ipv4Addr::new(127, 0, 0, 252),
        tarpit_ip: Ipv4Addr::new(127, 0, 0, 253),
        // One block at a time, so that no GET to the outsider is already in flight when
        // its second invalid block puts it on the cooldown.
        fetch_args: &["--parallel", "1"],
        signed: false,
        admitted: false,
    });
    assert_eq!(tarpit_blocks, 0, "an invented member was asked for a block");
    assert!(took < Duration::from_secs(30), "{took:?}");
    // Its garbage was charged to it: after its second invalid block it was asked for
    // nothing more (five blocks read one by one, each close group of 5 holding it).
    let invalid = invalid_from(&report, &outsider);
    assert!(
        invalid <= 2,
        "asked {invalid} times after invalid blocks: {report}"
    );
}

/// The invalid GETs the fetch's report charges to `addr` (its `ADDR ... N invalid` line).
fn invalid_from(report: &str, addr: &str) -> u64 {
    report
        .lines()
        .find(|l| l.starts_with(addr))
        .and_then(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "invalid")?;
            words[at - 1].parse().ok()
        })
        .unwrap_or(0)
}

/// Rule: a read passes a silent member: the outsider's own address (placed: it spoke
/// for itself) takes block requests and never answers; hedging and the header deadline
/// bound what it costs, and the fetch is byte-exact well under a minute.
#[test]
fn an_outsider_that_tarpits_its_own_block_requests_costs_a_fetch_only_time() {
    let (took, tarpit_blocks, _, _, _) = attack_then_fetch(Attack {
        blocks: Blocks::Tarpit,
        tag: "attack-tarpit",
        outsider_ip: Ipv4Addr::new(127, 0, 0, 254),
        tarpit_ip: Ipv4Addr::new(127, 0, 0, 251),
        fetch_args: &[],
        signed: false,
        admitted: false,
    });
    assert_eq!(tarpit_blocks, 0, "an invented member was asked for a block");
    assert!(took < Duration::from_secs(45), "{took:?}");
}

/// Rule: in the default mode, members signed with keys an outsider made are verified, so
/// placed, but one per address and at most the host budget (4) on one host: with four
/// tarpit listeners on its host, the reads past the close group and the tarpits' circuits
/// opening, the fetch is still byte-exact within the deadlines' bound. A places exactly
/// the host budget of them.
#[test]
fn signed_invented_members_at_one_tarpit_cost_a_fetch_only_bounded_time() {
    let (took, tarpit_blocks, _, report, _) = attack_then_fetch(Attack {
        blocks: Blocks::Tarpit,
        tag: "attack-signed",
        outsider_ip: Ipv4Addr::new(127, 0, 0, 250),
        tarpit_ip: Ipv4Addr::new(127, 0, 0, 249),
        fetch_args: &[],
        signed: true,
        admitted: false,
    });
    eprintln!("signed invented members: the tarpits got {tarpit_blocks} block requests");
    // Measured 23-44 s here (docs/benchmarks.md); the bound leaves room for a loaded
    // machine, below the 90 s every fetch test allows.
    assert!(took < Duration::from_secs(75), "{took:?}: {report}");
}

/// Rule (admitted membership): with every node admitted by the authority, no member
/// without a certificate is placed: neither the outsider's signed invented members nor the
/// outsider itself is ever asked for a block, and the fetch is byte-exact.
#[test]
fn in_an_admitted_cluster_no_crafted_member_is_ever_placed() {
    let (took, tarpit_blocks, outsider_blocks, _, _) = attack_then_fetch(Attack {
        blocks: Blocks::Garbage,
        tag: "attack-admitted",
        outsider_ip: Ipv4Addr::new(127, 0, 0, 248),
        tarpit_ip: Ipv4Addr::new(127, 0, 0, 247),
        fetch_args: &[],
        signed: true,
        admitted: true,
    });
    assert_eq!(tarpit_blocks, 0, "an invented member was asked for a block");
    assert_eq!(
        outsider_blocks, 0,
        "the unadmitted outsider was asked for a block"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
}
