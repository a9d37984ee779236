#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The whole job end to end with the real binaries:
#   cjrelay-sim (FL server) <- cjrelayd (site-1.J1) <- cjrelay-worker x N (launched by the relay)
# (a) several rounds verified by the sim, numpy and safetensors items; every task ref is
#     downloaded by a worker FQCN and none by the relay; __end_run__ ends the relay, exit 0
# (b) a 1 GiB model round: the relay's peak RSS stays within 64 MiB of its idle RSS (make check
#     runs this suite sanitized only, 256 MiB without the figures; test_memory checks them)
#     (under ASan+UBSan a 256 MiB round, its memory figures not checked)
# (c) a worker killed mid-download: the task fails upstream with a log line naming it,
#     the relay restarts the worker and the round is served again; the launch token and
#     the job credentials (credentials_file) appear in no log, argv or show output
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
W=$(mktemp -d); SIM=; RELAY=
cleanup() {
    for p in $RELAY $SIM; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $RELAY $SIM; do kill -KILL "$p" 2>/dev/null; done
    pkill -KILL -f "cjrelay-worker" -P "$RELAY" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
# The job's delegated credentials: values that must never be seen outside the file.
CRED_TOKEN=cjtest-token-5f0c2a9e71d84b36; CRED_SIG=cjtest-signature-a83d7e10c4b2; CRED_SSID=cjtest-ssid-92b1f6e5
printf 'token = %s\ntoken_signature = %s\nssid = %s\n' "$CRED_TOKEN" "$CRED_SIG" "$CRED_SSID" > "$W/creds"
chmod 600 "$W/creds"

# run_job NAME COUNT ON_END SIM-ARGS...: sim + relay; sets SIM, RELAY, PORT; files in $W/NAME.*
run_job() {
    n=$1; count=$2; onend=$3; shift 3
    $S --listen tcp://127.0.0.1:0 --job-id J1 --download-log "$W/$n.downloads" "$@" > "$W/$n.sim" 2> "$W/$n.simlog" & SIM=$!
    PORT=$(sim_port "$W/$n.sim")
    relay_ini "$W/$n.ini" relay.on_end_run="$onend" \
        upstream.url="tcp://127.0.0.1:$PORT" upstream.credentials_file="$W/creds" \
        workers.listen="unix:$W/$n.w.sock" workers.command="$BUILD/cjrelay-worker" workers.count="$count" \
        workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=2 \
        status.socket="$W/$n.status.sock"
    $D -c "$W/$n.ini" > "$W/$n.relay" 2>&1 & RELAY=$!
}

# ---- (a) rounds, numpy, 2 workers; end of run ends the relay -----------------------
run_job a 2 exit --rounds 3 --model-size 16M --tensors 4 --format numpy
wait "$SIM"; rc=$?; SIM=
check "(a) sim verified every round (numpy, 2 workers): $(tail -1 $W/a.sim)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=3' $W/a.sim"
check "(a) 3 rounds verified" [ "$(grep -c '^ROUND .* verified' "$W/a.sim")" -eq 3 ]
check "(a) every task ref downloaded by a worker" sh -c "[ \$(grep -c ' site-1\.J1\.client_api_trainer_[0-9]* [0-9]* ok' $W/a.downloads) -eq 3 ]"
check "(a) no download by the relay cell" sh -c "! grep -q ' site-1\.J1 ' $W/a.downloads"
check "(a) results downloaded from the workers" sh -c "[ \$(grep -c 'result_from=site-1.J1.client_api_trainer_' $W/a.sim) -eq 3 ]"
wait_for 20 sh -c "! kill -0 $RELAY"
wait "$RELAY"; rc=$?; RELAY=
check "(a) __end_run__ ends the relay with exit 0 (rc $rc)" [ "$rc" -eq 0 ]
check "(a) relay logged the end of run" grep -q "end of run" "$W/a.relay"
# The pids this relay launched (other cjrelay-worker processes on the machine are not ours).
a_pids=$(echo $(sed -n 's/.* launched: pid \([0-9]*\),.*/\1/p' "$W/a.relay"))
check "(a) no worker left running (launched: $a_pids)" sh -c "[ -n '$a_pids' ] && for p in $a_pids; do ! kill -0 \$p 2>/dev/null || exit 1; done"
check "(a) bootstrap files removed when their workers ended" sh -c "! ls $W/*bootstrap* >/dev/null 2>&1"

# ---- (a') safetensors, 1 worker ------------------------------------------------------
run_job s 1 exit --rounds 2 --model-size 8M --tensors 3 --format safetensors
wait "$SIM"; rc=$?; SIM=
check "(a) sim verified every round (safetensors): $(tail -1 $W/s.sim)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=2' $W/s.sim"
wait_for 20 sh -c "! kill -0 $RELAY"; wait "$RELAY"; RELAY=

# ---- (b) 1 GiB model: relay memory does not follow the model ------------------------
# (under ASan the memory figures mean nothing: a 256 MiB model keeps the suite short there)
if [ "$CJ_SAN" = 1 ]; then BM=256M; else BM=1G; fi
run_job b 1 wait --rounds 1 --model-size $BM --tensors 8 --format numpy
wait_for 15 "$C" -s "$W/b.status.sock" show info
sleep 1
IDLE=$(kb "$RELAY" VmRSS)
wait "$SIM"; rc=$?; SIM=
PEAK=$(kb "$RELAY" VmHWM)
check "(b) $BM round verified: $(grep '^ROUND' $W/b.sim | cut -c1-120)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=1' $W/b.sim"
check_mem "(b) relay peak RSS ${PEAK} KiB within 64 MiB of idle ${IDLE} KiB" [ $((PEAK - IDLE)) -lt 65536 ]
check "(b) show tasks lists the finished task" sh -c "$C -s $W/b.status.sock show tasks json | jq -e '.tasks | length >= 1' >/dev/null"
check "(b) show refs lists the task ref and the result ref" sh -c "$C -s $W/b.status.sock show refs json | jq -e '[.refs[].kind] | (index(\"task\") != null) and (index(\"result\") != null)' >/dev/null"
check "(b) show metrics keeps the worker's metric after the run ended" sh -c "$C -s $W/b.status.sock show metrics json | jq -e '.metrics[0].name == \"loss\"' >/dev/null"
"$C" -s "$W/b.status.sock" shutdown >/dev/null
wait_for 20 sh -c "! kill -0 $RELAY"; wait "$RELAY"; rc=$?; RELAY=
check "(b) shutdown after the run ended exits 0 (rc $rc)" [ "$rc" -eq 0 ]

# ---- (c) a worker killed mid-download --------------------------------------------------
# (512 MiB: the download lasts long enough to be caught in the middle; ASan's slower worker needs half)
if [ "$CJ_SAN" = 1 ]; then CM=256M; else CM=512M; fi
run_job c 1 exit --rounds 2 --model-size $CM --tensors 8 --format numpy --max-failures 3 --fetch-timeout 20
# the task being delivered and its worker, both from one answer of show tasks
# ($W/c.tasks.now: "TASK_ID WORKER" of the first task delivering, empty when none is)
delivering() {
    $C -s "$W/c.status.sock" show tasks json > "$W/c.tasks" 2>&1 &&
        jq -r '[.tasks[] | select(.state == "delivering")][0] // empty | "\(.task_id) \(.worker)"' \
            "$W/c.tasks" > "$W/c.tasks.now" 2>/dev/null && [ -s "$W/c.tasks.now" ]
}
: > "$W/c.tasks.now"; wait_for 20 delivering; dl=$?
read -r task holder < "$W/c.tasks.now"
victim=$($C -s "$W/c.status.sock" show workers json | jq -r --arg w "$holder" '.workers[] | select(.fqcn == $w) | .pid')
if [ "$dl" -eq 0 ] && [ -n "$task" ] && [ "$task" != null ] && [ "${victim:-0}" -gt 0 ] 2>/dev/null; then
    pass "(c) task $task is being downloaded by worker $holder, pid $victim"
else
    fail "(c) no task seen delivering within 20 s (task '$task', worker '$holder', pid '$victim'); show tasks said:"; note "$W/c.tasks"
fi
bs=$(ls "$W"/*bootstrap*.json 2>/dev/null | head -1)
check "(c) the running worker's bootstrap file is mode 0600 ($bs)" sh -c "[ -n '$bs' ] && [ \$(stat -c %a '$bs') = 600 ]"
tok=$(jq -r .launch_token "$bs" 2>/dev/null)
check "(c) the launch token (${#tok} chars) is not on the worker's argv" sh -c "[ ${#tok} -eq 43 ] && ! tr '\\0' ' ' < /proc/$victim/cmdline | grep -qF -- '$tok'"
check "(c) ... nor in the relay's log or show output" sh -c "! grep -qF -- '$tok' $W/c.relay && ! $C -s $W/c.status.sock show workers json | grep -qF -- '$tok'"
for what in info config workers tasks refs stats; do $C -s "$W/c.status.sock" show $what json; done > "$W/c.show" 2>&1
tr '\0' ' ' < "/proc/$victim/cmdline" > "$W/c.argv"; tr '\0' ' ' < "/proc/$RELAY/cmdline" >> "$W/c.argv"
check "(c) the relay took the credentials from the file (so their absence below means something)" \
    grep -q "auth headers set for client site-1 (token from file, token_signature from file, ssid from file)" "$W/c.relay"
check "(c) show output was captured ($(wc -c < "$W/c.show") bytes) and names the credentials file" grep -qF "$W/creds" "$W/c.show"
for v in "$CRED_TOKEN" "$CRED_SIG" "$CRED_SSID"; do
    check "(c) the job credential ${v%%-[0-9a-f]*}... is in no log, argv or show output" \
        sh -c "! grep -qF -- '$v' $W/c.relay $W/c.show $W/c.argv"
done
kill -KILL "$victim"
wait_for 10 sh -c "! test -e '$bs'"
check "(c) the killed worker's bootstrap file is removed" sh -c "[ -n '$bs' ] && ! test -e '$bs'"
wait_for 60 sh -c "$C -s $W/c.status.sock show metrics json | jq -e '.metrics | length >= 1'"
check "(c) show metrics has the restarted worker's metric" sh -c "$C -s $W/c.status.sock show metrics json | jq -e '.metrics[0].name == \"loss\"' >/dev/null"
wait "$SIM"; rc=$?; SIM=
check "(c) the task failed upstream: the sim saw a failed round" grep -q '^ROUND 1 .*FAILED' "$W/c.sim"
check "(c) relay log names the failed task $task" grep -q "$task.*fail\|fail.*$task" "$W/c.relay"
check "(c) worker restarted (a second launch)" grep -q "client_api_trainer_2" "$W/c.relay"
check "(c) the rounds still all verified: $(tail -1 $W/c.sim)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=2' $W/c.sim"
wait_for 20 sh -c "! kill -0 $RELAY"; wait "$RELAY"; RELAY=
finish
