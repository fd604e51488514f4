//! Differential check against an independent strict HTTP/1.1 parser: Node's built-in
//! `http` server (llhttp, strict mode). Every vector goes to a real Node server over
//! loopback; for every vector Node refuses, our request decoder must refuse too.
//!
//! Needs `node` on PATH. Without it the test skips with a printed reason, so that
//! `cargo test --workspace` passes on a machine with only the Rust toolchain; with
//! `PEERBLOCK_REQUIRE_NODE=1` (set by `.ci/run`, which installs Node) a missing `node` is a
//! failure, so CI always runs the comparison.

use std::io::Write;
use std::process::{Command, Stdio};

use peerblock_core::http::{RequestDecoder, MAX_REQUEST_HEAD_BYTES};

/// Feeds each vector to a Node `http.Server` over a loopback socket, sequentially, and
/// prints one line per vector: `<index> <requests handled> <error code or ->`.
const NODE_SCRIPT: &str = r#"
const http = require('http');
const net = require('net');
const vectors = require('fs').readFileSync(0, 'utf8').trim().split('\n')
  .map((l) => Buffer.from(l, 'base64'));
let current = null;
const server = http.createServer((req, res) => {
  current.requests += 1;
  req.resume();
  res.end('ok');
});
server.on('clientError', (err, socket) => {
  // A truncated stream at EOF is not a framing verdict; every vector here is complete.
  if (err.code !== 'HPE_INVALID_EOF_STATE' && current.error === null) current.error = err.code || 'ERR';
  socket.destroy();
});
server.listen(0, '127.0.0.1', async () => {
  const port = server.address().port;
  const out = [];
  for (let i = 0; i < vectors.length; i++) {
    current = { requests: 0, error: null };
    await new Promise((resolve) => {
      const sock = net.connect(port, '127.0.0.1', () => { sock.end(vectors[i]); });
      sock.on('data', () => {});
      sock.on('error', () => {});
      sock.on('close', () => setTimeout(resolve, 5));
      sock.setTimeout(2000, () => { sock.destroy(); });
    });
    out.push(`${i} ${current.requests} ${current.error === null ? '-' : current.error}`);
  }
  process.stdout.write(out.join('\n') + '\n');
  server.close();
});
"#;

/// Ours refuses the stream: a decoding error, or the stream keeps bytes after a request
/// that closed the connection (they are never decoded).
fn ours_refuses(input: &[u8]) -> bool {
    let mut d = RequestDecoder::new();
    let mut rest = input;
    loop {
        let n = d.feed(rest);
        rest = &rest[n..];
        loop {
            match d.decode() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return true,
            }
        }
        if d.is_closed() {
            return d.buffered() > 0 || !rest.is_empty();
        }
        if rest.is_empty() {
            return false;
        }
    }
}

fn vectors() -> Vec<Vec<u8>> {
    let base: &[&[u8]] = &[
        b"GET /peer/v1/block/abcd/1 HTTP/1.1\r\nHost: a\r\nX-DART-Hop: 1\r\n\r\n",
        b"GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\nX-DART-Node: n\r\nX-DART-Peer-Addr: 1.2.3.4:5\r\n\r\n",
        b"GET /peer/v1/roster HTTP/1.0\r\n\r\n",
    ];
    let line = |s: &str| s.as_bytes().to_vec();
    let mut v: Vec<Vec<u8>> = base.iter().map(|b| b.to_vec()).collect();
    // Hand-written smuggling and syntax vectors (the malformed table's, in spirit).
    let head = "GET /peer/v1/block/ab/1 HTTP/1.1\r\nHost: a\r\n";
    for extra in [
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "Transfer-Encoding : chunked\r\n\r\n",
        "Transfer-Encoding:\r\n chunked\r\n\r\n",
        "Transfer-Encoding: xchunked\r\n\r\n",
        "Content-Length: 0\r\nContent-Length: 5\r\n\r\n",
        "Content-Length: 0\r\nContent-Length: 0\r\n\r\n",
        "Content-Length: -1\r\n\r\n",
        "Content-Length: +0\r\n\r\n",
        "Content-Length: 0x0\r\n\r\n",
        "Content-Length: 1 0\r\n\r\n",
        "Content-Length: 99999999999999999999999\r\n\r\n",
        "Content-Length: 3\r\n\r\nabc",
        "X-A: a\rb\r\n\r\n",
        "X-A: a\0b\r\n\r\n",
        "X-A: a\x01b\r\n\r\n",
        "X-A: a\x7fb\r\n\r\n",
        "X-A : a\r\n\r\n",
        "X-A\t: a\r\n\r\n",
        ": a\r\n\r\n",
        "X-A a\r\n\r\n",
        "X(A): a\r\n\r\n",
        "X-A: 1\r\n 2\r\n\r\n",
        "X-A: 1\n\r\n",
        "X-A: 1\r\n\n",
        "Host: b\r\n\r\n",
        "Connection: close\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        v.push(line(&format!("{head}{extra}")));
    }
    for first in [
        "GET /peer/v1/roster HTTP/2.0\r\nHost: a\r\n\r\n",
        "GET /peer/v1/roster HTTP/1.2\r\nHost: a\r\n\r\n",
        "GET /peer/v1/roster http/1.1\r\nHost: a\r\n\r\n",
        "GET  /peer/v1/roster HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /peer/v1/ro ster HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /peer/v1/roster HTTP/1.1 \r\nHost: a\r\n\r\n",
        "GET /peer/v1/roster HTTP/1.1\nHost: a\r\n\r\n",
        "G@T /peer/v1/roster HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET http://a/peer/v1/roster HTTP/1.1\r\nHost: a\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /peer/v1/roster#frag HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /peer/v1/roster\u{e9} HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /peer/v1/roster HTTP/1.1\r\n\r\n",
        "\r\nGET /peer/v1/roster HTTP/1.1\r\nHost: a\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        v.push(line(first));
    }
    let mut big = line("GET /peer/v1/roster HTTP/1.1\r\nHost: a\r\nX-Pad: ");
    big.extend(std::iter::repeat_n(b'p', 2 * MAX_REQUEST_HEAD_BYTES + 100));
    big.extend_from_slice(b"\r\n\r\n");
    v.push(big);
    // Deterministic mutations of the valid requests: one byte replaced by a byte from an
    // interesting set, at every position (xorshift picks the byte).
    let interesting = [
        0u8, b'\r', b'\n', b' ', b'\t', b':', 0x7f, 0x80, 0xff, b'"', b'\x0b',
    ];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for b in base {
        for pos in 0..b.len() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut m = b.to_vec();
            m[pos] = interesting[(x % interesting.len() as u64) as usize];
            v.push(m);
        }
    }
    v
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// The environment variable that turns a missing `node` from a skip into a failure.
const REQUIRE_NODE: &str = "PEERBLOCK_REQUIRE_NODE";

#[test]
fn whenever_node_rejects_the_framing_we_reject_it_too() {
    let vectors = vectors();
    let input: String = vectors.iter().map(|v| base64(v) + "\n").collect();
    let spawned = Command::new("node")
        .arg("-e")
        .arg(NODE_SCRIPT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) if std::env::var(REQUIRE_NODE).as_deref() == Ok("1") => {
            panic!("{REQUIRE_NODE}=1 but `node` could not be started: {e}")
        }
        Err(e) => {
            eprintln!(
                "skipped: the differential test needs Node.js (`node` on PATH) and could not \
                 start it ({e}); install Node.js or set {REQUIRE_NODE}=1 to make this a failure"
            );
            return;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "node failed");
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), vectors.len(), "one verdict per vector");
    let (mut node_rejects, mut both, mut only_ours) = (0, 0, 0);
    let mut misses = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let mut parts = line.split(' ');
        assert_eq!(parts.next(), Some(i.to_string().as_str()));
        let _requests: u32 = parts.next().unwrap().parse().unwrap();
        let node_rejected = parts.next().unwrap() != "-";
        let ours = ours_refuses(&vectors[i]);
        if node_rejected {
            node_rejects += 1;
            if ours {
                both += 1;
            } else {
                misses.push(format!(
                    "{line}: {:?}",
                    String::from_utf8_lossy(&vectors[i])
                ));
            }
        } else if ours {
            only_ours += 1;
        }
    }
    println!(
        "{} vectors: node rejects {node_rejects}, we reject all of those ({both}), \
         we alone reject {only_ours}",
        vectors.len()
    );
    assert!(
        node_rejects > 40,
        "the vector set exercises node's rejections"
    );
    assert!(
        misses.is_empty(),
        "node rejects, we accept:\n{}",
        misses.join("\n")
    );
}
