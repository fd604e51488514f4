#!/usr/bin/env python3
"""Abuse and soak load tools for bench/overload, bench/slowloris and bench/soak
(standard library only; loopback only).

Subcommands:
  overload    hold S admitted connections mid-body, hit the node with M more, check
              every admitted body byte for byte and time every refusal
  slowloris   time honest GETs while N connections dribble a request head byte by byte
  soak        run a small cluster for a while (mixed traffic, node restarts), sample
              RSS and open descriptors, classify every fetch, write an SVG plot
"""

import argparse
import asyncio
import hashlib
import json
import os
import random
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, need))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < need:
        sys.exit(f"need {need} file descriptors, the hard limit is {hard}")


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def lat_summary(xs):
    if not xs:
        return None
    return {"n": len(xs), "p50": round(pct(xs, 50), 3), "p99": round(pct(xs, 99), 3),
            "max": round(max(xs), 3), "mean": round(statistics.mean(xs), 3)}


def proc_kb(pid, key="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def proc_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def request(host, port, path, close=False, origin=None):
    extra = "Connection: close\r\n" if close else ""
    if origin:
        extra += f"X-DART-Origin: http://{origin}\r\n"
    return (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"User-Agent: peerblock-abuse\r\n{extra}\r\n").encode()


def parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def open_from(host, port, source):
    """A connection to host:port from the loopback address `source` (any port)."""
    loop = asyncio.get_running_loop()
    s = socket.socket()
    s.setblocking(False)
    if source:
        s.bind((source, 0))
    try:
        await loop.sock_connect(s, (host, port))
    except BaseException:
        s.close()
        raise
    return await asyncio.open_connection(sock=s)


def sources(first, n):
    """n loopback addresses from 127.0.<first>.1 on (skipping .0 and .255)."""
    out, a, b = [], first, 1
    while len(out) < n:
        out.append(f"127.0.{a}.{b}")
        b += 1
        if b == 255:
            a, b = a + 1, 1
    return out


# ---------------------------------------------------------------------------- overload

async def overload(args):
    raise_nofile(args.holders + args.attackers + 256)
    with open(args.block, "rb") as f:
        want = f.read()
    req = request(args.host, args.port, args.path)
    per = args.per_source
    holder_src = sources(1, (args.holders + per - 1) // per)
    attacker_src = sources(101, (args.attackers + per - 1) // per)
    rss_idle = proc_kb(args.pid)
    hwm = {"rss_kb": rss_idle}

    async def sampler(stop):
        while not stop.is_set():
            r = proc_kb(args.pid)
            if r:
                hwm["rss_kb"] = max(hwm["rss_kb"], r)
            try:
                await asyncio.wait_for(stop.wait(), 0.05)
            except asyncio.TimeoutError:
                pass

    stop = asyncio.Event()
    samp = asyncio.create_task(sampler(stop))

    # Holders: admitted connections that read their response slowly (chunk every tick),
    # so their sessions stay taken while the attackers arrive.
    admitted_heads = asyncio.Event()
    started = [0]

    async def holder(i):
        r, w = await open_from(args.host, args.port, holder_src[i // per])
        w.write(req)
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        status, headers = parse_head(head)
        started[0] += 1
        if started[0] == args.holders:
            admitted_heads.set()
        body = b""
        if status == 200:
            n = int(headers.get("content-length", "0"))
            # Read a little until every attacker is done, then the rest.
            while len(body) < n and not attack_done.is_set():
                body += await r.read(min(4096, n - len(body)))
                await asyncio.sleep(args.tick)
            while len(body) < n:
                chunk = await r.read(n - len(body))
                if not chunk:
                    break
                body += chunk
        w.close()
        return status, headers.get("x-peerblock-refused"), body == want

    attack_done = asyncio.Event()
    holders = [asyncio.create_task(holder(i)) for i in range(args.holders)]
    try:
        await asyncio.wait_for(admitted_heads.wait(), 30)
    except asyncio.TimeoutError:
        sys.exit(f"only {started[0]} of {args.holders} holders got a response head in 30 s")

    sem = asyncio.Semaphore(args.concurrency)

    async def attacker(i):
        async with sem:
            t0 = time.perf_counter()
            try:
                r, w = await open_from(args.host, args.port, attacker_src[i // per])
                w.write(req)
                await w.drain()
                head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
                status, headers = parse_head(head)
                n = int(headers.get("content-length", "0"))
                body = await asyncio.wait_for(r.readexactly(n), 10)
                t = (time.perf_counter() - t0) * 1e3
                w.close()
                return status, headers.get("x-peerblock-refused"), t, (status == 200 and body == want)
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                return "closed", None, (time.perf_counter() - t0) * 1e3, False

    t0 = time.monotonic()
    results = await asyncio.gather(*(attacker(i) for i in range(args.attackers)))
    attack_s = time.monotonic() - t0
    rss_attack = proc_kb(args.pid)
    attack_done.set()
    held = await asyncio.gather(*holders)
    stop.set()
    await samp
    statuses = {}
    for s, reason, _, _ in results:
        k = f"{s} {reason}" if reason else f"{s}"
        statuses[k] = statuses.get(k, 0) + 1
    refused_ms = [t for s, _, t, _ in results if s == 503]
    out = {
        "holders": args.holders,
        "attackers": args.attackers,
        "concurrency": args.concurrency,
        "sources": len(holder_src) + len(attacker_src),
        "attack_seconds": round(attack_s, 3),
        "holders_200": sum(1 for s, _, _ in held if s == 200),
        "holders_byte_exact": sum(1 for _, _, ok in held if ok),
        "holder_statuses": sorted({f"{s} {r}" for s, r, _ in held}),
        "attacker_statuses": statuses,
        "attackers_served_byte_exact": sum(1 for *_, ok in results if ok),
        "refusal_ms": lat_summary(refused_ms),
        "rss_kb": {"idle_before": rss_idle, "during_attack": rss_attack,
                   "peak_sampled": hwm["rss_kb"], "vm_hwm": proc_kb(args.pid, "VmHWM")},
    }
    print(json.dumps(out, indent=2))


# --------------------------------------------------------------------------- slowloris

async def slowloris(args):
    raise_nofile(args.connections + 256)
    with open(args.block, "rb") as f:
        want = f.read()
    head = request(args.host, args.port, args.path)
    attack_src = sources(201, args.attack_sources)
    stats = {"opened": 0, "closed_by_node": 0, "bytes": 0}
    stop = asyncio.Event()

    async def dribbler(i):
        # Keeps one connection dribbling one head byte per interval, reconnecting when
        # the node closes it (as a real attacker would).
        src = attack_src[i % len(attack_src)]
        await asyncio.sleep(random.random() * args.interval)
        while not stop.is_set():
            try:
                r, w = await asyncio.wait_for(open_from(args.host, args.port, src), 10)
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(args.interval)
                continue
            stats["opened"] += 1
            try:
                for k in range(len(head) - 4):  # never completes the head
                    if stop.is_set():
                        break
                    w.write(head[k:k + 1])
                    await w.drain()
                    stats["bytes"] += 1
                    try:
                        got = await asyncio.wait_for(r.read(4096), args.interval)
                        if not got:
                            stats["closed_by_node"] += 1
                            break
                    except asyncio.TimeoutError:
                        pass
            except (ConnectionError, OSError):
                stats["closed_by_node"] += 1
            w.close()
            # Reconnect after one interval, as a dribbler paces itself (a tight reconnect
            # loop would measure this tool's own CPU, not the node).
            await asyncio.sleep(args.interval)

    async def honest_run(n):
        lat, bad = [], {}
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                r, w = await asyncio.wait_for(open_from(args.host, args.port, args.honest_source), 10)
                w.write(request(args.host, args.port, args.path, close=True))
                await w.drain()
                h = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
                status, headers = parse_head(h)
                body = await asyncio.wait_for(
                    r.readexactly(int(headers.get("content-length", "0"))), 10)
                w.close()
                if status == 200 and body == want:
                    lat.append((time.perf_counter() - t0) * 1e3)
                else:
                    k = f"{status} {headers.get('x-peerblock-refused', '')}".strip()
                    bad[k] = bad.get(k, 0) + 1
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError) as e:
                bad[type(e).__name__] = bad.get(type(e).__name__, 0) + 1
            await asyncio.sleep(args.honest_gap)
        return lat, bad

    baseline, base_bad = await honest_run(args.honest)
    tasks = [asyncio.create_task(dribbler(i)) for i in range(args.connections)]
    # Let the attack build up: every dribbler connected at least once.
    await asyncio.sleep(args.ramp)
    rss_attack = proc_kb(args.pid)
    fds_attack = proc_fds(args.pid)
    during, during_bad = await honest_run(args.honest)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    out = {
        "dribblers": args.connections,
        "attack_sources": len(attack_src),
        "interval_s": args.interval,
        "attack": stats,
        "node_rss_kb_during": rss_attack,
        "node_fds_during": fds_attack,
        "honest_without_attack_ms": lat_summary(baseline),
        "honest_without_attack_failures": base_bad,
        "honest_during_attack_ms": lat_summary(during),
        "honest_during_attack_failures": during_bad,
    }
    print(json.dumps(out, indent=2))


# -------------------------------------------------------------------------------- soak

class Stopped(Exception):
    pass


def soak(args):
    """Runs the soak in this process (threads), so one Ctrl-C / SIGTERM stops it all."""
    def on_signal(signum, frame):
        raise Stopped()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    os.makedirs(args.out, exist_ok=True)
    blocks = {}
    chunk_dir = os.path.join(args.store, args.chunk)
    for name in os.listdir(chunk_dir):
        if name.isdigit():
            with open(os.path.join(chunk_dir, name), "rb") as f:
                blocks[int(name)] = f.read()
    with open(args.file, "rb") as f:
        file_sha = hashlib.sha256(f.read()).hexdigest()
    procs = {}
    lock = threading.Lock()
    stop = threading.Event()
    counts = {}
    events = []

    def count(kind, outcome):
        with lock:
            counts.setdefault(kind, {})
            counts[kind][outcome] = counts[kind].get(outcome, 0) + 1

    def log(msg):
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        events.append(line)
        print(line, file=sys.stderr, flush=True)

    # Nodes: two long-lived holders (tokio, mio) and two churned nodes (tokio, mio)
    # without the file, seeded with the holders; every node on its own loopback address.
    nodes = {
        "holder-tokio": {"driver": "tokio", "store": args.store, "churn": False},
        "holder-mio": {"driver": "mio", "store": args.store2, "churn": False},
        "churn-tokio": {"driver": "tokio", "store": os.path.join(args.out_tmp, "c1"), "churn": True},
        "churn-mio": {"driver": "mio", "store": os.path.join(args.out_tmp, "c2"), "churn": True},
    }
    for i, (name, n) in enumerate(nodes.items()):
        host = f"127.0.{50 + i}.1"
        with socket.socket() as s:
            s.bind((host, 0))
            n["addr"] = f"{host}:{s.getsockname()[1]}"
        n["starts"] = 0

    def start(name):
        n = nodes[name]
        cmd = [args.bin, "serve", "--listen", n["addr"], "--id", name, "--store", n["store"],
               "--driver", n["driver"]]
        if n["driver"] == "mio":
            cmd += ["--threads", "2"]
        for other, m in nodes.items():
            if other != name and not m["churn"]:
                cmd += ["--seed", m["addr"]]
        logf = open(os.path.join(args.out_tmp, f"{name}.log"), "ab")
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logf, stdin=subprocess.DEVNULL,
                             env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")})
        line = p.stdout.readline().decode()
        if not line.startswith("listening"):
            p.kill()
            raise RuntimeError(f"{name} did not start: {line!r}")
        threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
        procs[name] = p
        n["starts"] += 1

    def stop_node(name, bound=20):
        p = procs.pop(name, None)
        if p is None:
            return None
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(bound)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        return rc, time.monotonic() - t0

    def get_block(addr, index, reset=False, pipeline_noread=False, origin=None):
        host, port = addr.rsplit(":", 1)
        path = f"/peer/v1/block/{args.chunk}/{index}"
        try:
            s = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            return "connect-failed"
        try:
            s.settimeout(10)
            if pipeline_noread:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.settimeout(0.5)
                try:
                    for _ in range(64):
                        s.sendall(request(host, port, path))
                except (socket.timeout, OSError):
                    pass
                return "pipelined-abandoned"
            s.sendall(request(host, port, path, origin=origin))
            buf = b""
            while b"\r\n\r\n" not in buf:
                got = s.recv(65536)
                if not got:
                    return "closed-before-head"
                buf += got
            head, _, body = buf.partition(b"\r\n\r\n")
            status, headers = parse_head(head + b"\r\n\r\n")
            n = int(headers.get("content-length", "0"))
            if reset:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return "reset-mid-body"
            while len(body) < n:
                got = s.recv(min(1 << 20, n - len(body)))
                if not got:
                    return "closed-mid-body"
                body += got
            if status == 200:
                return "ok-exact" if body == blocks[index] else "WRONG-BYTES"
            return f"{status} {headers.get('x-peerblock-refused', '')}".strip()
        except socket.timeout:
            return "timeout"
        except OSError as e:
            return f"error-{type(e).__name__}"
        finally:
            s.close()

    def traffic(seed):
        rnd = random.Random(seed)
        holders = ["holder-tokio", "holder-mio"]
        while not stop.is_set():
            name = rnd.choice(holders + ["churn-tokio", "churn-mio"])
            if name not in procs:
                time.sleep(0.05)
                continue
            x = rnd.random()
            kind = "reset" if x < 0.05 else "pipeline" if x < 0.07 else "get"
            # A churned node holds nothing at first: it relays from a holder (the origin).
            origin = nodes[rnd.choice(holders)]["addr"] if nodes[name]["churn"] else None
            out = get_block(nodes[name]["addr"], rnd.choice(list(blocks)), origin=origin,
                            reset=kind == "reset", pipeline_noread=kind == "pipeline")
            count(f"{kind}:{name}", out)
            time.sleep(rnd.random() * args.gap)

    def fetcher():
        k = 0
        while not stop.is_set():
            k += 1
            via = ["churn-tokio", "churn-mio", "holder-tokio", "holder-mio"][k % 4]
            if via not in procs:
                time.sleep(0.5)
                continue
            outp = os.path.join(args.out_tmp, f"fetch-{k}.bin")
            try:
                r = subprocess.run([args.bin, "fetch", args.chunk, "--seed", nodes[via]["addr"],
                                    "-o", outp], capture_output=True, timeout=120)
                if r.returncode == 0:
                    with open(outp, "rb") as f:
                        ok = hashlib.sha256(f.read()).hexdigest() == file_sha
                    count("fetch", "ok-exact" if ok else "WRONG-BYTES")
                else:
                    classes = sorted({line.split(": ", 1)[1] for line in r.stderr.decode().splitlines()
                                      if line.startswith("block ") and ": " in line})
                    count("fetch", f"failed exit {r.returncode} {'/'.join(classes) or 'no-class'}")
                    if os.path.exists(outp):
                        count("fetch", "PARTIAL-OUTPUT-AT-FINAL-NAME")
            except subprocess.TimeoutExpired:
                count("fetch", "timeout")
            for f in (outp, outp[:-4] + ".part"):
                if os.path.exists(f):
                    os.remove(f)
            time.sleep(1)

    samples = []
    threads = []
    t_start = time.monotonic()
    try:
        for name in nodes:
            start(name)
        log(f"nodes: {json.dumps({k: v['addr'] for k, v in nodes.items()})}")
        for i in range(args.workers):
            threads.append(threading.Thread(target=traffic, args=(i,), daemon=True))
        threads.append(threading.Thread(target=fetcher, daemon=True))
        for t in threads:
            t.start()
        end = t_start + args.minutes * 60
        next_churn = t_start + args.churn_every
        churn_k = 0
        while time.monotonic() < end:
            now = time.monotonic()
            row = {"t": round(now - t_start, 1)}
            for name in nodes:
                p = procs.get(name)
                row[f"{name}.rss_kb"] = proc_kb(p.pid) if p else None
                row[f"{name}.fds"] = proc_fds(p.pid) if p else None
            samples.append(row)
            if now >= next_churn:
                name = ["churn-tokio", "churn-mio"][churn_k % 2]
                churn_k += 1
                res = stop_node(name)
                log(f"churn: {name} stopped (exit, seconds) = {res}")
                count("churn-exit", f"{name} exit {res[0] if res else None}")
                start(name)
                next_churn = now + args.churn_every
            time.sleep(args.sample)
        stop.set()
        for t in threads:
            t.join(30)
    except Stopped:
        log("interrupted: stopping every node")
        stop.set()
    finally:
        for name in list(procs):
            res = stop_node(name)
            count("final-exit", f"{name} exit {res[0] if res else None}")
    write_soak_outputs(args, nodes, samples, counts, events)


def series_stats(samples, key, skip_s):
    pts = [(r["t"], r[key]) for r in samples if r.get(key) is not None and r["t"] >= skip_s]
    if len(pts) < 2:
        return None
    ts, vs = zip(*pts)
    mt, mv = statistics.mean(ts), statistics.mean(vs)
    den = sum((t - mt) ** 2 for t in ts) or 1
    slope = sum((t - mt) * (v - mv) for t, v in pts) / den
    q = max(1, len(vs) // 5)
    return {"min": min(vs), "max": max(vs), "first_fifth_mean": round(statistics.mean(vs[:q]), 1),
            "last_fifth_mean": round(statistics.mean(vs[-q:]), 1),
            "slope_per_minute": round(slope * 60, 2), "samples": len(vs)}


def write_soak_outputs(args, nodes, samples, counts, events):
    keys = [k for k in samples[0] if k != "t"] if samples else []
    with open(os.path.join(args.out, "samples.tsv"), "w") as f:
        f.write("\t".join(["t"] + keys) + "\n")
        for r in samples:
            f.write("\t".join(str(r.get(k, "")) if r.get(k) is not None else "" for k in ["t"] + keys) + "\n")
    summary = {
        "minutes": args.minutes,
        "nodes": {k: {"driver": v["driver"], "addr": v["addr"], "churned": v["churn"],
                      "starts": v["starts"]} for k, v in nodes.items()},
        "series_after_warmup": {k: series_stats(samples, k, args.warmup) for k in keys},
        "outcomes": counts,
        "wrong_bytes": sum(n for kind in counts.values() for o, n in kind.items()
                           if o in ("WRONG-BYTES", "PARTIAL-OUTPUT-AT-FINAL-NAME")),
        "events": events,
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "plot.svg"), "w") as f:
        f.write(svg_plot(samples, nodes, args))
    print(json.dumps({k: summary[k] for k in ("minutes", "series_after_warmup", "outcomes",
                                              "wrong_bytes")}, indent=2))


def svg_plot(samples, nodes, args):
    """Two panels (RSS MiB, open fds) against minutes, one polyline per node, by hand."""
    colors = {"holder-tokio": "#1f77b4", "holder-mio": "#d62728",
              "churn-tokio": "#7fb3d5", "churn-mio": "#f1948a"}
    W, H, L, R, T, B, gap = 900, 640, 70, 170, 40, 50, 60
    ph = (H - T - B - gap) / 2
    tmax = max([r["t"] for r in samples] + [1]) / 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="20" font-size="14">peerblock soak: {args.minutes} min, '
           f'RSS and open descriptors per node (churned nodes restart every '
           f'{args.churn_every:.0f} s)</text>']
    for panel, (suffix, label, scale) in enumerate(((".rss_kb", "RSS (MiB)", 1 / 1024),
                                                    (".fds", "open fds", 1))):
        y0 = T + panel * (ph + gap)
        vals = [r[n + suffix] * scale for r in samples for n in nodes
                if r.get(n + suffix) is not None]
        vmax = max(vals + [1]) * 1.1
        out.append(f'<rect x="{L}" y="{y0}" width="{W - L - R}" height="{ph}" '
                   f'fill="none" stroke="#888"/>')
        out.append(f'<text x="12" y="{y0 + ph / 2}" transform="rotate(-90 12 {y0 + ph / 2})" '
                   f'text-anchor="middle">{label}</text>')
        for k in range(6):
            v = vmax * k / 5
            y = y0 + ph - ph * k / 5
            out.append(f'<line x1="{L - 4}" y1="{y:.1f}" x2="{L}" y2="{y:.1f}" stroke="#888"/>')
            out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.0f}</text>')
        for k in range(int(tmax) + 1):
            x = L + (W - L - R) * k / max(tmax, 1e-9)
            out.append(f'<line x1="{x:.1f}" y1="{y0 + ph}" x2="{x:.1f}" y2="{y0 + ph + 4}" stroke="#888"/>')
            out.append(f'<text x="{x:.1f}" y="{y0 + ph + 16}" text-anchor="middle">{k}</text>')
        for n in nodes:
            pts = []
            segs = []
            for r in samples:
                v = r.get(n + suffix)
                if v is None:
                    if pts:
                        segs.append(pts)
                    pts = []
                    continue
                x = L + (W - L - R) * (r["t"] / 60) / max(tmax, 1e-9)
                y = y0 + ph - ph * (v * scale) / vmax
                pts.append(f"{x:.1f},{y:.1f}")
            if pts:
                segs.append(pts)
            dash = ' stroke-dasharray="4 3"' if nodes[n]["churn"] else ""
            for s in segs:
                out.append(f'<polyline fill="none" stroke="{colors.get(n, "#000")}" '
                           f'stroke-width="1.5"{dash} points="{" ".join(s)}"/>')
    out.append(f'<text x="{(W - R + L) / 2}" y="{H - 10}" text-anchor="middle">minutes</text>')
    for i, n in enumerate(nodes):
        y = T + 10 + i * 18
        dash = ' stroke-dasharray="4 3"' if nodes[n]["churn"] else ""
        out.append(f'<line x1="{W - R + 10}" y1="{y}" x2="{W - R + 35}" y2="{y}" '
                   f'stroke="{colors.get(n, "#000")}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{W - R + 40}" y="{y + 4}">{n}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("overload")
    a.add_argument("--host", default="127.0.0.1")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--path", required=True)
    a.add_argument("--block", required=True, help="file with the block's bytes")
    a.add_argument("--pid", type=int, required=True)
    a.add_argument("--holders", type=int, default=256)
    a.add_argument("--attackers", type=int, default=768)
    a.add_argument("--per-source", type=int, default=4)
    a.add_argument("--concurrency", type=int, default=128)
    a.add_argument("--tick", type=float, default=0.05)
    a.set_defaults(fn=lambda args: asyncio.run(overload(args)))
    a = sub.add_parser("slowloris")
    a.add_argument("--host", default="127.0.0.1")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--path", required=True)
    a.add_argument("--block", required=True)
    a.add_argument("--pid", type=int, required=True)
    a.add_argument("--connections", type=int, default=2000)
    a.add_argument("--attack-sources", type=int, default=8)
    a.add_argument("--interval", type=float, default=1.0)
    a.add_argument("--ramp", type=float, default=5.0)
    a.add_argument("--honest", type=int, default=200)
    a.add_argument("--honest-gap", type=float, default=0.01)
    a.add_argument("--honest-source", default="127.0.0.1")
    a.set_defaults(fn=lambda args: asyncio.run(slowloris(args)))
    a = sub.add_parser("soak")
    a.add_argument("--bin", required=True)
    a.add_argument("--store", required=True)
    a.add_argument("--store2", required=True)
    a.add_argument("--chunk", required=True)
    a.add_argument("--file", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--out-tmp", required=True)
    a.add_argument("--minutes", type=float, default=10)
    a.add_argument("--workers", type=int, default=8)
    a.add_argument("--gap", type=float, default=0.02)
    a.add_argument("--sample", type=float, default=5)
    a.add_argument("--churn-every", type=float, default=60)
    a.add_argument("--warmup", type=float, default=60)
    a.set_defaults(fn=soak)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
