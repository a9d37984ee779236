#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make wan: the relay over a slow and faulty WAN link, long versions of tests/e2e/test_wan.sh.
# Nothing here fails on a figure; each run prints what happened and what it cost.
#   cjrelay-sim (FL server) <- tests/e2e/linkshaper <- cjrelayd (site-1.J1) <- cjrelay-worker
# 1. slow link: one round, a WAN_SIZE_MIB task downloaded by the worker and its WAN_SIZE_MIB
#    result uploaded, through WAN_RATE bit/s with WAN_DELAY_MS each way
# 2. the same link resetting every WAN_RESET_MIB in the download direction, then (another run)
#    in the upload direction: every connection is reset after that many bytes that way
# 3. the same link stalling WAN_STALL s in the middle of the task download and of the result
#    upload (the connection kept)
# For each: the simulator's verdict, wall time, the relay's CPU (user + system, /proc/PID/stat),
# its peak RSS (VmHWM), its reconnects, and the faults the shaper logged.
# Defaults (the full run takes about an hour: each 1 GiB way about 7 minutes, each reset one
# 60 s request timeout, the server's for an upload, the worker's for a download; see
# doc/performance.md):
#   WAN_SIZE_MIB=1024 WAN_RATE=20M WAN_DELAY_MS=80 WAN_RESET_MIB=200 WAN_STALL=60 WAN_SCHEME=tcp
#   WAN_REQ_TIMEOUT=60 (the worker's per-request download timeout, FLARE's
#   np_streaming_per_request_timeout, 600 s by default: here as the simulator's --fetch-timeout)
#   WAN_RUNS="slow reset-down reset-up stall" (which of them to run)
#   WAN_SEGMENT=1448: the shaper sends at most that many bytes at a time, spaced by the rate, as a
#   WAN link delivers its segments (unset: it sends what the rate allows every few milliseconds)
# A quick try: WAN_SIZE_MIB=64 WAN_RESET_MIB=16 WAN_STALL=10 make wan
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${CJ_BIN:-$ROOT/build}
SIZE=${WAN_SIZE_MIB:-1024}; RATE=${WAN_RATE:-20M}; DELAY=${WAN_DELAY_MS:-80}
RESET=${WAN_RESET_MIB:-200}; STALL=${WAN_STALL:-60}; SC=${WAN_SCHEME:-tcp}; REQT=${WAN_REQ_TIMEOUT:-60}
RUNS=${WAN_RUNS:-slow reset-down reset-up stall}
W=$(mktemp -d); SIM=; RELAY=; SHAPER=
cleanup() {
    for p in $SHAPER $SIM $RELAY; do kill -9 "$p" 2>/dev/null; done
    if [ -n "$KEEP" ]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
K=$W/certs
case $SC in stcp) sh "$ROOT/tests/unit/tls_certs.sh" "$K" || { echo "wan: cannot make certificates"; exit 1; } ;; esac
. "$ROOT/tests/e2e/wait.sh"   # wait_for SECS CMD...
# the shaper's whole run must end: its own limit is the longest a round may take at this rate
# (task and result, each retried a few times) plus the stalls
LIMIT=$(( SIZE * 8 * 1048576 * 8 / $(echo "$RATE" | sed 's/[Gg]$/000000000/; s/[Mm]$/000000/; s/[Kk]$/000/') + 4 * STALL + 600 ))

start_sim() { # start_sim ARGS...: sets SIM, SIMPORT
    tls=; [ "$SC" = stcp ] && tls="--tls-dir $K"
    # shellcheck disable=SC2086
    "$B/cjrelay-sim" --listen "$SC://127.0.0.1:0" $tls --job-id J1 --rounds 1 --model-size "${SIZE}M" \
        --tensors 8 --format numpy "$@" > "$R/sim.out" 2> "$R/sim.err" & SIM=$!
    wait_for 10 grep -q '^SIM READY' "$R/sim.out"; SIMPORT=$(awk '/^SIM READY/ {print $3}' "$R/sim.out")
}
start_shaper() { # start_shaper ARGS...: sets SHAPER, SHPORT
    "$B/tests/e2e/linkshaper" --listen 127.0.0.1:0 --to "127.0.0.1:$SIMPORT" --rate "$RATE" --delay "$DELAY" \
        --exit-after "$LIMIT" ${WAN_SEGMENT:+--segment "$WAN_SEGMENT"} "$@" > "$R/shaper.out" 2> "$R/shaper.log" & SHAPER=$!
    wait_for 5 grep -q '^SHAPER READY' "$R/shaper.out"; SHPORT=$(awk '/^SHAPER READY/ {print $3}' "$R/shaper.out")
}
start_relay() {
    set --
    [ "$SC" = stcp ] && set -- "upstream.connection_security = mtls" "upstream.ca_file = $K/rootCA.pem" \
        "upstream.cert_file = $K/client.crt" "upstream.key_file = $K/client.key"
    {
        printf '[relay]\nsite = site-1\njob_id = J1\non_end_run = wait\n[upstream]\nurl = %s://127.0.0.1:%s\nproject_name = example_project\n' "$SC" "$SHPORT"
        printf 'reconnect_min = 0.5\nreconnect_max = 5\n'
        for kv in "$@"; do printf '%s\n' "${kv#upstream.}"; done
        printf '[workers]\nlisten = unix:%s/w.sock\ncommand = %s/cjrelay-worker\ncount = 1\n' "$R" "$B"
        printf '[status]\nsocket = %s/status.sock\n[log]\nlevel = info\n' "$R"
    } > "$R/relay.ini"
    NVFLARE_NP_STREAMING_PER_REQUEST_TIMEOUT=$REQT "$B/cjrelayd" -c "$R/relay.ini" > "$R/relay.log" 2>&1 & RELAY=$!
}
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / t }' "/proc/$1/stat"; }
hwm() { awk '$1 == "VmHWM:" { printf "%d MiB", $2 / 1024 }' "/proc/$1/status"; }
stop_run() {
    for p in $RELAY $SHAPER $SIM; do kill -TERM "$p" 2>/dev/null; done
    sleep 1
    for p in $RELAY $SHAPER $SIM; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    RELAY=; SHAPER=; SIM=
}
# one NAME SIM-ARGS -- SHAPER-ARGS: a round through the shaped link, then its figures
one() {
    name=$1; shift; R=$W/$name; mkdir -p "$R"
    sargs=; while [ $# -gt 0 ] && [ "$1" != -- ]; do sargs="$sargs $1"; shift; done; shift
    # shellcheck disable=SC2086
    start_sim $sargs
    start_shaper "$@"
    start_relay
    t0=$(date +%s.%N)
    wait_for "$LIMIT" sh -c "! kill -0 $SIM" || echo "$name: the simulator did not end in $LIMIT s"
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    echo "== $name: ${SIZE} MiB task + result, $SC through $RATE bit/s, $DELAY ms each way; shaper: $*"
    echo "   simulator: $(tail -1 "$R/sim.out")"
    grep -E '^ROUND' "$R/sim.out" | cut -c1-160 | sed 's/^/   /'
    printf '   wall %.1f s, relay CPU %s s (user + system), relay peak RSS %s, upstream connections %s\n' \
        "$secs" "$(cpu_s "$RELAY")" "$(hwm "$RELAY")" "$(grep -c ': accepted' "$R/shaper.log")"
    grep -E 'reset after|stall start|stall end|half-open' "$R/shaper.log" | sed 's/^linkshaper /   shaper: /' | head -8
    grep -E 'upstream lost|upstream up .*after|failure reported|submit_update .*attempt [2-9]|timed out|presumed dead|DOWNLOAD_(RETRY|RECOVERED|FAILED)' \
        "$R/relay.log" | cut -c1-200 | sed 's/^/   relay: /' | head -12
    grep -E 'DOWNLOAD_RETRY|DOWNLOAD_FAILED' "$R/sim.err" | cut -c1-200 | sed 's/^/   sim: /' | head -4
    stop_run
}

HALF=$((SIZE / 2))
for run in $RUNS; do
    case $run in
        slow) one slow -- ;;
        reset-down) one reset-down --max-failures 3 -- --reset-after "${RESET}M" --dir down ;;
        reset-up) one reset-up --max-failures 3 -- --reset-after "${RESET}M" --dir up ;;
        stall) one stall -- --stall-after "${HALF}M" --stall "$STALL" --fault-conns 1 ;;
        *) echo "wan: unknown run '$run' (slow, reset-down, reset-up, stall)"; exit 2 ;;
    esac
done
