#!/usr/bin/env python3
"""Helpers for the bench/ scripts (standard library only).

Subcommands:
  free-port       print a loopback port that is free now
  serve-summary   summarise bench/serve-compare's per-run table (text, and JSON)
  fetch-summary   summarise bench/fetch-compare's per-run table
  idle            open N idle admitted connections to a node; report its RSS growth
  refuse          saturate a node with slow readers; time M refused connections
"""

import argparse
import asyncio
import json
import resource
import socket
import statistics
import sys
import time


def free_port(args):
    with socket.socket() as s:
        s.bind((args.host, 0))
        print(s.getsockname()[1])


def med_range(values):
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "rounds": values,
    }


def fmt_num(x):
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_mr(m, scale=1.0):
    return (
        f"{fmt_num(m['median'] / scale)} "
        f"[{fmt_num(m['min'] / scale)}, {fmt_num(m['max'] / scale)}]"
    )


def read_tsv(path):
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        return [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


def size_label(n):
    if n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def serve_summary(args):
    rows = read_tsv(args.tsv)
    sizes = sorted({int(r["size"]) for r in rows})
    servers = []
    for r in rows:
        if r["server"] not in servers:
            servers.append(r["server"])
    out = {"meta": json.loads(args.meta) if args.meta else {}, "sizes": {}}
    bad = [r for r in rows if int(r["non2xx"]) or r["socket_errors"] != "0"]
    lines = []
    for size in sizes:
        per = {}
        for s in servers:
            rs = [r for r in rows if int(r["size"]) == size and r["server"] == s]
            if not rs:
                continue
            rps = [float(r["rps"]) for r in rs]
            bps = [float(r["rps"]) * size for r in rs]
            per[s] = {
                "rps": med_range(rps),
                "body_bytes_per_s": med_range(bps),
                "loadavg1": med_range([float(r["load1"]) for r in rs]),
            }
            if "p50_ms" in rs[0]:
                per[s]["p50_ms"] = med_range([float(r["p50_ms"] or 0) for r in rs])
            if "p99_ms" in rs[0]:
                per[s]["p99_ms"] = med_range([float(r["p99_ms"] or 0) for r in rs])
                per[s]["timeouts"] = sum(int(r["timeouts"] or 0) for r in rs)
            # CPU time per request (server and its children, /proc/PID/stat ticks).
            if "user_ticks" in rs[0]:
                def per_req_us(r, col):
                    n = float(r["requests"] or 0)
                    return float(r[col]) * 1e6 / float(r["clk_tck"]) / n if n else 0.0
                per[s]["user_us_per_request"] = med_range([per_req_us(r, "user_ticks") for r in rs])
                per[s]["sys_us_per_request"] = med_range([per_req_us(r, "sys_ticks") for r in rs])
            # System calls per request (--syscalls), each the median over rounds.
            if rs[0].get("syscalls", "-") not in ("-", ""):
                counts = {}
                for r in rs:
                    n = float(r["requests"] or 0)
                    for item in r["syscalls"].split(";"):
                        name, _, count = item.partition(":")
                        if n and count.strip().isdigit():
                            counts.setdefault(name, []).append(int(count) / n)
                per[s]["syscalls_per_request"] = {
                    k: med_range(v) for k, v in sorted(counts.items())}
        ratios = {}
        rounds = sorted({int(r["round"]) for r in rows})

        def rps_of(server, rnd):
            for r in rows:
                if (int(r["size"]) == size and r["server"] == server
                        and int(r["round"]) == rnd):
                    return float(r["rps"])
            return None

        ours = [s for s in servers if s.startswith("peerblock")]
        olds = [s for s in servers if s.startswith("base")]
        bases = [s for s in servers if not s.startswith("peerblock") and s not in olds]
        nginxes = [s for s in bases if s.startswith("nginx")]
        targets = bases + (["nginx-best"] if len(nginxes) > 1 else [])
        pairs = [(a, b) for a in ours for b in targets]
        # Each mio variant against the tokio node ("peerblock"), and sendfile against
        # the mio driver's buffered path.
        pairs += [(a, "peerblock") for a in ours if a != "peerblock" and "peerblock" in ours]
        if "peerblock-mio-sendfile" in ours and "peerblock-mio" in ours:
            pairs.append(("peerblock-mio-sendfile", "peerblock-mio"))
        # The node against the baseline binary on the same path (new/old, per round), and
        # the baseline against the other servers.
        pairs = [(a, "base" + a[len("peerblock"):]) for a in ours
                 if "base" + a[len("peerblock"):] in olds] + pairs
        pairs += [(a, b) for a in olds for b in targets]
        for a, b in pairs:
            vals = []
            for rnd in rounds:
                p = rps_of(a, rnd)
                if b == "nginx-best":
                    got = [rps_of(n, rnd) for n in nginxes]
                    q = max(got) if None not in got else None
                else:
                    q = rps_of(b, rnd)
                if p is not None and q:
                    vals.append(p / q)
            if vals:
                ratios[f"{a}/{b}"] = med_range(vals)
        # What each node path copied through user space per response, from its own
        # counters: bytes read from store files, bytes sent with sendfile.
        for s in ours + olds:
            rs = [r for r in rows if int(r["size"]) == size and r["server"] == s
                  and float(r.get("responses") or 0) > 0]
            if rs:
                resp = sum(float(r["responses"]) for r in rs)
                per[s]["store_read_bytes_per_response"] = sum(
                    float(r["store_read_bytes"]) for r in rs) / resp
                per[s]["sendfile_bytes_per_response"] = sum(
                    float(r["sendfile_bytes"]) for r in rs) / resp
        out["sizes"][str(size)] = {"servers": per, "ratios": ratios}
        lines.append(f"{size_label(size)} ({size} B body), median [min, max] over "
                     f"{len(next(iter(per.values()))['rps']['rounds'])} rounds:")
        lines.append(f"  {'server':<18} {'requests/s':<28} {'body MiB/s':<26}")
        for s, v in per.items():
            copy = ""
            if "store_read_bytes_per_response" in v:
                copy = (f"read from files {v['store_read_bytes_per_response']:.1f} B/response, "
                        f"sendfile {v['sendfile_bytes_per_response']:.0f} B/response")
            tail = ""
            if "p99_ms" in v:
                p50 = f"p50 {fmt_mr(v['p50_ms'])} ms, " if "p50_ms" in v else ""
                tail = f"{p50}p99 {fmt_mr(v['p99_ms'])} ms, timeouts {v['timeouts']}  "
            lines.append(f"  {s:<22} {fmt_mr(v['rps']):<28} "
                         f"{fmt_mr(v['body_bytes_per_s'], 1 << 20):<26} {tail}{copy}")
            if "user_us_per_request" in v:
                lines.append(f"  {'':<22} CPU per request: user {fmt_mr(v['user_us_per_request'])} us, "
                             f"system {fmt_mr(v['sys_us_per_request'])} us")
            if "syscalls_per_request" in v:
                calls = ", ".join(f"{k} {m['median']:.3f}"
                                  for k, m in v["syscalls_per_request"].items() if m["median"] > 0)
                lines.append(f"  {'':<22} system calls per request (median): {calls}")
        for k, v in ratios.items():
            lines.append(f"  {k:<32} {v['median']:.2f}x [{v['min']:.2f}, {v['max']:.2f}]"
                         f"  (per-round ratios: "
                         f"{', '.join(f'{x:.2f}' for x in v['rounds'])})")
    if bad:
        lines.append(f"WARNING: {len(bad)} runs had non-2xx responses or socket errors:")
        for r in bad:
            lines.append(f"  round {r['round']} {r['server']} {r['size']}: "
                         f"non2xx={r['non2xx']} socket_errors={r['socket_errors']}")
    out["runs_with_errors"] = bad
    print("\n".join(lines))
    if args.json:
        text = json.dumps(out, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")


def fetch_summary(args):
    rows = read_tsv(args.tsv)
    arms = []
    for r in rows:
        if r["arm"] not in arms:
            arms.append(r["arm"])
    out = {"meta": json.loads(args.meta) if args.meta else {}, "arms": {}, "ratios": {}}
    lines = [f"{args.bytes} bytes, median [min, max] over rounds:"]
    for a in arms:
        rs = [r for r in rows if r["arm"] == a]
        secs = [float(r["seconds"]) for r in rs]
        bps = [args.bytes / s for s in secs]
        out["arms"][a] = {"seconds": med_range(secs), "bytes_per_s": med_range(bps)}
        lines.append(f"  {a:<10} {fmt_mr(out['arms'][a]['bytes_per_s'], 1 << 20)} MiB/s,"
                     f" {fmt_mr(out['arms'][a]['seconds'])} s")
    if len(arms) == 2:
        a, b = arms
        vals = []
        for rnd in sorted({int(r["round"]) for r in rows}):
            sa = [float(r["seconds"]) for r in rows if r["arm"] == a and int(r["round"]) == rnd]
            sb = [float(r["seconds"]) for r in rows if r["arm"] == b and int(r["round"]) == rnd]
            if sa and sb:
                vals.append(sb[0] / sa[0])  # bytes/s ratio a/b = time b / time a
        if vals:
            out["ratios"][f"{a}/{b}"] = med_range(vals)
            v = out["ratios"][f"{a}/{b}"]
            lines.append(f"  bytes/s {a}/{b}: {v['median']:.2f}x [{v['min']:.2f}, {v['max']:.2f}]"
                         f" (per round: {', '.join(f'{x:.2f}' for x in vals)})")
    print("\n".join(lines))
    if args.json:
        text = json.dumps(out, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, need))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < need:
        sys.exit(f"need {need} file descriptors, the hard limit is {hard}")


def request_bytes(host, port, path, close=False):
    extra = "Connection: close\r\n" if close else ""
    return (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"User-Agent: peerblock-bench\r\n{extra}\r\n").encode()


async def read_response(reader):
    """Reads one response; returns (status, headers dict, body length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0"))
    if length:
        await reader.readexactly(length)
    return status, headers, length


def proc_status(pid):
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                vals[k] = int(v.split()[0])  # kB, or a count for Threads
    return vals


async def idle(args):
    raise_nofile(args.count + args.warmup + 64)
    req = request_bytes(args.host, args.port, args.path)

    async def one():
        reader, writer = await asyncio.open_connection(args.host, args.port)
        writer.write(req)
        await writer.drain()
        status, headers, length = await read_response(reader)
        return reader, writer, status, length

    async def batch(n):
        conns, sem = [], asyncio.Semaphore(args.concurrency)

        async def guarded():
            async with sem:
                return await one()
        conns = await asyncio.gather(*(guarded() for _ in range(n)))
        bad = [(s, n) for _, _, s, n in conns if s != 200 or n != args.size]
        if bad:
            sys.exit(f"{len(bad)} of {n} connections were not answered 200 with "
                     f"{args.size} bytes (first: status {bad[0][0]}, {bad[0][1]} bytes): "
                     "raise the node's session limits")
        return conns

    async def close_all(conns):
        for _, w, _, _ in conns:
            w.close()
        for _, w, _, _ in conns:
            try:
                await w.wait_closed()
            except OSError:
                pass

    # Warm-up: a few connections open, answered and closed, so the runtime's first-use
    # allocations (worker threads' buffers, the store path) are not charged to the batch.
    await close_all(await batch(args.warmup))
    await asyncio.sleep(args.settle)
    before = proc_status(args.pid)
    t0 = time.monotonic()
    conns = await batch(args.count)
    opened_s = time.monotonic() - t0
    await asyncio.sleep(args.settle)
    after = proc_status(args.pid)
    # Every connection is still open and idle: check none was closed under us.
    alive = sum(1 for r, _, _, _ in conns if not r.at_eof())
    await close_all(conns)
    await asyncio.sleep(args.settle)
    closed = proc_status(args.pid)
    growth = after["VmRSS"] - before["VmRSS"]
    res = {
        "connections": args.count,
        "still_open_at_measurement": alive,
        "block_bytes": args.size,
        "seconds_to_open_all": round(opened_s, 3),
        "before_kb": before,
        "after_kb": after,
        "after_close_kb": closed,
        "rss_growth_kb": growth,
        "rss_growth_per_connection_bytes": round(growth * 1024 / args.count),
        "anon_growth_per_connection_bytes":
            round((after.get("RssAnon", 0) - before.get("RssAnon", 0)) * 1024 / args.count),
    }
    print(json.dumps(res, indent=2))


async def refuse(args):
    raise_nofile(args.fill + args.count + 64)
    fill_req = request_bytes(args.host, args.port, args.fill_path)
    # The calibration run (--fill 0) asks its server to close after answering, as a
    # refusal does, so both runs also time the end of the stream.
    req = request_bytes(args.host, args.port, args.path, close=not args.fill)
    fillers = []
    # Slow readers: each asks for a large block and never reads, with a small receive
    # buffer, so its response stays unwritten and its session stays taken.
    for _ in range(args.fill):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        await asyncio.get_running_loop().sock_connect(s, (args.host, args.port))
        await asyncio.get_running_loop().sock_sendall(s, fill_req)
        fillers.append(s)

    async def attempt():
        t0 = time.perf_counter()
        reader, writer = await asyncio.open_connection(args.host, args.port)
        t_conn = time.perf_counter()
        writer.write(req)
        await writer.drain()
        status, headers, _ = await read_response(reader)
        t_resp = time.perf_counter()
        eof = await reader.read(1) == b""
        t_eof = time.perf_counter()
        writer.close()
        return {
            "status": status,
            "reason": headers.get("x-peerblock-refused"),
            "connect_ms": (t_conn - t0) * 1e3,
            "response_ms": (t_resp - t0) * 1e3,
            "eof_ms": (t_eof - t0) * 1e3 if eof else None,
        }

    # Saturation check: a probe must be refused for `sessions` before timing starts.
    # (--fill 0 is the calibration run against a server that answers at once: no check.)
    deadline = time.monotonic() + 10
    while args.fill:
        probe = await asyncio.wait_for(attempt(), 10)
        if probe["status"] == 503 and probe["reason"] == "sessions":
            break
        if time.monotonic() > deadline:
            sys.exit(f"node not saturated after filling {args.fill} sessions: probe got "
                     f"{probe['status']} {probe['reason']}")
        await asyncio.sleep(0.05)

    results = []
    sem = asyncio.Semaphore(args.concurrency)

    async def guarded():
        async with sem:
            return await asyncio.wait_for(attempt(), 10)
    t0 = time.monotonic()
    results = await asyncio.gather(*(guarded() for _ in range(args.count)))
    wall = time.monotonic() - t0
    # Saturation must have held throughout: check again at the end.
    probe_end = await asyncio.wait_for(attempt(), 10) if args.fill else {"status": None}
    for s in fillers:
        s.close()

    def pct(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
    resp = [r["response_ms"] for r in results]
    eofs = [r["eof_ms"] for r in results if r["eof_ms"] is not None]
    statuses = {}
    for r in results:
        key = f"{r['status']} {r['reason']}"
        statuses[key] = statuses.get(key, 0) + 1
    res = {
        "fillers": args.fill,
        "refused_connections": args.count,
        "concurrency": args.concurrency,
        "wall_seconds": round(wall, 3),
        "statuses": statuses,
        "still_saturated_at_end": probe_end["status"] == 503,
        "connect_to_full_503_ms": {
            "p50": round(pct(resp, 50), 3), "p99": round(pct(resp, 99), 3),
            "max": round(max(resp), 3), "mean": round(statistics.mean(resp), 3),
        },
        "connect_to_eof_ms": {
            "p50": round(pct(eofs, 50), 3), "p99": round(pct(eofs, 99), 3),
            "max": round(max(eofs), 3), "count": len(eofs),
        } if eofs else None,
        "connect_only_ms_p50": round(pct([r["connect_ms"] for r in results], 50), 3),
    }
    print(json.dumps(res, indent=2))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("free-port")
    a.add_argument("--host", default="127.0.0.1")
    a.set_defaults(fn=free_port)
    a = sub.add_parser("serve-summary")
    a.add_argument("tsv")
    a.add_argument("--json")
    a.add_argument("--meta")
    a.set_defaults(fn=serve_summary)
    a = sub.add_parser("fetch-summary")
    a.add_argument("tsv")
    a.add_argument("--bytes", type=int, required=True)
    a.add_argument("--json")
    a.add_argument("--meta")
    a.set_defaults(fn=fetch_summary)
    for name, fn in (("idle", idle), ("refuse", refuse)):
        a = sub.add_parser(name)
        a.add_argument("--host", default="127.0.0.1")
        a.add_argument("--port", type=int, required=True)
        a.add_argument("--path", required=True)
        a.add_argument("--count", type=int, default=1000)
        a.add_argument("--concurrency", type=int, default=64)
        if name == "idle":
            a.add_argument("--size", type=int, required=True)
            a.add_argument("--pid", type=int, required=True)
            a.add_argument("--warmup", type=int, default=16)
            a.add_argument("--settle", type=float, default=0.5)
        else:
            a.add_argument("--fill", type=int, required=True)
            a.add_argument("--fill-path", required=True)
        a.set_defaults(fn=lambda args, fn=fn: asyncio.run(fn(args)))
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
