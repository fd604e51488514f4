# shellcheck shell=bash
# Shared helpers for the bench/ scripts: installing what they need, building the binaries,
# free loopback ports, starting and stopping servers, checking bytes. Sourced, not run.
# Every process a script starts through `start_bg` is stopped by `cleanup` (installed as an
# EXIT/INT/TERM trap by `setup_tmp`), and the temporary directory is removed.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
BENCHTOOL="$BENCH_DIR/lib/benchtool.py"
STARTED_PIDS=()
BENCH_TMP=""
KEEP_TMP=0

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# need_cmds CMD:PACKAGE...: installs the Debian package of every missing command.
need_cmds() {
    local missing=() pair cmd pkg
    for pair in "$@"; do
        cmd=${pair%%:*}
        pkg=${pair#*:}
        if ! command -v "$cmd" >/dev/null 2>&1 && [[ ! -x "/usr/sbin/$cmd" ]]; then
            missing+=("$pkg")
        fi
    done
    if ((${#missing[@]})); then
        log "installing ${missing[*]}"
        if [[ $(id -u) -ne 0 ]]; then
            die "missing packages ${missing[*]} and not root: install them first"
        fi
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    fi
}

# The nginx binary (Debian puts it in /usr/sbin, which a non-login PATH may lack).
nginx_bin() { command -v nginx 2>/dev/null || echo /usr/sbin/nginx; }

# PEERBLOCK_NODE_BIN / HYPER_BASELINE_BIN name prebuilt binaries (then nothing is built).
node_bin() { echo "${PEERBLOCK_NODE_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/peerblock-node}"; }
hyper_bin() { echo "${HYPER_BASELINE_BIN:-${CARGO_TARGET_DIR:-$BENCH_DIR/hyper-baseline/target}/release/hyper-baseline}"; }

# build_node: release build of peerblock-node (skipped with NO_BUILD=1 or PEERBLOCK_NODE_BIN).
build_node() {
    if [[ ${NO_BUILD:-0} == 1 || -n ${PEERBLOCK_NODE_BIN:-} ]]; then
        [[ -x $(node_bin) ]] || die "NO_BUILD=1 but $(node_bin) does not exist"
        return
    fi
    log "building peerblock-node (release)"
    (cd "$REPO" && nice cargo build --release -q -p peerblock-node --bin peerblock-node) >&2
}

# build_hyper: release build of the hyper baseline (its own crate and lock).
build_hyper() {
    if [[ ${NO_BUILD:-0} == 1 || -n ${HYPER_BASELINE_BIN:-} ]]; then
        [[ -x $(hyper_bin) ]] || die "NO_BUILD=1 but $(hyper_bin) does not exist"
        return
    fi
    log "building hyper-baseline (release)"
    nice cargo build --release -q --manifest-path "$BENCH_DIR/hyper-baseline/Cargo.toml" >&2
}

# free_port [HOST]: a loopback port that is free now (the kernel's choice for port 0).
free_port() { python3 "$BENCHTOOL" free-port --host "${1:-127.0.0.1}"; }

# setup_tmp NAME: a temporary directory for this run, and the cleanup trap.
setup_tmp() {
    BENCH_TMP=$(mktemp -d "/tmp/peerblock-$1.XXXXXX")
    chmod 755 "$BENCH_TMP"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

cleanup() {
    local pid
    for pid in "${STARTED_PIDS[@]}"; do
        stop_pid "$pid"
    done
    STARTED_PIDS=()
    if [[ -n $BENCH_TMP && -d $BENCH_TMP ]]; then
        if ((KEEP_TMP)); then
            log "kept $BENCH_TMP"
        else
            rm -rf "$BENCH_TMP"
        fi
    fi
}

# start_bg LOG CMD ARGS...: starts a process in the background; its pid is in STARTED_PID.
start_bg() {
    local out=$1
    shift
    "$@" >"$out" 2>&1 &
    STARTED_PID=$!
    STARTED_PIDS+=("$STARTED_PID")
}

# stop_pid PID: SIGTERM, up to 10 s for a graceful exit, then SIGKILL.
stop_pid() {
    local pid=$1 i keep=() p
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid did not stop within 10 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    wait "$pid" 2>/dev/null || true
    for p in "${STARTED_PIDS[@]}"; do
        [[ $p == "$pid" ]] || keep+=("$p")
    done
    STARTED_PIDS=("${keep[@]}")
}

# wait_http PID URL LOG: waits (up to 30 s) until URL answers 200, failing early if PID died.
wait_http() {
    local pid=$1 url=$2 out=$3 i
    for ((i = 0; i < 300; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "server exited before answering $url; its log:"
            tail -n 20 "$out" >&2 || true
            return 1
        fi
        if [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true) == 200 ]]; then
            return 0
        fi
        sleep 0.1
    done
    log "no 200 from $url within 30 s; server log:"
    tail -n 20 "$out" >&2 || true
    return 1
}

# verify_bytes URL FILE: the server answers URL with exactly FILE's bytes.
verify_bytes() {
    local url=$1 want=$2 got
    got="$BENCH_TMP/verify.$$"
    curl -sS --fail -o "$got" --max-time 10 "$url" || die "GET $url failed"
    cmp -s "$got" "$want" || die "GET $url: the body differs from $want"
    rm -f "$got"
}

# machine_line: one line describing this machine and its load, for the logs and the doc.
machine_line() {
    printf 'cores=%s model=%s kernel=%s loadavg=%s commit=%s' \
        "$(nproc)" \
        "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1 | tr ' ' '_')" \
        "$(uname -r)" "$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/')" \
        "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
}

loadavg1() { cut -d' ' -f1 /proc/loadavg; }
