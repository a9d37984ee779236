#!/bin/sh
# make bench: a first benchmark harness (issue 7). It reports numbers; nothing here fails
# on a timing. Each job is the real thing:
#   cjrelay-sim (FL server) <- cjrelayd (site-1.J1) <- cjrelay-worker (launched by the relay)
# in a temporary directory, over a Unix socket between relay and worker.
#
#   1. memory vs model size: relay idle RSS and peak RSS (VmHWM) for 64M, 512M, 2G models
#      (1 round, 1 worker, numpy, pass-through), and the growth from smallest to largest
#   2. throughput through the relay: the sim's MiB/s for a 512M round, median of 3 runs
#      (the direct link, a worker talking to the sim without a relay, does not exist yet)
#   3. task latency: many rounds of a tiny model, ms per round
#
# Prints a table and writes build/bench/results.json (printf only, no Python).
# Environment knobs (defaults in brackets): BENCH_MODELS [64M 512M 2G],
# BENCH_TPUT_MODEL [512M], BENCH_TPUT_RUNS [3], BENCH_LAT_ROUNDS [200], BENCH_SIM_ARGS [],
# BENCH_JOB_TIMEOUT [240 s per job].
MODELS=${BENCH_MODELS:-64M 512M 2G}
TPUT_MODEL=${BENCH_TPUT_MODEL:-512M}
TPUT_RUNS=${BENCH_TPUT_RUNS:-3}
LAT_ROUNDS=${BENCH_LAT_ROUNDS:-200}
JOB_TIMEOUT=${BENCH_JOB_TIMEOUT:-240}
# Extra cjrelay-sim flags for every job (e.g. BENCH_SIM_ARGS="--window 4M"), for experiments.
SIM_EXTRA=${BENCH_SIM_ARGS:-}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/build
S=$B/cjrelay-sim; D=$B/cjrelayd; C=$B/cjrelayctl; WK=$B/cjrelay-worker
OUT=$B/bench
for f in "$S" "$D" "$C" "$WK"; do
    [ -x "$f" ] || { echo "bench: $f missing; run 'make' (or 'make bench') first" >&2; exit 1; }
done

W=$(mktemp -d /tmp/cjrelay-bench.XXXXXX) || exit 1
SIM=; RELAY=; WORKERS=

# The relay's children (its workers), by parent pid: never by name.
children_of() { [ -n "$1" ] && ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' '; }
stop_job() {
    [ -n "$RELAY" ] && WORKERS="$WORKERS $(children_of "$RELAY")"
    for p in $RELAY $SIM; do kill -TERM "$p" 2>/dev/null; done
    _i=0
    while [ $_i -lt 30 ]; do
        _alive=0
        for p in $RELAY $SIM $WORKERS; do kill -0 "$p" 2>/dev/null && _alive=1; done
        [ $_alive -eq 0 ] && break
        sleep 0.1; _i=$((_i + 1))
    done
    for p in $RELAY $SIM $WORKERS; do kill -KILL "$p" 2>/dev/null; done
    for p in $RELAY $SIM; do wait "$p" 2>/dev/null; done
    SIM=; RELAY=; WORKERS=
}
cleanup() { stop_job; rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }
now() { date +%s.%N; }
wait_for() { # wait_for SECS cmd...
    _t=$1; shift; _i=0
    while [ $_i -lt $((_t * 10)) ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; _i=$((_i + 1)); done
    return 1
}
# wait_exit PID SECS: wait for PID to end (at most SECS); its exit status, 124 on timeout.
wait_exit() {
    _i=0
    while kill -0 "$1" 2>/dev/null; do
        [ $_i -ge $(($2 * 10)) ] && return 124
        # Note the workers while the relay is alive, so stop_job can reap them by pid.
        [ -n "$RELAY" ] && WORKERS="$WORKERS $(children_of "$RELAY")"
        sleep 0.1; _i=$((_i + 1))
    done
    wait "$1"
}
dedup_workers() { WORKERS=$(echo $WORKERS | tr ' ' '\n' | sort -u | tr '\n' ' '); }

# start_job NAME SIM-ARGS...: sim + relay (1 worker, on_end_run = wait); sets SIM RELAY T0.
start_job() {
    n=$1; shift
    "$S" --listen tcp://127.0.0.1:0 --job-id J1 "$@" $SIM_EXTRA > "$W/$n.sim" 2> "$W/$n.simlog" & SIM=$!
    if ! wait_for 10 grep -q '^SIM READY' "$W/$n.sim"; then
        echo "bench: $n: the simulator did not start" >&2; sed 's/^/  /' "$W/$n.simlog" >&2; return 1
    fi
    port=$(awk '/^SIM READY/ {print $3}' "$W/$n.sim")
    cat > "$W/$n.ini" <<EOF
[relay]
site = site-1
job_id = J1
on_end_run = wait
[upstream]
url = tcp://127.0.0.1:$port
[workers]
listen = unix:$W/$n.w.sock
command = $WK
count = 1
heartbeat_interval = 1
heartbeat_timeout = 10
shutdown_grace = 2
[status]
socket = $W/$n.status.sock
EOF
    T0=$(now)
    "$D" -c "$W/$n.ini" > "$W/$n.relay" 2>&1 & RELAY=$!
    return 0
}
# finish_job NAME: wait for the sim (JOB_TIMEOUT), shut the relay down; sets RC T1.
finish_job() {
    wait_exit "$SIM" "$JOB_TIMEOUT"; RC=$?
    T1=$(now)
    [ $RC -eq 124 ] && echo "bench: $1: the simulator did not finish in ${JOB_TIMEOUT}s" >&2
    [ $RC -eq 0 ] || { tail -3 "$W/$1.sim" | sed 's/^/  sim: /' >&2; tail -5 "$W/$1.relay" | sed 's/^/  relay: /' >&2; }
}
end_job() {
    WORKERS="$WORKERS $(children_of "$RELAY")"
    "$C" -s "$W/$1.status.sock" shutdown >/dev/null 2>&1
    wait_exit "$RELAY" 10 >/dev/null
    dedup_workers
    stop_job
}
# mib_s NAME: MiB/s of the first verified round
mib_s() { sed -n 's/^ROUND .* verified .*MiB\/s=\([0-9.]*\).*/\1/p' "$W/$1.sim" | head -1; }
median() { sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }

mkdir -p "$OUT"
echo "bench: in $W ($(nproc) cores); binaries from $B"

# ---- 1. memory vs model size ------------------------------------------------------------
MEM_JSON=; FIRST_PEAK=; LAST_PEAK=; FIRST_M=; LAST_M=
MEM_ROWS=
for m in $MODELS; do
    n=mem-$m
    echo "bench: memory, model $m ..."
    start_job "$n" --rounds 1 --model-size "$m" --tensors 8 --format numpy || { stop_job; continue; }
    # idle: as soon as the status socket answers (the relay is up, its worker starting);
    # small models may already be in flight, so "after" (the round done) is shown too.
    wait_for 15 "$C" -s "$W/$n.status.sock" show info
    idle=$(kb "$RELAY" VmRSS)
    finish_job "$n"
    after=$(kb "$RELAY" VmRSS)
    peak=$(kb "$RELAY" VmHWM)
    tp=$(mib_s "$n")
    end_job "$n"
    ok=false; [ $RC -eq 0 ] && grep -q '^SIM OK rounds=1' "$W/$n.sim" && ok=true
    MEM_ROWS="$MEM_ROWS$(printf '  %-6s %12s %12s %12s %10s %6s' "$m" "${idle:-?}" "${after:-?}" "${peak:-?}" "${tp:-?}" "$ok")
"
    MEM_JSON="$MEM_JSON${MEM_JSON:+,}$(printf '\n    {"model": "%s", "idle_rss_kib": %s, "after_rss_kib": %s, "peak_rss_kib": %s, "round_mib_s": %s, "ok": %s}' \
        "$m" "${idle:-null}" "${after:-null}" "${peak:-null}" "${tp:-null}" "$ok")"
    if [ -z "$FIRST_PEAK" ]; then FIRST_PEAK=$peak; FIRST_M=$m; fi
    LAST_PEAK=$peak; LAST_M=$m
done
GROWTH=null
[ -n "$FIRST_PEAK" ] && [ -n "$LAST_PEAK" ] && GROWTH=$((LAST_PEAK - FIRST_PEAK))

# ---- 2. throughput through the relay -----------------------------------------------------
TPUT_LIST=
i=1
while [ $i -le "$TPUT_RUNS" ]; do
    n=tput-$i
    echo "bench: throughput, model $TPUT_MODEL, run $i/$TPUT_RUNS ..."
    if start_job "$n" --rounds 1 --model-size "$TPUT_MODEL" --tensors 8 --format numpy; then
        finish_job "$n"
        tp=$(mib_s "$n")
        [ $RC -eq 0 ] && [ -n "$tp" ] && TPUT_LIST="$TPUT_LIST $tp"
        end_job "$n"
    else
        stop_job
    fi
    i=$((i + 1))
done
TPUT_MED=$(echo $TPUT_LIST | tr ' ' '\n' | median)
TPUT_JSON=$(echo $TPUT_LIST | tr ' ' ',')

# ---- 3. task latency ----------------------------------------------------------------------
n=lat
echo "bench: latency, $LAT_ROUNDS rounds of a 4K model ..."
LAT_WALL=; LAT_P50=; LAT_P99=; LAT_MEAN=; LAT_OK=false
if start_job "$n" --rounds "$LAT_ROUNDS" --model-size 4K --tensors 1 --format numpy --wait-time 0; then
    finish_job "$n"
    end_job "$n"
    got=$(grep -c '^ROUND .* verified' "$W/$n.sim")
    [ $RC -eq 0 ] && [ "$got" -eq "$LAT_ROUNDS" ] && LAT_OK=true
    # Per round: the sim's secs (task sent -> result verified), in ms.
    sed -n 's/^ROUND .* verified .*secs=\([0-9.]*\).*/\1/p' "$W/$n.sim" | sort -n > "$W/lat.secs"
    if [ -s "$W/lat.secs" ]; then
        LAT_P50=$(awk '{v[NR] = $1} END {printf "%.2f", 1000 * v[int((NR + 1) / 2)]}' "$W/lat.secs")
        LAT_P99=$(awk '{v[NR] = $1} END {i = int(NR * 0.99 + 0.999); if (i > NR) i = NR; printf "%.2f", 1000 * v[i]}' "$W/lat.secs")
        LAT_MEAN=$(awk '{s += $1} END {printf "%.2f", 1000 * s / NR}' "$W/lat.secs")
    fi
    # Wall clock: relay start -> sim exit, less the sim's 1 s linger after __end_run__;
    # includes relay start-up and the worker's launch, so it is an upper bound.
    LAT_WALL=$(awk -v a="$T0" -v b="$T1" -v r="$got" 'BEGIN {if (r > 0) printf "%.2f", 1000 * (b - a - 1) / r}')
else
    stop_job
fi

# ---- table and JSON ---------------------------------------------------------------------
echo
echo "cjrelay bench ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(uname -m))"
echo
echo "1. relay memory vs model size (1 round, 1 worker, numpy, pass-through; KiB)"
printf '  %-6s %12s %12s %12s %10s %6s\n' model "idle VmRSS" "after VmRSS" "peak VmHWM" "MiB/s" ok
printf '%s' "$MEM_ROWS"
echo "  growth of peak RSS, $FIRST_M -> $LAST_M: $GROWTH KiB"
echo
echo "2. throughput, model $TPUT_MODEL, 1 worker (MiB/s of the round, median of $TPUT_RUNS)"
echo "  through the relay (unix socket): ${TPUT_MED:-?}   runs:${TPUT_LIST:- none}"
echo "  direct, no relay:                n/a (needs a direct mode: no worker can talk to the sim without a relay yet)"
echo "  ratio direct/relay:              n/a"
echo
echo "3. task latency, $LAT_ROUNDS rounds, 4K model, 1 tensor, wait-time 0 (ms per round; the sim prints secs to 1 ms)"
echo "  per round (sim: task sent -> result verified): p50 ${LAT_P50:-?}  p99 ${LAT_P99:-?}  mean ${LAT_MEAN:-?}"
echo "  wall clock / rounds (incl. relay start-up):    ${LAT_WALL:-?}   all rounds verified: $LAT_OK"

{
    printf '{\n  "date": "%s",\n  "cores": %s,\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)"
    printf '  "memory": {\n    "mode": "pass-through", "workers": 1, "format": "numpy", "rounds": 1,\n'
    printf '    "models": [%s\n    ],\n' "$MEM_JSON"
    printf '    "peak_growth_kib": %s, "from": "%s", "to": "%s"\n  },\n' "$GROWTH" "$FIRST_M" "$LAST_M"
    printf '  "throughput": {\n    "model": "%s", "runs_mib_s": [%s],\n' "$TPUT_MODEL" "$TPUT_JSON"
    printf '    "relay_mib_s_median": %s,\n' "${TPUT_MED:-null}"
    printf '    "direct_mib_s_median": null, "ratio_direct_over_relay": null,\n'
    printf '    "direct_note": "n/a: needs a direct mode (a worker talking to the sim without a relay)"\n  },\n'
    printf '  "latency": {\n    "rounds": %s, "model": "4K", "all_verified": %s,\n' "$LAT_ROUNDS" "$LAT_OK"
    printf '    "round_ms_p50": %s, "round_ms_p99": %s, "round_ms_mean": %s,\n' \
        "${LAT_P50:-null}" "${LAT_P99:-null}" "${LAT_MEAN:-null}"
    printf '    "wall_ms_per_round": %s\n  }\n}\n' "${LAT_WALL:-null}"
} > "$OUT/results.json"
echo
echo "bench: wrote $OUT/results.json"
