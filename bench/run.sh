#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make bench: numbers a site operator can compare; nothing here fails on a timing.
# Each job is the real thing in a temporary directory:
#   cjrelay-sim (FL server) <- cjrelayd (site-1.J1) <- cjrelay-worker, over a Unix socket
#
#   1. throughput: one worker downloads the same model (a) through the relay and (b) straight
#      from the simulator (cjrelay-worker --direct); MiB/s as the worker measures it (task in ->
#      every item downloaded and transformed: the same code and clock in both), median of
#      BENCH_TPUT_RUNS runs, a and b alternating so machine drift cancels
#   2. memory vs model size: relay VmRSS at start, VmRSS after the round (idle), VmHWM (peak),
#      per mode in BENCH_MODES; growth of the peak from the smallest model to the largest
#   3. task latency: BENCH_LAT_ROUNDS rounds of a 4K model; the relay's own time per task from its
#      log (1 ms resolution): get_task reply received -> task_ready sent, and result_ready
#      accepted -> submit_update sent (this one includes the __task_check__ round trip to the
#      server the relay makes first, as FLARE's client does); plus the sim's time per round
#   4. fan-in: BENCH_FANIN workers download at once through the relay (each a
#      cjrelay-worker --direct --cell site-1.J1.bN on the relay's socket: the simulator gives one
#      task per requesting cell); aggregate MiB/s, slowest worker, relay VmHWM
#   5. CPU per byte: relay instructions per relayed MiB under valgrind --tool=callgrind (perf has
#      no hardware counters here): Ir(BENCH_CPU_MODEL) - Ir(4K) over the MiB; top functions
#   6. what the machine pays: one round of BENCH_SYS_MODEL (task down to the worker, result back up)
#      per upstream scheme (tcp, stcp with mtls, http, grpc, https, grpcs; spool mode on tcp); the relay's user +
#      system CPU seconds (/proc/PID/stat) and read/write syscalls (/proc/PID/io syscr/syscw) per
#      GiB relayed (each byte counted once: 2 x the model), beside a floor measured the same way in
#      the same run: bench/floor.c, a plain epoll read/write relay with 1 MiB buffers moving the
#      same bytes between the same kinds of sockets (tcp from the server, unix to the worker); and
#      a tlsfloor, the same relay with its upstream in mutual TLS through OpenSSL used the plain
#      way (socket BIO, read-ahead, 1 MiB SSL_read/SSL_write): what TLS costs any OpenSSL relay
#   7. raw transfer: a worker that only checks and drops the items (cjrelay-worker --direct --raw)
#      downloads BENCH_TPUT_MODEL, built before the task went out (cjrelay-sim --prebuild), through
#      the relay, direct, and through the floor of 6 put between the same two ends on the same
#      kinds of sockets (tcp to the simulator, unix to the worker); MiB/s, median of
#      BENCH_TPUT_RUNS; and the CPU per GiB of the relay and of the floor in those runs: the
#      same bytes at the same ends' pace, which section 6's floor (its own instant ends) is not
#   8. the raw transfer of 7 on each of FLARE's schemes (tcp, stcp, http, https, grpc, grpcs):
#      the relay's upstream and the direct worker both on the scheme, mutual TLS on the TLS ones
#   9. a site daemon: one job alone, then BENCH_JOBS jobs at once (job start), each its own
#      cell and worker; every job's MiB/s against a fair share of the one job's
#
# Prints a table and writes build/bench/results.json (printf only, no Python).
# Knobs [defaults]: BENCH_TPUT_MODEL [1G], BENCH_TPUT_RUNS [3], BENCH_MODELS [64M 512M 2G],
# BENCH_MODES [pass_through spool pass_through+nopace] (a mode the relay refuses is reported as n/a;
# "X+nopace" runs mode X with [limits] pacing = false: the router's pacing off, see lib/cell/router.c),
# BENCH_LAT_ROUNDS [1000], BENCH_FANIN [16], BENCH_FANIN_MODEL [64M per worker],
# BENCH_CPU_MODEL [256M], BENCH_CPU [1; 0 skips callgrind], BENCH_SIM_ARGS [] (extra sim flags,
# e.g. "--window 4M"), BENCH_JOB_TIMEOUT [300 s per job], BENCH_SYS_MODEL [1G], BENCH_SYS_RUNS [5],
# BENCH_JOBS [20], BENCH_JOBS_MODEL [64M], BENCH_SCHEMES [tcp stcp http https grpc grpcs] (section 8's rows),
# BENCH_PROFILE [unset; a directory: perf record -e cpu-clock -g of every process measured in sections
# 6 and 8 (the relay, the floor, the worker, the simulator), one file per run and process, for
# `perf report -i FILE --no-children --sort dso,sym`],
# BENCH_SYS_ROWS [floor tlsfloor clear tls http grpc https grpcs spool] (section 6's rows),
# BENCH_SECTIONS [tput mem lat fanin cpu sys raw schemes jobs], BENCH_BIN [build/] (the cjrelay binaries to
# measure, e.g. an older build's; the floor is always build/bench/floor).
TPUT_MODEL=${BENCH_TPUT_MODEL:-1G}
TPUT_RUNS=${BENCH_TPUT_RUNS:-3}
MODELS=${BENCH_MODELS:-64M 512M 2G}
MODES=${BENCH_MODES:-pass_through spool pass_through+nopace}
LAT_ROUNDS=${BENCH_LAT_ROUNDS:-1000}
FANIN=${BENCH_FANIN:-16}
FANIN_MODEL=${BENCH_FANIN_MODEL:-64M}
CPU_MODEL=${BENCH_CPU_MODEL:-256M}
CPU_ON=${BENCH_CPU:-1}
JOB_TIMEOUT=${BENCH_JOB_TIMEOUT:-300}
SECTIONS=${BENCH_SECTIONS:-tput mem lat fanin cpu sys raw schemes jobs}
SYS_ROWS_WANTED=${BENCH_SYS_ROWS:-floor tlsfloor clear tls http grpc https grpcs spool}
JOBS_N=${BENCH_JOBS:-20}
JOBS_MODEL=${BENCH_JOBS_MODEL:-64M}
SYS_MODEL=${BENCH_SYS_MODEL:-1G}
SYS_RUNS=${BENCH_SYS_RUNS:-5}
SIM_EXTRA=${BENCH_SIM_ARGS:-}
PROFILE=${BENCH_PROFILE:-}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${BENCH_BIN:-$ROOT/build}
S=$B/cjrelay-sim; D=$B/cjrelayd; C=$B/cjrelayctl; WK=$B/cjrelay-worker
OUT=$ROOT/build/bench; FLOOR=$ROOT/build/bench/floor
for f in "$S" "$D" "$C" "$WK"; do
    [ -x "$f" ] || { echo "bench: $f missing; run 'make' (or 'make bench') first" >&2; exit 1; }
done

W=$(mktemp -d /tmp/cjrelay-bench.XXXXXX) || exit 1
SIM=; RELAY=; WORKERS=; DIRECTS=

# ---- process control (by pid only) --------------------------------------------------------
children_of() { [ -n "$1" ] && ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' '; }
note_workers() { [ -n "$RELAY" ] && WORKERS="$WORKERS $(children_of "$RELAY")"; }
alive_any() { for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
stop_job() {
    note_workers
    for p in $DIRECTS $RELAY $SIM; do kill -TERM "$p" 2>/dev/null; done
    _i=0
    while [ $_i -lt 100 ] && alive_any $RELAY $SIM $WORKERS $DIRECTS; do sleep 0.1; _i=$((_i + 1)); done
    for p in $RELAY $SIM $WORKERS $DIRECTS; do kill -KILL "$p" 2>/dev/null; done
    for p in $DIRECTS $RELAY $SIM; do wait "$p" 2>/dev/null; done
    SIM=; RELAY=; WORKERS=; DIRECTS=
}
cleanup() { stop_job; [ -n "$BENCH_KEEP" ] && echo "bench: kept $W" || rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }
# bytes_of SIZE: "256M", "1G", "4K" or plain bytes, in bytes
bytes_of() { awk -v m="$1" 'BEGIN {u = substr(m, length(m)); v = m + 0;
    printf "%.0f", (u == "G" ? v * 1073741824 : u == "M" ? v * 1048576 : u == "K" ? v * 1024 : v)}'; }
now() { date +%s.%N; }
. "$ROOT/tests/e2e/wait.sh"   # wait_for SECS CMD...
# wait_exit PID SECS: its exit status, 124 on timeout
wait_exit() {
    _i=0
    while kill -0 "$1" 2>/dev/null; do
        [ $_i -ge $(($2 * 10)) ] && return 124
        note_workers
        sleep 0.1; _i=$((_i + 1))
    done
    wait "$1"
}
median() { sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
pct() { # pct P < numbers (sorted or not): nearest-rank percentile
    sort -n | awk -v p="$1" '{v[NR] = $1} END {if (!NR) exit; i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print v[i]}'
}
json_num() { [ -n "$1" ] && echo "$1" || echo null; }

# UP_SCHEME: how the relay reaches the simulator (tcp, stcp, http, https, grpc, grpcs; default
# tcp); the TLS ones use the certificates in $W/certs (the relay with mtls).
up_scheme() { echo "${UP_SCHEME:-tcp}"; }
up_tls() { case $(up_scheme) in stcp|https|grpcs) return 0 ;; esac; return 1; }
# profile_start NAME PID...: with BENCH_PROFILE, a CPU profile of each PID until profile_stop
# (perf's software clock: this machine has no hardware counters); NAME-PID.data in that directory
PROFILERS=
profile_start() {
    [ -n "$PROFILE" ] || return 0
    _pn=$1; shift
    mkdir -p "$PROFILE"
    for _pp in "$@"; do
        perf record -e cpu-clock -F 2000 -g -p "$_pp" -o "$PROFILE/$_pn-$_pp.data" >/dev/null 2>&1 &
        PROFILERS="$PROFILERS $!"
    done
    sleep 0.3   # perf attaches before the measured part starts
}
profile_stop() {
    [ -n "$PROFILERS" ] || return 0
    # shellcheck disable=SC2086
    kill -INT $PROFILERS 2>/dev/null; wait $PROFILERS 2>/dev/null; PROFILERS=
}

# start_sim NAME SIM-ARGS...: sets SIM PORT
start_sim() {
    _n=$1; shift
    # The background child truncates the file only after the fork: a file left by
    # an earlier run of the same name would be read first, with its stale port.
    rm -f "$W/$_n.sim"
    if up_tls; then
        "$S" --listen "$(up_scheme)://127.0.0.1:0" --tls-dir "$W/certs" --job-id J1 "$@" $SIM_EXTRA > "$W/$_n.sim" 2> "$W/$_n.simlog" & SIM=$!
    else
        "$S" --listen "$(up_scheme)://127.0.0.1:0" --job-id J1 "$@" $SIM_EXTRA > "$W/$_n.sim" 2> "$W/$_n.simlog" & SIM=$!
    fi
    if ! wait_for 10 grep -q '^SIM READY' "$W/$_n.sim"; then
        echo "bench: $_n: the simulator did not start" >&2; sed 's/^/  /' "$W/$_n.simlog" >&2; return 1
    fi
    PORT=$(awk '/^SIM READY/ {print $3}' "$W/$_n.sim")
}
# start_relay NAME MODE COUNT [PREFIX...]: COUNT launched workers (0: none, workers come by
# themselves); PREFIX runs the daemon under a tool (valgrind).  Sets RELAY, T0.
start_relay() {
    _n=$1; _mode=$2; _count=$3; shift 3
    _pacing=true   # a mode "X+nopace" is mode X with the router's pacing off ([limits] pacing = false)
    case $_mode in *+nopace) _pacing=false; _mode=${_mode%+nopace} ;; esac
    {
        printf '[relay]\nsite = site-1\njob_id = J1\non_end_run = wait\nmode = %s\n' "$_mode"
        [ "$_mode" = spool ] && printf 'spool_dir = %s\nspool_allow_tmpfs = true\n' "$W/spool-$_n"
        printf '[upstream]\nurl = %s://127.0.0.1:%s\nproject_name = example_project\n' "$(up_scheme)" "$PORT"
        if up_tls; then
            printf 'connection_security = mtls\nca_file = %s\ncert_file = %s\nkey_file = %s\n' \
                "$W/certs/rootCA.pem" "$W/certs/client.crt" "$W/certs/client.key"
        fi
        printf '[workers]\nlisten = unix:%s\nheartbeat_interval = 1\nheartbeat_timeout = 10\nshutdown_grace = 2\n' \
            "$W/$_n.w.sock"
        [ "$_count" -gt 0 ] && printf 'command = %s\ncount = %s\n' "$WK" "$_count"
        printf '[status]\nsocket = %s\n' "$W/$_n.status.sock"
        printf '[limits]\npacing = %s\n' "$_pacing"
        printf '[log]\nlevel = info\n'
    } > "$W/$_n.ini"
    [ "$_mode" = spool ] && mkdir -p "$W/spool-$_n"
    T0=$(now)
    "$@" "$D" -c "$W/$_n.ini" > "$W/$_n.relay" 2>&1 & RELAY=$!
    _i=0   # up to 60 s (valgrind is slow to start), less if the relay exits (a refused config)
    while [ $_i -lt 600 ] && kill -0 "$RELAY" 2>/dev/null; do
        "$C" -s "$W/$_n.status.sock" show info >/dev/null 2>&1 && return 0
        sleep 0.1; _i=$((_i + 1))
    done
    return 1
}
end_relay() { # end_relay NAME: orderly shutdown (lets a tool write its output), then stop_job
    note_workers
    "$C" -s "$W/$1.status.sock" shutdown >/dev/null 2>&1
    wait_exit "$RELAY" "${2:-15}" >/dev/null
    stop_job
}
# the worker's own measure, relayed into the relay's log: "downloaded ... (X MiB/s)"
worker_mib_s() { sed -n 's/.*: downloaded [0-9]* items .* in [0-9.]* s (\([0-9.]*\) MiB\/s).*/\1/p' "$1" | head -1; }
direct_field() { sed -n "s|^DIRECT .* $2=\\([0-9.]*\\).*|\\1|p" "$1" | head -1; }

mkdir -p "$OUT"
echo "bench: in $W ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)); binaries from $B"
has() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
# row NAME: whether section 6 measures that row (BENCH_SYS_ROWS)
row() { case " $SYS_ROWS_WANTED " in *" $1 "*) return 0 ;; esac; return 1; }

# ---- 1. throughput: relay vs direct ---------------------------------------------------------
tput_relay() { # one run through the relay; prints MiB/s or nothing
    n=tput-a-$1
    start_sim "$n" --rounds 1 --model-size "$TPUT_MODEL" --tensors 8 --format numpy || { stop_job; return; }
    start_relay "$n" pass_through 1
    _i=0
    while [ $_i -lt $((JOB_TIMEOUT * 10)) ] && [ -z "$(worker_mib_s "$W/$n.relay")" ] && kill -0 "$SIM" 2>/dev/null; do
        note_workers; sleep 0.1; _i=$((_i + 1))
    done
    worker_mib_s "$W/$n.relay"
    stop_job   # the result's way back is not part of this measure
}
tput_direct() {
    n=tput-b-$1
    start_sim "$n" --rounds 1 --model-size "$TPUT_MODEL" --tensors 8 --format numpy || { stop_job; return; }
    "$WK" --direct "tcp://127.0.0.1:$PORT" --job-id J1 > "$W/$n.out" 2> "$W/$n.err" & DIRECTS=$!
    wait_exit "$DIRECTS" "$JOB_TIMEOUT" >/dev/null
    direct_field "$W/$n.out" 'MiB/s'
    stop_job
}
TPUT_A=; TPUT_B=
if has tput; then
    i=1
    while [ $i -le "$TPUT_RUNS" ]; do
        echo "bench: throughput $TPUT_MODEL, run $i/$TPUT_RUNS: (a) through the relay ..."
        v=$(tput_relay $i); [ -n "$v" ] && TPUT_A="$TPUT_A $v"
        echo "bench: throughput $TPUT_MODEL, run $i/$TPUT_RUNS: (b) direct ..."
        v=$(tput_direct $i); [ -n "$v" ] && TPUT_B="$TPUT_B $v"
        i=$((i + 1))
    done
fi
A_MED=$(echo $TPUT_A | tr ' ' '\n' | median)
B_MED=$(echo $TPUT_B | tr ' ' '\n' | median)
RATIO=; SLOWER=
if [ -n "$A_MED" ] && [ -n "$B_MED" ]; then
    RATIO=$(awk -v a="$A_MED" -v b="$B_MED" 'BEGIN {printf "%.3f", b / a}')
    SLOWER=$(awk -v a="$A_MED" -v b="$B_MED" 'BEGIN {printf "%.1f", 100 * (b - a) / b}')
fi

# ---- 2. memory vs model size ----------------------------------------------------------------
MEM_ROWS=; MEM_JSON=; GROWTH_ROWS=; GROWTH_JSON=
if has mem; then
    # UP_SCHEME=stcp|https|grpcs measures the TLS schemes: the relay needs the site's certificates
    if up_tls && [ ! -s "$W/certs/client.key" ]; then
        sh "$ROOT/tests/unit/tls_certs.sh" "$W/certs" >/dev/null 2>&1 || echo "bench: the certificates could not be made" >&2
    fi
    for mode in $MODES; do
        FIRST_PEAK=; LAST_PEAK=; FIRST_M=; LAST_M=
        for m in $MODELS; do
            n=mem-$(echo "$mode" | tr '+' '-')-$m
            echo "bench: memory, $mode, model $m ..."
            start_sim "$n" --rounds 1 --model-size "$m" --tensors 8 --format numpy || { stop_job; continue; }
            start=; idle=; peak=; ok=false; tp=
            if start_relay "$n" "$mode" 1; then
                start=$(kb "$RELAY" VmRSS)
                wait_exit "$SIM" "$JOB_TIMEOUT"; RC=$?
                sleep 0.5   # the relay settles (result acknowledged, buffers freed)
                idle=$(kb "$RELAY" VmRSS); peak=$(kb "$RELAY" VmHWM)
                [ $RC -eq 0 ] && grep -q '^SIM OK rounds=1' "$W/$n.sim" && ok=true
                tp=$(worker_mib_s "$W/$n.relay")
            else
                why=$(sed -n 's/.*error: cannot start: //p' "$W/$n.relay" | head -1)
                echo "bench: $mode: the relay did not start: ${why:-see $n.relay}" >&2
                end_relay "$n"
                MEM_ROWS="$MEM_ROWS$(printf '  %-19s n/a: the relay refused it: %s' "$mode" "${why:-did not start}")
"
                MEM_JSON="$MEM_JSON${MEM_JSON:+,}$(printf '\n    {"mode": "%s", "refused": "%s"}' "$mode" "$(echo "$why" | tr -d '"\\')")"
                continue 2
            fi
            end_relay "$n"
            if [ "$ok" != true ]; then
                echo "bench: $n did not complete" >&2
                tail -2 "$W/$n.sim" | sed 's/^/  sim: /' >&2; grep -E 'error|warning' "$W/$n.relay" | tail -3 | sed 's/^/  relay: /' >&2
            fi
            MEM_ROWS="$MEM_ROWS$(printf '  %-19s %-6s %10s %10s %10s %8s %6s' "$mode" "$m" "${start:-?}" "${idle:-?}" "${peak:-?}" "${tp:-?}" "$ok")
"
            MEM_JSON="$MEM_JSON${MEM_JSON:+,}$(printf '\n    {"mode": "%s", "model": "%s", "start_rss_kib": %s, "idle_rss_kib": %s, "peak_rss_kib": %s, "worker_mib_s": %s, "ok": %s}' \
                "$mode" "$m" "$(json_num "$start")" "$(json_num "$idle")" "$(json_num "$peak")" "$(json_num "$tp")" "$ok")"
            if [ "$ok" = true ]; then
                [ -z "$FIRST_PEAK" ] && { FIRST_PEAK=$peak; FIRST_M=$m; }
                LAST_PEAK=$peak; LAST_M=$m
            fi
        done
        g=; [ -n "$FIRST_PEAK" ] && [ "$FIRST_M" != "$LAST_M" ] && g=$((LAST_PEAK - FIRST_PEAK))
        GROWTH_ROWS="$GROWTH_ROWS$(printf '  growth of peak RSS, %s, %s -> %s: %s KiB' "$mode" "${FIRST_M:-?}" "${LAST_M:-?}" "${g:-n/a}")
"
        GROWTH_JSON="$GROWTH_JSON${GROWTH_JSON:+, }\"$mode\": $(json_num "$g")"
    done
fi

# ---- 3. task latency ---------------------------------------------------------------------------
LAT_OK=false; LD50=; LD99=; LDMEAN=; LS50=; LS99=; LSMEAN=; LR50=; LR99=; LRMEAN=; LAT_N=0
if has lat; then
    n=lat
    echo "bench: latency, $LAT_ROUNDS rounds of a 4K model ..."
    if start_sim "$n" --rounds "$LAT_ROUNDS" --model-size 4K --tensors 1 --format numpy --wait-time 0; then
        start_relay "$n" pass_through 1
        wait_exit "$SIM" "$JOB_TIMEOUT"; RC=$?
        end_relay "$n"
        got=$(grep -c '^ROUND .* verified' "$W/$n.sim")
        [ $RC -eq 0 ] && [ "$got" -eq "$LAT_ROUNDS" ] && LAT_OK=true
        # the relay's own lines (not its workers' relayed stderr), per relay task id
        awk '
        function t(s) { split(substr(s, 12, 12), a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
        $2 !~ /^cjrelayd\[/ || $4 != "task" { next }
        { id = $5; sub(/:$/, "", id) }
        / received \047/                  { rcv[id] = t($1) }
        / sent to /                       { if (!(id in snt)) snt[id] = t($1) }
        / result from .* accepted/        { res[id] = t($1) }
        /: submit_update .* attempt 1\//  { sub_[id] = t($1) }
        END {
            for (id in rcv) if (id in snt) printf "D %.3f\n", 1000 * (snt[id] - rcv[id])
            for (id in res) if (id in sub_) printf "S %.3f\n", 1000 * (sub_[id] - res[id])
        }' "$W/$n.relay" > "$W/lat.ms"
        awk '$1 == "D" {print $2}' "$W/lat.ms" > "$W/lat.d"
        awk '$1 == "S" {print $2}' "$W/lat.ms" > "$W/lat.s"
        sed -n 's/^ROUND .* verified .*secs=\([0-9.]*\).*/\1/p' "$W/$n.sim" | awk '{printf "%.3f\n", 1000 * $1}' > "$W/lat.r"
        LAT_N=$(wc -l < "$W/lat.d" | tr -d ' ')
        mean() { awk '{s += $1} END {if (NR) printf "%.2f", s / NR}' "$1"; }
        LD50=$(pct 50 < "$W/lat.d"); LD99=$(pct 99 < "$W/lat.d"); LDMEAN=$(mean "$W/lat.d")
        LS50=$(pct 50 < "$W/lat.s"); LS99=$(pct 99 < "$W/lat.s"); LSMEAN=$(mean "$W/lat.s")
        LR50=$(pct 50 < "$W/lat.r"); LR99=$(pct 99 < "$W/lat.r"); LRMEAN=$(mean "$W/lat.r")
    else
        stop_job
    fi
fi

# ---- 4. fan-in ------------------------------------------------------------------------------------
FAN_AGG=; FAN_MIN=; FAN_MAX=; FAN_SHARE=; FAN_PEAK=; FAN_OKN=0; FAN_SECS=
if has fanin; then
    n=fanin
    echo "bench: fan-in, $FANIN workers x $FANIN_MODEL at once through the relay ..."
    if start_sim "$n" --rounds "$FANIN" --model-size "$FANIN_MODEL" --tensors 8 --format numpy --wait-time 0.1 &&
        start_relay "$n" pass_through 0; then
        f0=$(now)
        i=1
        while [ $i -le "$FANIN" ]; do
            "$WK" --direct "unix:$W/$n.w.sock" --job-id J1 --cell "site-1.J1.b$i" > "$W/$n.$i.out" 2> "$W/$n.$i.err" &
            DIRECTS="$DIRECTS $!"
            i=$((i + 1))
        done
        for p in $DIRECTS; do wait_exit "$p" "$JOB_TIMEOUT" >/dev/null; done
        f1=$(now)
        FAN_PEAK=$(kb "$RELAY" VmHWM)
        end_relay "$n"
        cat "$W"/$n.*.out | grep '^DIRECT round' > "$W/fan.lines"
        FAN_OKN=$(wc -l < "$W/fan.lines" | tr -d ' ')
        if [ "$FAN_OKN" -gt 0 ]; then
            FAN_SECS=$(awk -v a="$f0" -v b="$f1" 'BEGIN {printf "%.2f", b - a}')
            FAN_AGG=$(awk -v s="$FAN_SECS" '{for (i = 1; i <= NF; i++) if ($i ~ /^bytes=/) {sub(/bytes=/, "", $i); t += $i}}
                END {printf "%.1f", t / 1048576 / s}' "$W/fan.lines")
            sed -n 's/.*MiB\/s=\([0-9.]*\).*/\1/p' "$W/fan.lines" | sort -n > "$W/fan.mibs"
            FAN_MIN=$(head -1 "$W/fan.mibs"); FAN_MAX=$(tail -1 "$W/fan.mibs")
            # the slowest worker's rate against a fair share of the aggregate (1.00 = fair)
            FAN_SHARE=$(awk -v m="$FAN_MIN" -v a="$FAN_AGG" -v k="$FAN_OKN" 'BEGIN {printf "%.2f", m / (a / k)}')
        fi
    else
        stop_job
    fi
fi

# ---- 5. CPU per byte (callgrind) -----------------------------------------------------------------
CPU_IR=; CPU_IR0=; CPU_PER_MIB=; CPU_NOTE=
cg_run() { # cg_run NAME MODEL: relay under callgrind, one direct worker through it; prints Ir
    n=$1
    start_sim "$n" --rounds 1 --model-size "$2" --tensors 8 --format numpy || { stop_job; return; }
    if start_relay "$n" pass_through 0 valgrind --tool=callgrind --callgrind-out-file="$W/$n.cg" --log-file="$W/$n.vg"; then
        "$WK" --direct "unix:$W/$n.w.sock" --job-id J1 --cell site-1.J1.c1 > "$W/$n.out" 2> "$W/$n.err" & DIRECTS=$!
        wait_exit "$DIRECTS" "$JOB_TIMEOUT" >/dev/null
        DIRECTS=
        end_relay "$n" 60
    else
        stop_job
    fi
    grep -q '^DIRECT round' "$W/$n.out" 2>/dev/null && [ -s "$W/$n.cg" ] &&
        awk '/^(summary|totals):/ {print $2; exit}' "$W/$n.cg"
}
if has cpu && [ "$CPU_ON" = 1 ]; then
    if command -v valgrind >/dev/null 2>&1; then
        echo "bench: CPU, relay under callgrind: $CPU_MODEL, then a 4K baseline ..."
        CPU_IR=$(cg_run cpu "$CPU_MODEL")
        CPU_IR0=$(cg_run cpu0 4K)
        if [ -n "$CPU_IR" ] && [ -n "$CPU_IR0" ]; then
            CPU_PER_MIB=$(awk -v a="$CPU_IR" -v b="$CPU_IR0" -v m="$(bytes_of "$CPU_MODEL")" 'BEGIN {printf "%.0f", (a - b) / (m / 1048576)}')
            callgrind_annotate --inclusive=no "$W/cpu.cg" 2>/dev/null > "$OUT/callgrind-relay.txt"
            cp "$W/cpu.cg" "$OUT/callgrind.out.relay" 2>/dev/null
        else
            CPU_NOTE="callgrind run failed"
        fi
    else
        CPU_NOTE="valgrind not installed"
    fi
fi
# ---- 6. what the machine pays: CPU and syscalls per GiB, beside the floor ---------------------------
TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
# usage PID: "utime stime syscr syscw" (clock ticks, then /proc/PID/io counts)
usage() {
    printf '%s %s\n' "$(awk '{print $14, $15}' "/proc/$1/stat" 2>/dev/null)" \
        "$(awk '$1 == "syscr:" || $1 == "syscw:" {printf "%s ", $2}' "/proc/$1/io" 2>/dev/null)"
}
SYS_ROWS=; SYS_JSON=; SYS_CLEAR_CPU=; SYS_TLS_CPU=; FLOOR_CPU=
# sys_round LABEL MODE: one round of SYS_MODEL through a relay with one launched worker; the
# relay's CPU and syscalls from just after it is up (worker connected) to the simulator's end
sys_round() {
    _l=$1; n=sys-$1
    start_sim "$n" --rounds 1 --model-size "$SYS_MODEL" --tensors 8 --format numpy || { stop_job; return; }
    if ! start_relay "$n" "$2" 1; then end_relay "$n"; return; fi
    wait_for 30 sh -c "'$C' -s '$W/$n.status.sock' show workers json 2>/dev/null | grep -q client_api_trainer_1"
    u0=$(usage "$RELAY")
    profile_start "sys-$_l-relay" "$RELAY"
    wait_exit "$SIM" "$JOB_TIMEOUT"; RC=$?
    u1=$(usage "$RELAY")
    profile_stop
    end_relay "$n"
    if [ $RC -ne 0 ] || ! grep -q '^SIM OK rounds=1' "$W/$n.sim"; then
        echo "bench: $n did not complete" >&2; tail -2 "$W/$n.sim" | sed 's/^/  sim: /' >&2; return
    fi
    mb=$(sed -n 's/^ROUND .* bytes=\([0-9]*\) .*/\1/p' "$W/$n.sim" | head -1)
    # shellcheck disable=SC2086
    set -- $u0 $u1
    sys_row "$_l" $((2 * mb)) "$(awk -v a="$1" -v b="$5" -v k="$TCK" 'BEGIN {printf "%.3f", (b - a) / k}')" \
        "$(awk -v a="$2" -v b="$6" -v k="$TCK" 'BEGIN {printf "%.3f", (b - a) / k}')" $(($7 - $3)) $(($8 - $4))
}
# sys_row LABEL BYTES USER SYS SYSCR SYSCW: one measurement, kept in $W/sys.vals as
# "label gib user sys cpu_s_per_gib reads_per_gib writes_per_gib avg_read_kib"
sys_row() {
    awk -v l="$1" -v b="$2" -v u="$3" -v s="$4" -v r="$5" -v w="$6" 'BEGIN {g = b / 1073741824;
        printf "%s %.3f %.3f %.3f %.3f %.0f %.0f %.0f\n", l, g, u, s, (u + s) / g, r / g, w / g, r ? b / r / 1024 : 0}' \
        >> "$W/sys.vals"
}
# sys_median LABEL: the run with the median CPU per GiB of that row (its whole line)
sys_median() { awk -v l="$1" '$1 == l' "$W/sys.vals" 2>/dev/null | sort -k5,5n | awk '{v[NR] = $0} END {if (NR) print v[int((NR + 1) / 2)]}'; }
# floor_round [LABEL TLSDIR]: the floor's round; with TLSDIR, its TLS form (row tlsfloor)
floor_round() {
    [ -x "$FLOOR" ] || { echo "bench: $FLOOR missing (make bench builds it)" >&2; return; }
    fb=$(bytes_of "$SYS_MODEL"); _fl=${1:-floor}; _ft=${2:-}
    # shellcheck disable=SC2086
    "$FLOOR" server "$fb" $_ft > "$W/floor.server" 2>&1 & DIRECTS=$!
    wait_for 10 grep -q '^FLOOR PORT' "$W/floor.server" || { stop_job; return; }
    fp=$(awk '/^FLOOR PORT/ {print $3}' "$W/floor.server")
    # shellcheck disable=SC2086
    "$FLOOR" relay "$fp" "$W/floor.sock" $_ft > "$W/floor.relay" 2>&1 & RELAY=$!
    wait_for 10 grep -q '^FLOOR LISTENING' "$W/floor.relay"
    profile_start "sys-$_fl" "$RELAY"
    "$FLOOR" client "$W/floor.sock" "$fb" > "$W/floor.client" 2>&1
    wait_exit "$RELAY" 60 >/dev/null; RELAY=
    profile_stop
    wait_exit "$DIRECTS" 10 >/dev/null; DIRECTS=
    line=$(grep '^FLOOR cpu_user' "$W/floor.relay") || { echo "bench: the floor relay failed: $(cat "$W/floor.relay")" >&2; return; }
    get() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
    sys_row "$_fl" "$((2 * fb))" "$(get cpu_user)" "$(get cpu_sys)" "$(get syscr)" "$(get syscw)"
}
if has sys; then
    TLS_OK=false
    command -v openssl >/dev/null 2>&1 && sh "$ROOT/tests/unit/tls_certs.sh" "$W/certs" >/dev/null 2>&1 && TLS_OK=true
    [ $TLS_OK = true ] || echo "bench: no TLS row (certificates could not be made)" >&2
    i=1
    while [ $i -le "$SYS_RUNS" ]; do
        echo "bench: machine cost, $SYS_MODEL, run $i/$SYS_RUNS: $SYS_ROWS_WANTED ..."
        row floor && floor_round
        row tlsfloor && [ $TLS_OK = true ] && floor_round tlsfloor "$W/certs"
        row clear && sys_round clear pass_through
        row tls && [ $TLS_OK = true ] && UP_SCHEME=stcp sys_round tls pass_through
        row http && UP_SCHEME=http sys_round http pass_through
        row grpc && UP_SCHEME=grpc sys_round grpc pass_through
        row https && [ $TLS_OK = true ] && UP_SCHEME=https sys_round https pass_through
        row grpcs && [ $TLS_OK = true ] && UP_SCHEME=grpcs sys_round grpcs pass_through
        row spool && sys_round spool spool
        i=$((i + 1))
    done
    for l in floor tlsfloor clear tls http grpc https grpcs spool; do
        set -- $(sys_median $l)
        [ $# -eq 8 ] || continue
        SYS_ROWS="$SYS_ROWS$(printf '  %-8s %7s %6s %6s %9s %9s %9s %9s' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8")
"
        SYS_JSON="$SYS_JSON${SYS_JSON:+,}$(printf '\n    {"row": "%s", "gib": %s, "user_s": %s, "sys_s": %s, "cpu_s_per_gib": %s, "reads_per_gib": %s, "writes_per_gib": %s, "avg_read_kib": %s, "runs_cpu_s_per_gib": [%s]}' \
            "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$(awk -v l="$l" '$1 == l {printf "%s%s", n++ ? "," : "", $5}' "$W/sys.vals")")"
        case $l in floor) FLOOR_CPU=$5 ;; tlsfloor) TLSFLOOR_CPU=$5 ;; clear) SYS_CLEAR_CPU=$5 ;; tls) SYS_TLS_CPU=$5 ;; http) SYS_HTTP_CPU=$5 ;;
                   grpc) SYS_GRPC_CPU=$5 ;; https) SYS_HTTPS_CPU=$5 ;; grpcs) SYS_GRPCS_CPU=$5 ;; esac
    done
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "" && b > 0) printf "%.2f", a / b}'; }
SYS_RATIO=$(ratio "$SYS_CLEAR_CPU" "$FLOOR_CPU")
# the same ratio run by run: each run's clear row over the floor measured just before it, so
# that what drifts between runs (the machine, the floor's own pace) cancels; "r1 r2 ..." and median
SYS_PAIRED=$(awk '$1 == "floor" {f[++nf] = $5} $1 == "clear" {c[++nc] = $5}
    END {for (i = 1; i <= nc && i <= nf; i++) if (f[i] > 0) printf "%s%.2f", (i > 1 ? " " : ""), c[i] / f[i]}' "$W/sys.vals" 2>/dev/null)
SYS_PAIRED_MED=$(echo $SYS_PAIRED | tr ' ' '\n' | median)
SYS_TLS_RATIO=$(ratio "$SYS_TLS_CPU" "$SYS_CLEAR_CPU")
SYS_TLSF_RATIO=$(ratio "$SYS_TLS_CPU" "$TLSFLOOR_CPU")
SYS_FLOORS_RATIO=$(ratio "$TLSFLOOR_CPU" "$FLOOR_CPU")
SYS_HTTP_RATIO=$(ratio "$SYS_HTTP_CPU" "$SYS_CLEAR_CPU"); SYS_GRPC_RATIO=$(ratio "$SYS_GRPC_CPU" "$SYS_CLEAR_CPU")
SYS_HTTPS_RATIO=$(ratio "$SYS_HTTPS_CPU" "$SYS_TLS_CPU"); SYS_GRPCS_RATIO=$(ratio "$SYS_GRPCS_CPU" "$SYS_TLS_CPU")

# ---- 7. raw transfer: the worker only checks and drops the items ---------------------------------------
# raw_run NAME relay|direct|floor: prints "MiB/s" or nothing; relay and floor (clear tcp only)
# also the CPU seconds per GiB of what stood between (cjrelayd from the worker's start to its
# end; the floor's whole life): "MiB/s CPU"
raw_run() {
    n=$1
    # --prebuild: the simulator builds the items before the task goes out, so neither end's
    # arithmetic (item building, the transform) is in the measure: only the transfer
    start_sim "$n" --rounds 1 --model-size "$TPUT_MODEL" --tensors 8 --format numpy --prebuild || { stop_job; return; }
    case $2 in
    relay) start_relay "$n" pass_through 0 || { end_relay "$n"; return; }
           url="unix:$W/$n.w.sock"; cell=site-1.J1.r1 ;;
    # the floor (bench/floor.c) between the same simulator and the same direct worker, on the
    # same kinds of sockets: the very bytes the relay moves, at the pace these two ends keep
    floor) "$FLOOR" relay "$PORT" "$W/$n.f.sock" > "$W/$n.floor" 2>&1 & RELAY=$!
           wait_for 10 grep -q '^FLOOR LISTENING' "$W/$n.floor" || { stop_job; return; }
           url="unix:$W/$n.f.sock"; cell=site-1.J1 ;;
    *) url="$(up_scheme)://127.0.0.1:$PORT"; cell=site-1.J1 ;;
    esac
    td=; [ "$2" = direct ] && up_tls && td=$W/certs   # the direct worker presents the site's certificate
    [ "$2" = relay ] && u0=$(usage "$RELAY")
    "$WK" --direct "$url" --job-id J1 --cell "$cell" --raw ${td:+--tls-dir} ${td:+"$td"} > "$W/$n.out" 2> "$W/$n.err" & DIRECTS=$!
    # shellcheck disable=SC2046
    profile_start "$n" "$DIRECTS" "$SIM" $([ "$2" != direct ] && echo "$RELAY")
    wait_exit "$DIRECTS" "$JOB_TIMEOUT" >/dev/null
    profile_stop
    DIRECTS=
    v=$(direct_field "$W/$n.out" 'MiB/s'); b=$(direct_field "$W/$n.out" 'bytes'); cpu=
    [ -z "$b" ] && b=$(bytes_of "$TPUT_MODEL")
    case $2 in
    relay) u1=$(usage "$RELAY")
           # shellcheck disable=SC2086
           set -- $u0 $u1
           [ $# -eq 8 ] && cpu=$(awk -v a="$1" -v b="$2" -v c="$5" -v d="$6" -v k="$TCK" -v n="$b" \
               'BEGIN {printf "%.3f", (c - a + d - b) / k / (n / 1073741824)}')
           end_relay "$n" ;;
    floor) kill -TERM "$SIM" 2>/dev/null; wait_exit "$RELAY" 30 >/dev/null; RELAY=
           cpu=$(awk -v n="$b" '/^FLOOR cpu_user/ {split($2, u, "="); split($3, s, "=");
               printf "%.3f", (u[2] + s[2]) / (n / 1073741824)}' "$W/$n.floor")
           stop_job ;;
    *) stop_job ;;
    esac
    [ -n "$v" ] && echo "$v${cpu:+ $cpu}"
}
RAW_A=; RAW_B=; RAW_F=; RAW_A_CPU=; RAW_F_CPU=
if has raw; then
    i=1
    while [ $i -le "$TPUT_RUNS" ]; do
        echo "bench: raw transfer $TPUT_MODEL, run $i/$TPUT_RUNS: through the relay, direct, through the floor ..."
        set -- $(raw_run raw-a-$i relay); [ -n "${1:-}" ] && RAW_A="$RAW_A $1" && RAW_A_CPU="$RAW_A_CPU ${2:-}"
        v=$(raw_run raw-b-$i direct); [ -n "$v" ] && RAW_B="$RAW_B $v"
        set -- $(raw_run raw-f-$i floor); [ -n "${1:-}" ] && RAW_F="$RAW_F $1" && RAW_F_CPU="$RAW_F_CPU ${2:-}"
        i=$((i + 1))
    done
fi
RAW_A_MED=$(echo $RAW_A | tr ' ' '\n' | median)
RAW_B_MED=$(echo $RAW_B | tr ' ' '\n' | median)
RAW_F_MED=$(echo $RAW_F | tr ' ' '\n' | median)
RAW_A_CPU_MED=$(echo $RAW_A_CPU | tr ' ' '\n' | median)
RAW_F_CPU_MED=$(echo $RAW_F_CPU | tr ' ' '\n' | median)
RAW_RATIO=$(awk -v a="$RAW_A_MED" -v b="$RAW_B_MED" 'BEGIN {if (a != "" && b > 0) printf "%.3f", a / b}')
RAW_FLOOR_RATIO=$(awk -v a="$RAW_A_MED" -v b="$RAW_F_MED" 'BEGIN {if (a != "" && b > 0) printf "%.3f", a / b}')
RAW_CPU_RATIO=$(ratio "$RAW_A_CPU_MED" "$RAW_F_CPU_MED")

# ---- 8. the same raw transfer on each scheme (the TLS ones: the relay and the direct worker with mtls) --
SCH_ROWS=; SCH_JSON=
if has schemes; then
    SCH_TLS=true
    [ -s "$W/certs/client.key" ] || { command -v openssl >/dev/null 2>&1 &&
        sh "$ROOT/tests/unit/tls_certs.sh" "$W/certs" >/dev/null 2>&1; } || SCH_TLS=false
    [ $SCH_TLS = true ] || echo "bench: no stcp, https or grpcs row (certificates could not be made)" >&2
    for sc in ${BENCH_SCHEMES:-tcp stcp http https grpc grpcs}; do
        case $sc in stcp|https|grpcs) [ $SCH_TLS = true ] || continue ;; esac
        a=; b=; i=1
        while [ $i -le "$TPUT_RUNS" ]; do
            echo "bench: raw transfer over $sc, run $i/$TPUT_RUNS: through the relay, then direct ..."
            v=$(UP_SCHEME=$sc raw_run raw-$sc-a-$i relay); [ -n "$v" ] && a="$a ${v%% *}"
            v=$(UP_SCHEME=$sc raw_run raw-$sc-b-$i direct); [ -n "$v" ] && b="$b $v"
            i=$((i + 1))
        done
        am=$(echo $a | tr ' ' '\n' | median); bm=$(echo $b | tr ' ' '\n' | median)
        r=$(awk -v a="$am" -v b="$bm" 'BEGIN {if (a != "" && b > 0) printf "%.3f", a / b}')
        SCH_ROWS="$SCH_ROWS$(printf '  %-5s through the relay %8s   direct %8s   relay / direct %s' "$sc" "${am:-?}" "${bm:-?}" "${r:-n/a}")
"
        SCH_JSON="$SCH_JSON${SCH_JSON:+,}$(printf '\n    "%s": {"relay_mib_s_median": %s, "direct_mib_s_median": %s, "relay_over_direct": %s}' \
            "$sc" "$(json_num "$am")" "$(json_num "$bm")" "$(json_num "$r")")"
    done
fi

# ---- 9. a site daemon: one job alone, then JOBS_N at once --------------------------------------------
# jobs_run NAME N: a site daemon (no [relay] job_id, a launched worker per job) and simulators of at
# most 10 jobs each; N jobs started with job start at once, one round of JOBS_MODEL each.  Writes
# "<job> <MiB/s>" lines (the simulator's ROUND lines) to $W/NAME.rates.
jobs_run() {
    _n=$1; _k=$2; _sims=; _ports=; _j=1
    while [ $_j -le "$_k" ]; do
        _ids=; _e=$((_j + 9)); [ $_e -gt "$_k" ] && _e=$_k
        while [ $_j -le $_e ]; do _ids="$_ids${_ids:+,}J$_j"; _j=$((_j + 1)); done
        rm -f "$W/$_n.$_j.sim"
        "$S" --listen tcp://127.0.0.1:0 --job-id "$_ids" --rounds 1 --model-size "$JOBS_MODEL" --tensors 8 \
            --format numpy --wait-time 0.1 > "$W/$_n.$_j.sim" 2> "$W/$_n.$_j.simlog" &
        _sims="$_sims $!"
        wait_for 10 grep -q '^SIM READY' "$W/$_n.$_j.sim" || return 1
        _p=$(awk '/^SIM READY/ {print $3}' "$W/$_n.$_j.sim")
        _ports="$_ports $_ids:$_p"
    done
    printf '[relay]\nsite = site-1\nmax_jobs = %s\n[upstream]\nproject_name = example_project\n[workers]\ncommand = %s\ncount = 1\nheartbeat_interval = 1\nheartbeat_timeout = 10\nshutdown_grace = 2\n[status]\nsocket = %s\n[log]\nlevel = info\n' \
        "$((_k + 1))" "$WK" "$W/$_n.status.sock" > "$W/$_n.ini"
    "$D" -c "$W/$_n.ini" > "$W/$_n.relay" 2>&1 & RELAY=$!
    wait_for 10 "$C" -s "$W/$_n.status.sock" show info || return 1
    for _ip in $_ports; do
        _p=${_ip##*:}
        for _id in $(echo "${_ip%:*}" | tr ',' ' '); do
            "$C" -s "$W/$_n.status.sock" job start "{\"job_id\": \"$_id\", \"server_url\": \"tcp://127.0.0.1:$_p\"}" >/dev/null
        done
    done
    for _p in $_sims; do wait_exit "$_p" "$JOB_TIMEOUT" >/dev/null; done
    note_workers
    "$C" -s "$W/$_n.status.sock" shutdown >/dev/null 2>&1
    wait_exit "$RELAY" 30 >/dev/null
    stop_job
    cat "$W"/$_n.*.sim | sed -n 's/^ROUND [0-9]* \(job=\([^ ]*\)\)\{0,1\}.* MiB\/s=\([0-9.]*\).*/\2 \3/p' > "$W/$_n.rates"
}
JOBS_ONE=; JOBS_MIN=; JOBS_MEAN=; JOBS_OKN=0; JOBS_FAIR=
if has jobs; then
    echo "bench: site daemon, one job of $JOBS_MODEL alone ..."
    jobs_run jobs1 1 && JOBS_ONE=$(awk '{print $NF}' "$W/jobs1.rates" | head -1)
    echo "bench: site daemon, $JOBS_N jobs of $JOBS_MODEL at once ..."
    if jobs_run jobsn "$JOBS_N"; then
        JOBS_OKN=$(wc -l < "$W/jobsn.rates" | tr -d ' ')
        JOBS_MIN=$(awk '{print $NF}' "$W/jobsn.rates" | sort -n | head -1)
        JOBS_MEAN=$(awk '{t += $NF} END {if (NR) printf "%.1f", t / NR}' "$W/jobsn.rates")
        # the slowest job against a fair share of the one job alone (1.00 = as fast as its share)
        JOBS_FAIR=$(awk -v m="$JOBS_MIN" -v o="$JOBS_ONE" -v k="$JOBS_N" 'BEGIN {if (o > 0) printf "%.2f", m / (o / k)}')
    fi
fi

# top self-cost functions: "pct function" lines
cg_top() {
    [ -s "$OUT/callgrind-relay.txt" ] || return
    sed -n 's/^ *[0-9,][0-9,]* ( *\([0-9.]*%\))  *\([^ ]*\) \[\(.*\)\]$/\1 \2 \3/p' "$OUT/callgrind-relay.txt" |
        grep -v 'PROGRAM' | head -10 |
        awk '{f = $2; sub(/^.*:/, "", f); o = $3; sub(/^.*\//, "", o); printf "    %7s  %s (%s)\n", $1, f, o}'
}

# ---- table and JSON ----------------------------------------------------------------------------------
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
echo
echo "cjrelay bench ($DATE, $(nproc) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "1. throughput, $TPUT_MODEL model, 1 worker, numpy (worker's MiB/s: task in -> all items transformed; median of $TPUT_RUNS)"
echo "  (a) through the relay (unix socket): ${A_MED:-?}   runs:${TPUT_A:- none}"
echo "  (b) direct to the simulator:         ${B_MED:-?}   runs:${TPUT_B:- none}"
echo "  ratio b/a: ${RATIO:-n/a}   (the relay is ${SLOWER:-?}% slower than direct)"
echo
echo "2. relay memory vs model size (1 round, 1 worker, numpy; KiB; idle = after the round)"
printf '  %-19s %-6s %10s %10s %10s %8s %6s\n' mode model "start RSS" "idle RSS" "peak HWM" "MiB/s" ok
printf '%s' "$MEM_ROWS"
printf '%s' "$GROWTH_ROWS"
echo
echo "3. task latency, $LAT_ROUNDS rounds, 4K model (ms; relay log resolution 1 ms; $LAT_N tasks matched)"
echo "  relay: get_task reply in -> task_ready out:        p50 ${LD50:-?}  p99 ${LD99:-?}  mean ${LDMEAN:-?}"
echo "  relay: result in -> submit_update out (incl. __task_check__ round trip): p50 ${LS50:-?}  p99 ${LS99:-?}  mean ${LSMEAN:-?}"
echo "  sim: task sent -> result verified (whole round):  p50 ${LR50:-?}  p99 ${LR99:-?}  mean ${LRMEAN:-?}   all verified: $LAT_OK"
echo
echo "4. fan-in, $FANIN workers x $FANIN_MODEL at once through the relay ($FAN_OKN finished in ${FAN_SECS:-?} s)"
echo "  aggregate ${FAN_AGG:-?} MiB/s; per worker min ${FAN_MIN:-?} max ${FAN_MAX:-?} MiB/s; slowest/fair share ${FAN_SHARE:-?}; relay peak ${FAN_PEAK:-?} KiB"
echo
echo "5. CPU per byte: relay instructions per relayed MiB (callgrind, $CPU_MODEL minus a 4K run): ${CPU_PER_MIB:-n/a} ${CPU_NOTE}"
[ -n "$CPU_IR" ] && { echo "  top functions by own instructions (of $CPU_IR):"; cg_top; }
echo
echo "6. what the machine pays, one round of $SYS_MODEL (task down, result up; GiB counts each byte once;"
echo "   the run with the median CPU of $SYS_RUNS; floor = bench/floor.c, 1 MiB buffers, same sockets;"
echo "   tlsfloor = the same with mutual TLS upstream through OpenSSL's socket BIO, read-ahead on)"
printf '  %-8s %7s %6s %6s %9s %9s %9s %9s\n' row GiB "user s" "sys s" "CPU s/GiB" "reads/GiB" "writes/GiB" "KiB/read"
printf '%s' "$SYS_ROWS"
echo "  relay (clear) / floor CPU: ${SYS_RATIO:-n/a}   TLS / clear CPU: ${SYS_TLS_RATIO:-n/a}   FLARE's Python CJ: ~2.3 s/GiB"
echo "  relay (clear) / floor CPU run by run: ${SYS_PAIRED:-n/a} (median ${SYS_PAIRED_MED:-n/a})"
echo "  TLS relay / tlsfloor CPU: ${SYS_TLSF_RATIO:-n/a}   tlsfloor / floor (what TLS costs an OpenSSL relay): ${SYS_FLOORS_RATIO:-n/a}"
echo "  http / tcp CPU: ${SYS_HTTP_RATIO:-n/a}   grpc / tcp: ${SYS_GRPC_RATIO:-n/a}   https / stcp: ${SYS_HTTPS_RATIO:-n/a}   grpcs / stcp: ${SYS_GRPCS_RATIO:-n/a}"
echo
echo "7. raw transfer, $TPUT_MODEL, worker checks and drops the items (MiB/s, median of $TPUT_RUNS)"
echo "  through the relay: ${RAW_A_MED:-?}   runs:${RAW_A:- none}"
echo "  through the floor: ${RAW_F_MED:-?}   runs:${RAW_F:- none}"
echo "  direct:            ${RAW_B_MED:-?}   runs:${RAW_B:- none}"
echo "  relay / direct: ${RAW_RATIO:-n/a}   relay / floor: ${RAW_FLOOR_RATIO:-n/a}"
echo "  CPU s/GiB of what stands between, same ends, same bytes: relay ${RAW_A_CPU_MED:-?} (runs:${RAW_A_CPU:- none}),"
echo "  floor ${RAW_F_CPU_MED:-?} (runs:${RAW_F_CPU:- none}); relay / floor CPU: ${RAW_CPU_RATIO:-n/a}"
echo
echo "8. raw transfer on each of FLARE's schemes, $TPUT_MODEL (MiB/s, median of $TPUT_RUNS; the relay's upstream and the"
echo "   direct worker both use the scheme, mutual TLS on stcp/https/grpcs; the relay's workers stay on a Unix socket)"
printf '%s' "$SCH_ROWS"
echo
echo "9. a site daemon: $JOBS_N jobs at once, one round of $JOBS_MODEL each, a launched worker each (the simulator's"
echo "   MiB/s per round: task sent -> result verified; $JOBS_OKN of $JOBS_N rounds verified)"
echo "  one job alone: ${JOBS_ONE:-?} MiB/s; with $JOBS_N at once, per job min ${JOBS_MIN:-?} mean ${JOBS_MEAN:-?} MiB/s"
echo "  slowest job / fair share of the one job alone: ${JOBS_FAIR:-n/a} (target >= 0.8)"

{
    printf '{\n  "date": "%s",\n  "cores": %s,\n  "load": "%s",\n' "$DATE" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf '  "throughput": {\n    "model": "%s", "workers": 1, "format": "numpy", "measure": "worker: task in -> all items downloaded and transformed",\n' "$TPUT_MODEL"
    printf '    "relay_runs_mib_s": [%s], "direct_runs_mib_s": [%s],\n' "$(echo $TPUT_A | tr ' ' ',')" "$(echo $TPUT_B | tr ' ' ',')"
    printf '    "relay_mib_s_median": %s, "direct_mib_s_median": %s, "ratio_direct_over_relay": %s, "relay_slower_pct": %s\n  },\n' \
        "$(json_num "$A_MED")" "$(json_num "$B_MED")" "$(json_num "$RATIO")" "$(json_num "$SLOWER")"
    printf '  "memory": {\n    "workers": 1, "format": "numpy", "rounds": 1,\n    "rows": [%s\n    ],\n' "$MEM_JSON"
    printf '    "peak_growth_kib": {%s}\n  },\n' "$GROWTH_JSON"
    printf '  "latency": {\n    "rounds": %s, "model": "4K", "all_verified": %s, "tasks_matched": %s, "resolution_ms": 1,\n' "$LAT_ROUNDS" "$LAT_OK" "$LAT_N"
    printf '    "dispatch_ms": {"p50": %s, "p99": %s, "mean": %s},\n' "$(json_num "$LD50")" "$(json_num "$LD99")" "$(json_num "$LDMEAN")"
    printf '    "submit_ms": {"p50": %s, "p99": %s, "mean": %s},\n' "$(json_num "$LS50")" "$(json_num "$LS99")" "$(json_num "$LSMEAN")"
    printf '    "round_ms": {"p50": %s, "p99": %s, "mean": %s}\n  },\n' "$(json_num "$LR50")" "$(json_num "$LR99")" "$(json_num "$LRMEAN")"
    printf '  "fanin": {\n    "workers": %s, "model": "%s", "finished": %s, "secs": %s,\n' "$FANIN" "$FANIN_MODEL" "$FAN_OKN" "$(json_num "$FAN_SECS")"
    printf '    "aggregate_mib_s": %s, "min_mib_s": %s, "max_mib_s": %s, "slowest_over_fair_share": %s, "relay_peak_kib": %s\n  },\n' \
        "$(json_num "$FAN_AGG")" "$(json_num "$FAN_MIN")" "$(json_num "$FAN_MAX")" "$(json_num "$FAN_SHARE")" "$(json_num "$FAN_PEAK")"
    printf '  "cpu": {\n    "tool": "callgrind", "model": "%s", "instructions": %s, "baseline_instructions": %s, "instructions_per_mib": %s\n  },\n' \
        "$CPU_MODEL" "$(json_num "$CPU_IR")" "$(json_num "$CPU_IR0")" "$(json_num "$CPU_PER_MIB")"
    printf '  "machine_cost": {\n    "model": "%s", "clk_tck": %s,\n    "rows": [%s\n    ],\n' "$SYS_MODEL" "$TCK" "$SYS_JSON"
    printf '    "relay_over_floor_cpu": %s, "tls_over_clear_cpu": %s,\n' "$(json_num "$SYS_RATIO")" "$(json_num "$SYS_TLS_RATIO")"
    printf '    "tls_over_tlsfloor_cpu": %s, "tlsfloor_over_floor_cpu": %s,\n' "$(json_num "$SYS_TLSF_RATIO")" "$(json_num "$SYS_FLOORS_RATIO")"
    printf '    "relay_over_floor_cpu_paired": [%s], "relay_over_floor_cpu_paired_median": %s,\n' \
        "$(echo $SYS_PAIRED | tr ' ' ',')" "$(json_num "$SYS_PAIRED_MED")"
    printf '    "http_over_tcp_cpu": %s, "grpc_over_tcp_cpu": %s, "https_over_stcp_cpu": %s, "grpcs_over_stcp_cpu": %s\n  },\n' \
        "$(json_num "$SYS_HTTP_RATIO")" "$(json_num "$SYS_GRPC_RATIO")" "$(json_num "$SYS_HTTPS_RATIO")" "$(json_num "$SYS_GRPCS_RATIO")"
    printf '  "raw_transfer": {\n    "model": "%s", "relay_runs_mib_s": [%s], "direct_runs_mib_s": [%s],\n' "$TPUT_MODEL" "$(echo $RAW_A | tr ' ' ',')" "$(echo $RAW_B | tr ' ' ',')"
    printf '    "floor_runs_mib_s": [%s], "relay_cpu_s_per_gib_runs": [%s], "floor_cpu_s_per_gib_runs": [%s],\n' \
        "$(echo $RAW_F | tr ' ' ',')" "$(echo $RAW_A_CPU | tr ' ' ',')" "$(echo $RAW_F_CPU | tr ' ' ',')"
    printf '    "relay_mib_s_median": %s, "direct_mib_s_median": %s, "relay_over_direct": %s,\n' \
        "$(json_num "$RAW_A_MED")" "$(json_num "$RAW_B_MED")" "$(json_num "$RAW_RATIO")"
    printf '    "floor_mib_s_median": %s, "relay_over_floor": %s, "relay_cpu_s_per_gib": %s, "floor_cpu_s_per_gib": %s, "relay_over_floor_cpu": %s\n  },\n' \
        "$(json_num "$RAW_F_MED")" "$(json_num "$RAW_FLOOR_RATIO")" "$(json_num "$RAW_A_CPU_MED")" "$(json_num "$RAW_F_CPU_MED")" "$(json_num "$RAW_CPU_RATIO")"
    printf '  "raw_transfer_by_scheme": {%s\n  },\n' "$SCH_JSON"
    printf '  "site_jobs": {"jobs": %s, "model": "%s", "verified": %s, "one_job_mib_s": %s, "min_mib_s": %s, "mean_mib_s": %s, "slowest_over_fair_share": %s}\n}\n' \
        "$JOBS_N" "$JOBS_MODEL" "$JOBS_OKN" "$(json_num "$JOBS_ONE")" "$(json_num "$JOBS_MIN")" "$(json_num "$JOBS_MEAN")" "$(json_num "$JOBS_FAIR")"
} > "$OUT/results.json"
echo
echo "bench: wrote $OUT/results.json"
