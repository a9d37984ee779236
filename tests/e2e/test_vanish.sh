#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# What the relay does when the far end goes away, and the timeouts an operator sets per phase.
#   cjrelay-sim (server.J*) <- cjrelayd (site-1, jobs from job start) <- cjrelay-worker x2 per job
# (a) the server job cell vanishes after round 2's task (cjrelay-sim --vanish-job): the relay logs
#     the first "not there" answer and, job_heartbeat_timeout later, that the job is gone; the
#     job's workers are gone within the documented bound; job wait / show jobs give outcome 1 and
#     the reason; a __task_check__ with no answer fails after task_check_timeout, logged
# (b) cjrelayd SIGKILLed while its workers run: every worker is gone within its heartbeat timeout
#     (PR_SET_PDEATHSIG: SIGTERM from the kernel), the job's bootstrap files are removed at the
#     next start; the single-job shorthand sweeps stale bootstrap files beside its status socket
# (c) shortened timeouts fail their phase with a clear line: download_idle_timeout (spool mode,
#     the simulator stopped mid-download: retried, then recovered and verified), hello_timeout
#     (a server that accepts and never answers HELLO), connect_timeout (a server whose accept
#     queue is full: the connect never completes)
# (d) --check-config refuses a download_idle_timeout shorter than one stream chunk at min_rate,
#     and a job_heartbeat_timeout shorter than its interval, naming both keys
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
W=$(mktemp -d); SIMS=; RELAY=; SILENT=
cleanup() {
    for p in $RELAY $SIMS $SILENT; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $RELAY $SIMS $SILENT; do kill -KILL "$p" 2>/dev/null; done
    pkill -KILL -f "$W/" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
CTL="$C -s $W/status.sock"
chmod 755 "$W"

# sim NAME JOB ARGS...: a simulator for one job; sets PORT and SIMPID
sim() {
    n=$1; job=$2; shift 2
    $S --listen "tcp://127.0.0.1:0" --job-id "$job" "$@" > "$W/$n.sim" 2> "$W/$n.simlog" &
    SIMPID=$!
    SIMS="$SIMS $SIMPID"
    PORT=$(sim_port "$W/$n.sim")
}
# start_daemon INI LOG: sets RELAY
start_daemon() {
    $D -c "$1" > "$2" 2>&1 & RELAY=$!
    wait_for 10 test -S "$W/status.sock"
}
# worker_pids JOB: the pids of the job's workers (show workers)
worker_pids() { $CTL show workers job "$1" 2>/dev/null | awk 'NR > 1 && $2 > 0 {print $2}' | sort -u | tr '\n' ' '; }
# all_gone SECS PID...: every pid gone from /proc within SECS
all_gone() {
    _s=$1; shift
    wait_for "$_s" sh -c 'for p in "$@"; do [ -d /proc/$p ] && [ "$(awk "{print \$3}" /proc/$p/stat 2>/dev/null)" != Z ] && exit 1; done; exit 0' x "$@"
}
line() { grep -m1 "$1" "$2" | sed 's/^[^ ]* [^ ]* [a-z]*: //' | cut -c1-200; }   # line PATTERN FILE: the log line, for a check name

relay_ini "$W/site.ini" relay.job_id= relay.spool_dir="$W/spool" relay.spool_allow_tmpfs=true \
    workers.command="$BUILD/cjrelay-worker" workers.count=2 \
    workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=1 \
    upstream.job_heartbeat_interval=0.5 upstream.job_heartbeat_timeout=2 upstream.task_check_timeout=0.5 \
    upstream.download_idle_timeout=1.5 upstream.min_rate=1M upstream.hello_timeout=1 upstream.connect_timeout=1 \
    status.socket="$W/status.sock" status.socket_mode=0660 log.level=info
mkdir -p "$W/spool"
start_daemon "$W/site.ini" "$W/relay.log"

# ---- (a) the server job vanishes ----------------------------------------------------------------
# the tensors inline in the task: round 2's worker needs nothing from the vanished cell and submits
sim 1 J1 --rounds 3 --model-size 2M --tensors 2 --inline --vanish-job J1@2
r=$($CTL job start "{\"job_id\": \"J1\", \"server_url\": \"tcp://127.0.0.1:$PORT\"}")
check "(a) job start J1: $r" [ "$r" = "OK job J1 started" ]
wait_for 20 grep -q '^SIM VANISHED job=J1 round=2' "$W/1.sim"
T0=$(date +%s.%N)
check "(a) the simulator's job cell vanished after round 2's task ($(grep '^SIM VANISHED' "$W/1.sim"))" grep -q '^SIM VANISHED' "$W/1.sim"
PIDS=$(worker_pids J1)
check "(a) J1 has two workers before ($PIDS)" sh -c "[ $(echo $PIDS | wc -w) -eq 2 ]"
# the bound (doc/management.md): job_heartbeat_timeout 2 + one job_heartbeat_interval 0.5 for the
# first "not there" answer + 2 x shutdown_grace 1 for the staged stop, plus 1.5 s of slack
all_gone 12 $PIDS
T=$(echo "$(date +%s.%N) $T0" | awk '{printf "%.1f", $1 - $2}')
wait_for 10 grep -q 'the server job is gone' "$W/relay.log"
check "(a) warning: $(line 'the server job is not there' "$W/relay.log")" \
    grep -q "upstream server.J1: .* answered: .*StreamTargetUnreachable.*server.J1.*the server job is not there (job J1 ends if this lasts 2 s" "$W/relay.log"
check "(a) error: $(line 'the server job is gone' "$W/relay.log")" \
    grep -q "error: upstream server.J1: the server job is gone: .* said it is not there .*; ending job J1" "$W/relay.log"
check "(a) every worker of J1 gone $T s after the cell vanished (bound 6 s)" awk "BEGIN {exit !($T <= 6)}"
check "(a) ... logged as stopped" grep -q "worker site-1.J1.client_api_trainer_[0-9]* (pid [0-9]*)" "$W/relay.log"
out=$(timeout 10 $CTL job wait J1 | tr '\n' ' ')
check "(a) job wait J1: outcome 1, the server job named ($out)" sh -c "printf '%s' '$out' | grep -q 'outcome: 1 reason: the server job server.J1 is gone'"
check "(a) show jobs: J1 ended with outcome 1 ($($CTL show jobs | grep '^J1 ' | tr -s ' '))" sh -c "$CTL show jobs | grep -q '^J1  *ended  *1 '"
check "(a) show info job J1: fl_last_error ($($CTL show info job J1 | grep '^fl_last_error'))" \
    sh -c "$CTL show info job J1 | grep -q '^fl_last_error: the server job server.J1 is gone'"
check "(a) once the job ended, nothing more reaches the simulator for server.J1 (1 s watched)" \
    sh -c "n=\$(grep -c 'for server.J1: no such cell' $W/1.simlog); sleep 1; [ \"\$(grep -c 'for server.J1: no such cell' $W/1.simlog)\" = \"\$n\" ]"
check "(a) task_check_timeout 0.5 (a non-optional request: the vanished cell's server drops it): $(line '__task_check__: timeout' "$W/relay.log")" \
    grep -q "__task_check__: timeout: no progress for 0.5 s while waiting for the reply" "$W/relay.log"

# ---- (b) SIGKILL with workers running -----------------------------------------------------------
sim 2 J2 --rounds 200 --model-size 256K --tensors 2
r=$($CTL job start "{\"job_id\": \"J2\", \"server_url\": \"tcp://127.0.0.1:$PORT\"}")
check "(b) job start J2: $r" [ "$r" = "OK job J2 started" ]
wait_for 10 sh -c "[ \$($CTL show workers job J2 | awk 'NR > 1 && \$2 > 0' | wc -l) -eq 2 ]"
PIDS=$(worker_pids J2)
check "(b) J2's two workers run ($PIDS)" sh -c "[ $(echo $PIDS | wc -w) -eq 2 ]"
check "(b) J2's bootstrap files exist while it runs" sh -c "ls $W/status.jobs/J2/client_api_bootstrap_*.json"
kill -KILL "$RELAY"; wait "$RELAY" 2>/dev/null; RELAY=
check "(b) every worker gone within workers.heartbeat_timeout (5 s) of the SIGKILL" all_gone 5 $PIDS
rm -f "$W/status.sock"
start_daemon "$W/site.ini" "$W/relay2.log"
check "(b) the next start removes J2's directory and its bootstrap files: $(line 'stale directory of job J2' "$W/relay2.log")" \
    sh -c "[ ! -e $W/status.jobs/J2 ] && ! ls $W/status.jobs/*/client_api_bootstrap_* 2>/dev/null | grep -q ."

# ---- (c) shortened timeouts ---------------------------------------------------------------------
# download_idle_timeout 1.5 s (spool mode): the simulator stops answering at the third download
# request for 3 s; the relay's pull times out after 1.5 s without a chunk, retries after 2 s, recovers
sim 3 J3 --rounds 1 --model-size 16M --tensors 2 --stall-download 3@3
r=$($CTL job start "{\"job_id\": \"J3\", \"server_url\": \"tcp://127.0.0.1:$PORT\", \"mode\": \"spool\"}")
check "(c) job start J3 (spool): $r" [ "$r" = "OK job J3 started" ]
out=$(timeout 30 $CTL job wait J3 | tr '\n' ' ')
wait_for 5 grep -q '^SIM OK' "$W/3.sim"
check "(c) the simulator stalled mid-download ($(grep '^SIM STALL' "$W/3.sim"))" grep -q '^SIM STALL downloads for 3 s from request 3' "$W/3.sim"
check "(c) download_idle_timeout 1.5: $(line 'DOWNLOAD_RETRY' "$W/relay2.log")" \
    grep -q "\[DOWNLOAD_RETRY\] source=server.J3 .*: timeout (no progress for 1.5 s while waiting for the reply)" "$W/relay2.log"
check "(c) ... then $(line 'DOWNLOAD_RECOVERED' "$W/relay2.log")" grep -q "\[DOWNLOAD_RECOVERED\] source=server.J3" "$W/relay2.log"
check "(c) ... and J3's round verified ($(tail -1 "$W/3.sim"); $out)" \
    sh -c "grep -q '^SIM OK rounds=1' $W/3.sim && printf '%s' '$out' | grep -q 'outcome: 0'"
# phase_timeout KEY JOB WHAT PORTFILE AWAITED: a job toward the server whose port is in PORTFILE;
# its upstream attempt must end after KEY's 1 s, "still waiting for the AWAITED"
phase_timeout() {
    wait_for 5 test -s "$4"
    r=$($CTL job start "{\"job_id\": \"$2\", \"server_url\": \"tcp://127.0.0.1:$(cat "$4")\"}")
    check "(c) job start $2 ($3): $r" [ "$r" = "OK job $2 started" ]
    wait_for 6 grep -q "still waiting for the $5" "$W/relay2.log"
    check "(c) $1 1: $(line "still waiting for the $5" "$W/relay2.log")" \
        grep -q "handshake not completed within 1 s (still waiting for the $5)" "$W/relay2.log"
    $CTL job stop "$2" test over > /dev/null
}
python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
' > "$W/silent.port" & SILENT=$!
phase_timeout hello_timeout J4 "a server that accepts and never answers HELLO" "$W/silent.port" READY
# a server whose accept queue is full: the relay's SYN goes unanswered and its connect(2) never
# completes (the kernel would retry for about two minutes)
python3 -c '
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(0)
fill = []
for _ in range(3):
    c = socket.socket(); c.setblocking(False)
    try: c.connect(s.getsockname())
    except BlockingIOError: pass
    fill.append(c)
print(s.getsockname()[1], flush=True)
time.sleep(120)
' > "$W/full.port" & SILENT="$SILENT $!"
phase_timeout connect_timeout J7 "a server whose connect never completes" "$W/full.port" connection

# single-job shorthand: a stale bootstrap file beside the status socket is swept at start
kill -TERM "$RELAY"; wait "$RELAY" 2>/dev/null; RELAY=
sim 5 J5 --rounds 1 --model-size 256K --tensors 2
mkdir -p "$W/one" && touch "$W/one/client_api_bootstrap_7.json" "$W/one/.client_api_bootstrap_3.json.tmp-0badf00d"
relay_ini "$W/one.ini" relay.job_id=J5 upstream.url="tcp://127.0.0.1:$PORT" workers.command="$BUILD/cjrelay-worker" \
    workers.listen="unix:$W/one/workers.sock" status.socket="$W/one/status.sock"
$D -c "$W/one.ini" > "$W/one.log" 2>&1 & RELAY=$!
wait_for 20 grep -q '^SIM OK' "$W/5.sim"
check "(b) single-job shorthand: $(line 'bootstrap file left by an earlier daemon' "$W/one.log")" \
    sh -c "[ ! -e $W/one/client_api_bootstrap_7.json ] && [ ! -e $W/one/.client_api_bootstrap_3.json.tmp-0badf00d ] && grep -q 'removed $W/one/client_api_bootstrap_7.json, a bootstrap file left by an earlier daemon' $W/one.log"
wait_for 10 sh -c "! kill -0 $RELAY 2>/dev/null"; RELAY=

# ---- (d) --check-config -------------------------------------------------------------------------
relay_ini "$W/bad.ini" upstream.download_idle_timeout=2 upstream.min_rate=128K \
    upstream.job_heartbeat_interval=10 upstream.job_heartbeat_timeout=5 status.socket="$W/bad.sock"
$D -c "$W/bad.ini" --check-config > "$W/bad.out" 2>&1; rc=$?
check "(d) --check-config refuses the combination (exit $rc)" [ "$rc" -ne 0 ]
check "(d) $(grep -m1 'download_idle_timeout' "$W/bad.out")" \
    grep -q "bad.ini:[0-9]*: upstream.download_idle_timeout (2 s) is shorter than one limits.stream_chunk (1M) takes at upstream.min_rate (128K/s): 8.0 s" "$W/bad.out"
check "(d) $(grep -m1 'job_heartbeat_timeout' "$W/bad.out")" \
    grep -q "job_heartbeat_timeout (5) must be 0 or at least job_heartbeat_interval (10)" "$W/bad.out"
relay_ini "$W/good.ini" status.socket="$W/good.sock"
check "(d) the defaults pass --check-config" $D -c "$W/good.ini" --check-config

finish
