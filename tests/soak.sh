#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# soak.sh — the long run (make soak; not part of make check): many rounds, a worker killed every SOAK_KILL_EVERY.
#
#   cjrelay-sim (SOAK_ROUNDS rounds, a small model) <- cjrelayd <- 4 cjrelay-worker
#
# A worker is killed (SIGKILL, round robin) every SOAK_KILL_EVERY rounds; the relay
# relaunches it and the round it held fails and is re-issued by the simulator.
# Bounds (exit 1 when one fails, with a summary line either way):
#   - every round accounted for: SIM OK rounds=N, N "ROUND ... verified" lines, and every
#     TASK the simulator handed out is verified or FAILED (a failed one is re-issued)
#   - relay RSS at the end within SOAK_RSS_PCT (1) % of its RSS at round SOAK_BASE
#   - relay open fds (ls /proc/PID/fd) at the end equal to their count at round SOAK_BASE
# "At round SOAK_BASE" and "at the end" are both measured mid-run, right before the kill
# of that boundary (all workers up, between the same kind of rounds): round SOAK_BASE and
# the last multiple of SOAK_KILL_EVERY before N, so the two samples see the same state.
# Each sample is the largest of SOAK_SAMPLES readings 50 ms apart.
# The baseline is round SOAK_KILL_EVERY (100), where the bound is taken.  The relay's
# bounded tables are sized to be full by then (512 stream states on its own endpoint,
# about 7 a round; 64 finished tasks), so growth after it is drift.  SOAK_BASE=1000
# measures from mid-run instead (steady state), for comparison.
#
# Environment: SOAK_ROUNDS (2000), SOAK_KILL_EVERY (100), SOAK_BASE (a multiple of
# SOAK_KILL_EVERY below the last boundary; default SOAK_KILL_EVERY), SOAK_WORKERS (4),
# SOAK_MODEL (256K), SOAK_TENSORS (4), SOAK_RSS_PCT (1), SOAK_SAMPLES (5),
# SOAK_TIMEOUT (seconds for the whole run; default 1 s per round + 120), KEEP=1 keeps
# the work directory, CJ_BIN / CJ_SAN as in tests/e2e/lib.sh.
# lib.sh finds the source root from its caller's path two levels up (tests/e2e/x.sh);
# this script is one level up, so give it the binaries' directory and the log dir.
_root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${CJ_SAN:-0}" = 1 ]; then
    CJ_BIN=${CJ_BIN:-$_root/build/san}; CJ_SAN_LOG=${CJ_SAN_LOG:-$_root/build/san/e2e-logs/soak}
else
    CJ_BIN=${CJ_BIN:-$_root/build}
fi
case $CJ_BIN in /*) ;; *) CJ_BIN=$_root/$CJ_BIN ;; esac
. "$_root/tests/e2e/lib.sh"
N=${SOAK_ROUNDS:-2000}
EVERY=${SOAK_KILL_EVERY:-100}
NW=${SOAK_WORKERS:-4}
MODEL=${SOAK_MODEL:-256K}
TENSORS=${SOAK_TENSORS:-4}
PCT=${SOAK_RSS_PCT:-1}
SAMPLES=${SOAK_SAMPLES:-5}
TMO=${SOAK_TIMEOUT:-$((N + 120))}
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim; WK=$BUILD/cjrelay-worker
W=$(mktemp -d); SIM=; RELAY=
cleanup() {
    [ -n "$SIM" ] && kill -9 "$SIM" 2>/dev/null
    if [ -n "$RELAY" ]; then   # SIGTERM: the relay stops its workers
        kill -TERM "$RELAY" 2>/dev/null
        for _i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do kill -0 "$RELAY" 2>/dev/null || break; sleep 0.25; done
        kill -9 "$RELAY" 2>/dev/null
    fi
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
[ "$N" -ge $((2 * EVERY)) ] || { echo "soak: SOAK_ROUNDS ($N) must be at least 2 x SOAK_KILL_EVERY ($EVERY)"; exit 2; }
LAST=$(( (N - 1) / EVERY * EVERY ))   # the last kill boundary before the end
BASE=${SOAK_BASE:-$EVERY}
[ "$BASE" -ge "$EVERY" ] || BASE=$EVERY
[ $((BASE % EVERY)) -eq 0 ] && [ "$BASE" -lt "$LAST" ] ||
    { echo "soak: SOAK_BASE ($BASE) must be a multiple of $EVERY below the last boundary ($LAST)"; exit 2; }

rss() { awk '/^VmRSS/ {print $2}' "/proc/$RELAY/status" 2>/dev/null; }    # kB
nfd() { ls "/proc/$RELAY/fd" 2>/dev/null | wc -l; }
# sample: sets S_RSS (largest of SAMPLES readings) and S_FD (fd count at the last one)
ready_workers() { $C -s "$W/status.sock" show workers json 2>/dev/null | jq '[.workers[] | select(.pid > 0 and .state != "lost")] | length'; }
sample() {
    # the same state both times: every worker up (a killed one may be in its relaunch back-off)
    _i=0; while [ "$(ready_workers)" -lt "$NW" ] && [ $_i -lt 300 ]; do sleep 0.1; _i=$((_i + 1)); done
    S_RSS=0; _i=0
    while [ $_i -lt "$SAMPLES" ]; do
        _r=$(rss); [ "${_r:-0}" -gt "$S_RSS" ] && S_RSS=$_r
        _i=$((_i + 1)); sleep 0.05
    done
    S_FD=$(nfd)
}
verified() { grep -c '^ROUND [0-9]* .*verified' "$W/sim.out"; }
worker_pids() { $C -s "$W/status.sock" show workers json 2>/dev/null | jq -r '.workers[] | select(.pid > 0) | .pid'; }

$S --listen tcp://127.0.0.1:0 --job-id J1 --rounds "$N" --model-size "$MODEL" --tensors "$TENSORS" \
    --wait-time 0.05 --max-failures $((N / EVERY + 20)) --log-level warning > "$W/sim.out" 2> "$W/sim.err" & SIM=$!
for _i in $(seq 100); do grep -q '^SIM READY' "$W/sim.out" && break; sleep 0.1; done
PORT=$(awk '/^SIM READY/ {print $3}' "$W/sim.out")
[ -n "$PORT" ] || { echo "soak: the simulator did not start"; cat "$W/sim.err"; exit 2; }
cat > "$W/relay.ini" <<EOF
[relay]
site = site-1
job_id = J1
on_end_run = wait
[upstream]
url = tcp://127.0.0.1:$PORT
project_name = example_project
get_task_interval = 0.05
[workers]
listen = unix:$W/w.sock
command = $WK
count = $NW
heartbeat_interval = 1
heartbeat_timeout = 5
shutdown_grace = 2
[status]
socket = $W/status.sock
[log]
level = warning
EOF
$D -c "$W/relay.ini" > "$W/relay.log" 2>&1 & RELAY=$!

T0=$(date +%s)
next=$EVERY; kills=0; R100=; RBASE=; FBASE=; REND=; FEND=; k=0
echo "soak: $N rounds of $MODEL ($TENSORS tensors), $NW workers, a worker killed every $EVERY rounds; relay pid $RELAY"
while kill -0 "$SIM" 2>/dev/null; do
    if [ $(($(date +%s) - T0)) -gt "$TMO" ]; then echo "soak: timed out after $TMO s"; break; fi
    v=$(verified)
    if [ "$v" -ge "$next" ] && [ "$next" -lt "$N" ]; then
        if [ "$next" -eq "$EVERY" ] || [ "$next" -eq "$BASE" ] || [ "$next" -eq "$LAST" ]; then
            sample
            [ "$next" -eq "$EVERY" ] && R100=$S_RSS
            if [ "$next" -eq "$BASE" ]; then RBASE=$S_RSS; FBASE=$S_FD; fi
            if [ "$next" -eq "$LAST" ]; then REND=$S_RSS; FEND=$S_FD; fi
            echo "soak: round $v: relay RSS $S_RSS kB, $S_FD fds, $(ready_workers) workers up, show tasks $($C -s "$W/status.sock" show tasks json | jq '.tasks | length') rows, show refs $($C -s "$W/status.sock" show refs json | jq '.refs | length') rows"
        fi
        set -- $(worker_pids)
        if [ $# -gt 0 ]; then
            k=$((k % $# + 1)); eval "victim=\${$k}"
            kill -KILL "$victim" 2>/dev/null && kills=$((kills + 1))
        fi
        next=$((next + EVERY))
        [ $((next % 500)) -eq 0 ] && echo "soak: $v rounds verified after $(($(date +%s) - T0)) s"
    fi
    sleep 0.1
done
wait "$SIM" 2>/dev/null; SIMRC=$?; SIM=
T=$(($(date +%s) - T0))

# ---- accounting ---------------------------------------------------------------------------
v=$(verified); failed=$(grep -c '^ROUND [0-9]* .*FAILED' "$W/sim.out"); tasks=$(grep -c '^TASK' "$W/sim.out")
unacc=0
for t in $(sed -n 's/^TASK [0-9]* task=\([^ ]*\) .*/\1/p' "$W/sim.out"); do
    grep -Eq "^ROUND [0-9]+ task=$t .*(verified|FAILED)" "$W/sim.out" || unacc=$((unacc + 1))
done
bad=0
problem() { echo "soak: FAIL: $*"; bad=1; }
[ "$SIMRC" -eq 0 ] && grep -q "^SIM OK rounds=$N\$" "$W/sim.out" || problem "simulator: $(tail -1 "$W/sim.out") (exit $SIMRC)"
[ "$v" -eq "$N" ] || problem "$v of $N rounds verified"
[ "$unacc" -eq 0 ] || problem "$unacc of $tasks tasks neither verified nor failed"
if [ -n "$RBASE" ] && [ -n "$REND" ]; then
    drift=$(awk -v a="$RBASE" -v b="$REND" 'BEGIN { printf "%+.2f", (b - a) * 100.0 / a }')
    awk -v a="$RBASE" -v b="$REND" -v p="$PCT" 'BEGIN { d = b - a; if (d < 0) d = -d; exit !(d * 100.0 <= p * a) }' ||
        problem "relay RSS drifted $drift % from round $BASE to round $LAST (bound $PCT %)"
    [ "$FEND" -eq "$FBASE" ] || problem "relay fds $FBASE at round $BASE, $FEND at round $LAST"
else
    drift=n/a; problem "no RSS sample (rounds reached: $v)"
fi
if [ "$CJ_SAN" = 1 ]; then echo "soak: (ASan build: the RSS figures include shadow memory)"; fi
echo "SOAK rounds=$N verified=$v tasks=$tasks failed_rounds=$failed kills=$kills" \
     "rss_after_$EVERY=${R100:-?}kB rss_at_$BASE=${RBASE:-?}kB rss_at_$LAST=${REND:-?}kB drift=${drift}%" \
     "fds_at_$BASE=${FBASE:-?} fds_at_$LAST=${FEND:-?} elapsed=${T}s result=$([ $bad -eq 0 ] && echo PASS || echo FAIL)"
if [ $bad -ne 0 ]; then
    echo "# relay log (last 15 lines):"; tail -15 "$W/relay.log" | sed 's/^/# /'
    echo "# simulator (last 5 lines):"; tail -5 "$W/sim.out" | sed 's/^/# /'
fi
exit $bad
