#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The relay's upstream over a slow or faulty WAN link, with the real binaries:
#   cjrelay-sim (FL server) <- linkshaper <- cjrelayd (site-1.J1) <- cjrelay-worker (launched)
# tests/e2e/linkshaper is a byte-transparent TCP proxy, so each scenario runs over any scheme;
# all run over tcp, the half-open link also over stcp (mutual TLS, certificates made here), where
# the keepalive rides inside TLS records.
# Each check quotes the log line (relay's or shaper's) that shows what happened.
# (1) 40 Mbit/s, 40 ms each way: a 16 MiB task downloaded by the worker and its 16 MiB result
#     uploaded to the server, both verified; the relay's peak RSS grows by a bounded amount
# (2) a 5 s stall in the middle of the task download and in the middle of the result upload
#     (make wan: 60 s): the connection is kept, nothing is lost, no task is handed out twice,
#     no reconnect, the job stays up and both transfers resume where they stopped.  FLARE's
#     download protocol is a pull: the receiver asks for one chunk at a time, each request with
#     its own per-request timeout (download_object's per_request_timeout); a request that times
#     out is re-sent with the same state, so the same chunk comes again (at most max_retries
#     times, backing off 2, 4, 8 s), and any other error fails the download.  A stall shorter
#     than the per-request timeout (the simulator's --fetch-timeout, the worker's own) is only a
#     slow reply: TCP holds the bytes and the transfer resumes, nothing is retried.  The relay
#     forwards each chunk request and its reply as they come, so it adds no timeout of its own;
#     its upstream keepalive (below) declares the link dead only after 3 x upstream.ping_interval
#     without a byte (default 180 s), longer than the stall.
# (3) the link reset (RST) in the middle of the task download, then (another run) of the result
#     upload: the relay logs the loss and reconnects.  Neither transfer fails: as FLARE's own
#     client job, the relay keeps no reply owed to a request it forwarded once the link that
#     would bring it is gone (it counts and logs them, inflight_lost), and a requester whose
#     reply went down with the link gets no answer: its own per-request timeout returns
#     TIMEOUT and it re-sends the same state through the new link.  Download: the worker's
#     chunk request times out (its per-request timeout, FLARE's np_streaming_per_request_timeout
#     through the environment, is 3 s here; 600 s by default) and is re-sent
#     (DOWNLOAD_RETRY ... DOWNLOAD_RECOVERED), the same task completes.  Upload: the server's
#     chunk request times out (--fetch-timeout 3 s) and is re-sent, the worker (still serving
#     its result) answers it, the same result completes.  Either way the round verifies and is
#     not re-issued
# (4) the upstream goes half-open in the middle of a download (the peer gone silently: nothing
#     arrives, nothing is refused): the relay sends PINGs on the quiet link and, with no PONG or
#     anything else for 3 x upstream.ping_interval (here 3 x 1 s), declares it dead, reconnects;
#     the download recovers as in (3) and the round verifies
# (5) a link that resets every 20 MiB (make wan: every 200 MiB of a 1 GiB task), twice during
#     one 48 MiB task download: the download recovers after each reset and that task verifies
# (6) a link delivering its bytes in 1448-byte segments (as Ethernet does), 20 Mbit/s: the
#     relay wakes once per piece of a frame, not per segment (SO_RCVLOWAT set to the rest of
#     the frame being read): its read syscalls for an 8 MiB task and result stay under a bound
#     derived from the frame size, where a read per segment would make about 6,000; a count,
#     not a timing, over tcp and stcp
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim; WK=$BUILD/cjrelay-worker
SH=$BUILD/tests/e2e/linkshaper
W=$(mktemp -d); SIM=; RELAY=; SHAPER=
cleanup() {
    for p in $SHAPER $SIM; do kill -9 "$p" 2>/dev/null; done
    [ -n "$RELAY" ] && { kill -TERM "$RELAY" 2>/dev/null; sleep 0.5; kill -9 "$RELAY" 2>/dev/null; }
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
K=$W/certs
HAVE_TLS=1
command -v openssl >/dev/null && sh "$ROOT/tests/unit/tls_certs.sh" "$K" || HAVE_TLS=0

ctl() { $C -s "$R/status.sock" "$@"; }
info_of() { ctl show info json | jq -r ".$1"; }
upstream_up() { [ "$(info_of upstream)" = up ]; }
is_tls() { [ "$1" = stcp ]; }
# quote FILE REGEX: the first line of FILE matching REGEX, without its timestamp, cut to 150
quote() { grep -m1 -E -- "$2" "$1" | sed 's/^[0-9TZ:.-]* *//; s/^linkshaper [0-9TZ:.-]* //' | cut -c1-150; }

# start_sim SCHEME ARGS...: the simulator on SCHEME://127.0.0.1:0 (output $R/sim.*); sets SIM, SIMPORT
start_sim() {
    _sc=$1; shift
    tls=; is_tls "$_sc" && tls="--tls-dir $K"
    # shellcheck disable=SC2086
    $S --listen "$_sc://127.0.0.1:0" $tls --job-id J1 --tensors 4 --format numpy \
        --download-log "$R/downloads" "$@" > "$R/sim.out" 2> "$R/sim.err" & SIM=$!
    SIMPORT=$(sim_port "$R/sim.out")
}
# start_shaper ARGS...: linkshaper toward the simulator (stderr $R/shaper.log); sets SHAPER, SHPORT
start_shaper() {
    $SH --listen 127.0.0.1:0 --to "127.0.0.1:$SIMPORT" --exit-after 120 "$@" > "$R/shaper.out" 2> "$R/shaper.log" & SHAPER=$!
    wait_for 5 grep -q '^SHAPER READY' "$R/shaper.out"
    SHPORT=$(awk '/^SHAPER READY/ {print $3}' "$R/shaper.out")
}
# start_relay SCHEME [SECTION.KEY=VALUE ...]: a relay with one launched worker whose upstream is
# the shaper, the worker's per-request download timeout REQ_TIMEOUT s; sets RELAY
REQ_TIMEOUT=3
start_relay() {
    _sc=$1; shift
    if is_tls "$_sc"; then
        set -- upstream.connection_security=mtls upstream.ca_file="$K/rootCA.pem" \
            upstream.cert_file="$K/client.crt" upstream.key_file="$K/client.key" "$@"
    fi
    relay_ini "$R/relay.ini" relay.on_end_run=wait upstream.url="$_sc://127.0.0.1:$SHPORT" \
        upstream.reconnect_min=0.2 upstream.reconnect_max=1 "$@" \
        workers.listen="unix:$R/w.sock" workers.command="$WK" workers.count=1 \
        workers.heartbeat_interval=1 workers.heartbeat_timeout=10 workers.shutdown_grace=1 \
        status.socket="$R/status.sock" log.level=info
    NVFLARE_NP_STREAMING_PER_REQUEST_TIMEOUT=$REQ_TIMEOUT $D -c "$R/relay.ini" > "$R/relay.log" 2>&1 & RELAY=$!
    wait_for 10 test -S "$R/status.sock"
}
# run NAME SCHEME: a fresh directory $R for one scenario
run() { R=$W/$1; mkdir -p "$R"; SC=$2; }
sim_done() { ! kill -0 "$SIM" 2>/dev/null; }
# reap_sim SECS: waits for the simulator's end (killed after SECS); its status in $rc
reap_sim() {
    wait_for "$1" sim_done || { echo "# simulator still running after $1 s: killed"; kill -9 "$SIM" 2>/dev/null; }
    wait "$SIM" 2>/dev/null; rc=$?; SIM=
}
stop_run() {
    [ -n "$RELAY" ] && { kill -TERM "$RELAY" 2>/dev/null; wait_for 10 sh -c "! kill -0 $RELAY"; kill -9 "$RELAY" 2>/dev/null; wait "$RELAY" 2>/dev/null; }
    [ -n "$SHAPER" ] && { kill -TERM "$SHAPER" 2>/dev/null; wait "$SHAPER" 2>/dev/null; }
    [ -n "$SIM" ] && { kill -9 "$SIM" 2>/dev/null; wait "$SIM" 2>/dev/null; }
    RELAY=; SHAPER=; SIM=
    if [ "$_f" -gt 0 ] && [ -n "$R" ]; then
        echo "# $R: relay log (last 8 lines), shaper log (last 4)"
        tail -8 "$R/relay.log" | cut -c1-250 | note; tail -4 "$R/shaper.log" | note
    fi
}
sim_ok() { [ "$rc" -eq 0 ] && grep -q "^SIM OK rounds=$1" "$R/sim.out"; }   # sim_ok ROUNDS
# lost_before_end LOG: the relay lost its upstream before the run ended (the simulator's exit
# closes the link after that)
lost_before_end() { awk '/run over/ {exit 1} /upstream lost/ {found = 1; exit} END {exit !found}' "$1"; }
# the shaper's connections accepted before the relay's run was over (after it, the simulator's exit
# closes the link and the idle relay may reconnect before it is stopped)
accepted_before_end() {
    awk -v end="$(awk '/run over/ {print $1; exit}' "$R/relay.log")" \
        '/: accepted/ && (end == "" || $2 < end) {n++} END {print n + 0}' "$R/shaper.log"
}
one_conn_kept() { [ "$(accepted_before_end)" -eq 1 ] && ! lost_before_end "$R/relay.log"; }
verified() { quote "$R/sim.out" '^ROUND .* verified'; }

# ---- (1) 40 Mbit/s, 40 ms: a task and a result of 16 MiB ----------------------------------
bandwidth() {
    run "bw-$1" "$1"
    start_sim "$SC" --rounds 1 --model-size 16M
    start_shaper --rate 40M --delay 40
    start_relay "$SC"
    wait_for 15 upstream_up
    sleep 0.5
    IDLE=$(kb "$RELAY" VmHWM)
    t0=$(date +%s.%N)
    reap_sim 60
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    PEAK=$(kb "$RELAY" VmHWM)
    check "(1) $SC: 16 MiB task and 16 MiB result through 40 Mbit/s + 40 ms, verified in ${secs%???????} s: $(verified)" sim_ok 1
    check "(1) $SC: the task was downloaded by the worker: $(cut -d' ' -f2- "$R/downloads" | head -1)" \
        grep -q ' site-1\.J1\.client_api_trainer_1 [0-9]* ok' "$R/downloads"
    check "(1) $SC: relay: $(quote "$R/relay.log" 'result .*submitted|submit_update.*(ok|OK)')" \
        grep -Eq 'result .*submitted|submit_update.*(ok|OK)' "$R/relay.log"
    check "(1) $SC: one shaped connection, never lost before the run ended: $(quote "$R/shaper.log" 'conn 1: accepted')" \
        one_conn_kept
    # (the allocator's arenas make the figure vary from run to run, 2 to 18 MiB seen; make wan's
    # 1 GiB rounds show that it does not follow the model's size)
    check_mem "(1) $SC: relay peak RSS ${PEAK} KiB, ${IDLE} KiB once up: under 32 MiB more" [ $((PEAK - IDLE)) -lt 32768 ]
    stop_run
}

# tasks_accounted: every TASK the simulator handed out is verified or FAILED there, or reported
# failed by the relay; prints the others
tasks_accounted() {
    _bad=0
    for t in $(sed -n 's/^TASK [0-9]* task=\([^ ]*\) .*/\1/p' "$R/sim.out"); do
        grep -Eq "^ROUND [0-9]+ task=$t .*(verified|FAILED)" "$R/sim.out" && continue
        grep -Eq "server task $t.*(failed|EXECUTION_EXCEPTION)" "$R/relay.log" && continue
        echo "task $t: neither verified, failed at the sim, nor reported failed by the relay"; _bad=1
    done
    return $_bad
}
# log_secs FILE REGEX: the time of day (seconds) of FILE's first line matching REGEX
log_secs() { grep -m1 -E -- "$2" "$1" | grep -o 'T[0-9:.]*Z' | head -1 | tr -d TZ | awk -F: '{print $1 * 3600 + $2 * 60 + $3}'; }

# ---- (2) a stall in the middle of each direction -----------------------------------------
stall() {
    run "stall-$1" "$1"
    start_sim "$SC" --rounds 2 --model-size 16M
    start_shaper --stall-after 6M --stall "$STALL" --fault-conns 1
    start_relay "$SC"
    wait_for 20 grep -q 'stall start after .* down' "$R/shaper.log"
    sleep 1
    check "(2) $SC: mid-download stall, the job keeps its link ($(info_of upstream)) and its task ($(ctl show tasks json | jq -r '.tasks[0].state')): $(quote "$R/shaper.log" 'stall start.* down')" \
        upstream_up
    wait_for 30 grep -q 'stall start after .* up' "$R/shaper.log"
    sleep 1
    check "(2) $SC: mid-upload stall, the link kept ($(info_of upstream)): $(quote "$R/shaper.log" 'stall start.* up')" \
        upstream_up
    reap_sim 60
    check "(2) $SC: both transfers resumed, 2 rounds verified: $(verified)" sim_ok 2
    check "(2) $SC: both stalls ended: $(quote "$R/shaper.log" 'stall end up')" \
        sh -c "[ \$(grep -c 'stall end' $R/shaper.log) -eq 2 ]"
    check "(2) $SC: no task handed out twice, none failed ($(grep -c '^TASK' "$R/sim.out") tasks)" \
        sh -c "[ \$(grep -c '^TASK' $R/sim.out) -eq 2 ] && ! grep -q FAILED $R/sim.out"
    check "(2) $SC: no reconnect: one connection, no 'upstream lost' in the relay's log before the run ended" one_conn_kept
    check "(2) $SC: relay: $(quote "$R/relay.log" 'result submitted')" \
        [ "$(grep -c 'result submitted (attempt 1)' "$R/relay.log")" -eq 2 ]
    stop_run
}

# recovered N: the worker's download timed out, was re-sent with the same state and recovered
# (its log lines reach the relay's log), in scenario (N)
recovered() {
    check "($1) $SC: the worker's request timed out and was re-sent: $(quote "$R/relay.log" 'DOWNLOAD_RETRY')" \
        grep -q 'DOWNLOAD_RETRY.*timeout' "$R/relay.log"
    check "($1) $SC: ... and the download resumed on the new link: $(quote "$R/relay.log" 'DOWNLOAD_RECOVERED')" \
        grep -q 'DOWNLOAD_RECOVERED' "$R/relay.log"
    check "($1) $SC: ... no download failed: $(quote "$R/relay.log" 'DOWNLOAD_FAILED|failure reported upstream' | grep . || echo none)" \
        sh -c "! grep -Eq 'DOWNLOAD_FAILED|failure reported upstream' $R/relay.log"
}

# ---- (3) a reset in the middle of one direction --------------------------------------------
# reset_mid SCHEME DIR WHAT: the first connection is reset after 6 MiB DIR (down: the task's
# download, up: the result's upload)
reset_mid() {
    run "reset-$2-$1" "$1"
    start_sim "$SC" --rounds 1 --model-size 16M --max-failures 2 --fetch-timeout 3
    start_shaper --reset-after 6M --dir "$2" --fault-conns 1
    start_relay "$SC"
    reap_sim 40
    check "(3) $SC: link reset mid-$3: $(quote "$R/shaper.log" 'reset after')" grep -q "conn 1: reset after 6291456 bytes $2" "$R/shaper.log"
    check "(3) $SC: relay: $(quote "$R/relay.log" 'upstream lost')" grep -Eq 'upstream lost: .*(reset|closed)' "$R/relay.log"
    check "(3) $SC: ... and reconnected: $(quote "$R/relay.log" 'upstream up .*after retrying')" \
        sh -c "grep -q 'conn 2: accepted' $R/shaper.log && grep -q 'upstream up .*after retrying' $R/relay.log"
    T1=$(sed -n 's/^TASK 1 task=\([^ ]*\) .*/\1/p' "$R/sim.out" | head -1)
    if [ "$2" = down ]; then
        check "(3) $SC: the worker's chunk request in flight is left to its timeout: $(quote "$R/relay.log" 'in flight through the upstream lost')" \
            grep -q '1 request of site-1.J1.client_api_trainer_1 in flight through the upstream lost with it' "$R/relay.log"
        recovered 3
    else
        # (whether one of the worker's chunk replies was on its way at the reset depends on timing)
        echo "# (3) $SC: a chunk reply of the worker's refused at the reset: $(quote "$R/relay.log" 'error notice .* target_unreachable' | grep . || echo none)"
        check "(3) $SC: the server's chunk request timed out and was re-sent (FLARE's retry): $(quote "$R/sim.err" 'DOWNLOAD_RETRY')" \
            grep -q 'DOWNLOAD_RETRY.*site-1.J1.client_api_trainer_1' "$R/sim.err"
    fi
    check "(3) $SC: ... the same task completes, the round is not re-issued: $(verified)" \
        sh -c "grep -q '^ROUND 1 .*verified' $R/sim.out && [ \$(grep -c '^TASK' $R/sim.out) -eq 1 ]"
    check "(3) $SC: the round verifies: $(tail -1 "$R/sim.out")" sim_ok 1
    if out=$(tasks_accounted); then pass "(3) $SC: every task accounted for ($(grep -c '^TASK' "$R/sim.out") handed out)"
    else fail "(3) $SC: $out"; fi
    stop_run
}

# ---- (4) half-open upstream -------------------------------------------------------------------
halfopen() {
    run "halfopen-$1" "$1"
    start_sim "$SC" --rounds 1 --model-size 16M --max-failures 2
    start_shaper --half-open-after 6M --dir down --fault-conns 1
    start_relay "$SC" upstream.ping_interval=1
    reap_sim 60
    dead=$(quote "$R/relay.log" 'peer presumed dead')
    t0=$(log_secs "$R/shaper.log" 'half-open after'); t1=$(log_secs "$R/relay.log" 'peer presumed dead')
    took=$(echo "${t1:-0} - ${t0:-0}" | bc)
    check "(4) $SC: the link went half-open mid-download: $(quote "$R/shaper.log" 'half-open after')" grep -q 'conn 1: half-open after' "$R/shaper.log"
    check "(4) $SC: relay, ${took} s later (bound 3 x ping_interval 1 s + 0.25 s + slack): $dead" \
        sh -c "[ -n '$t1' ] && echo '$took < 4.5' | bc | grep -q 1"
    check "(4) $SC: ... reconnected: $(quote "$R/shaper.log" 'conn 2: accepted')" \
        sh -c "grep -q 'conn 2: accepted' $R/shaper.log && [ \$(grep -c 'upstream up' $R/relay.log) -ge 2 ]"
    recovered 4
    check "(4) $SC: the round verifies, not re-issued: $(tail -1 "$R/sim.out")" \
        sh -c "grep -q '^SIM OK rounds=1' $R/sim.out && [ \$(grep -c '^TASK' $R/sim.out) -eq 1 ]"
    if out=$(tasks_accounted); then pass "(4) $SC: every task accounted for ($(grep -c '^TASK' "$R/sim.out") handed out)"
    else fail "(4) $SC: $out"; fi
    stop_run
}

# ---- (5) a link that resets twice during one task download -----------------------------------
reset_twice() {
    run "reset-twice-$1" "$1"
    start_sim "$SC" --rounds 1 --model-size 48M --max-failures 2 --fetch-timeout 3
    start_shaper --reset-after 20M --dir down --fault-conns 2
    start_relay "$SC"
    reap_sim 60
    check "(5) $SC: the link reset twice mid-download: $(quote "$R/shaper.log" 'conn 2: reset after')" \
        sh -c "grep -q 'conn 1: reset after 20971520 bytes down' $R/shaper.log && grep -q 'conn 2: reset after 20971520 bytes down' $R/shaper.log"
    check "(5) $SC: relay reconnected twice: $(quote "$R/shaper.log" 'conn 3: accepted')" \
        sh -c "grep -q 'conn 3: accepted' $R/shaper.log && [ \$(grep -c 'upstream up .*after retrying' $R/relay.log) -ge 2 ]"
    recovered 5
    check "(5) $SC: ... after each reset ($(grep -c DOWNLOAD_RECOVERED "$R/relay.log") recoveries)" \
        [ "$(grep -c DOWNLOAD_RECOVERED "$R/relay.log")" -ge 2 ]
    check "(5) $SC: the task, handed out once, verifies: $(verified)" \
        sh -c "grep -q '^SIM OK rounds=1' $R/sim.out && [ \$(grep -c '^TASK' $R/sim.out) -eq 1 ]"
    stop_run
}

# ---- (6) small segments: one wakeup per piece of a frame, not per segment --------------------
segments() {
    run "segments-$1" "$1"
    start_sim "$SC" --rounds 1 --model-size 8M
    start_shaper --rate 20M --segment 1448
    start_relay "$SC"
    wait_for 15 upstream_up
    r0=$(awk '/^syscr/ {print $2}' "/proc/$RELAY/io")
    reap_sim 60
    r1=$(awk '/^syscr/ {print $2}' "/proc/$RELAY/io")
    segs=$(( 8 * 1048576 / 1448 ))
    check "(6) $SC: the round through 1448-byte segments verified: $(verified)" sim_ok 1
    # 16 MiB relayed (8 down, 8 up) in 1 MiB frames, a wakeup per 256 KiB of a frame and the
    # worker's side in big reads: a few hundred reads; one per segment would be $segs down alone
    check "(6) $SC: relay read syscalls for the round: $((r1 - r0)) (bound 1500; $segs segments down)" \
        [ $((r1 - r0)) -lt 1500 ]
    stop_run
}

STALL=${WAN_STALL:-5}
bandwidth tcp
stall tcp
reset_mid tcp down download
reset_mid tcp up upload
halfopen tcp
[ "$HAVE_TLS" = 1 ] && halfopen stcp
reset_twice tcp
segments tcp
[ "$HAVE_TLS" = 1 ] && segments stcp
finish
