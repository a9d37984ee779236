#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The pipe dialect with FLARE's own trainers: the stock 2.8.1 and 2.7.2 `nvflare.client`
# (FlareAgent + CellPipe, releases.md §4-5), a ScriptRunner-style numpy script
# (tests/e2e/pipe/train.py), launched by cjrelayd for a job started with `cjrelayctl job start`
# and a pipe-dialect description (flare_version 2.8.1 / 2.7.2), against cjrelay-sim as the
# server (--format numpy).  For each version:
# (a) launch_once true: every round verified by the server; every task download made by the
#     trainer's cell, none by the relay (the download log's requester); the result pulled from
#     the trainer through the relay; the trainer's cell <site>.<job>.<site>_<job>_active is a
#     child of the job's cell (its HELLO, its READY); the config file 0600 with the relay's
#     conn props and the job's token (every pipe request carries it, the relay checks it);
#     CLIENT_API_TYPE=EX_PROCESS_API and no bootstrap variable; the metric pipe
#     taken (show metrics has its flare.log value); _END_ at the end and the trainer gone by itself; job wait gives 0; show jobs
#     names the generation
# (b) launch_once false: one trainer process per round, each exits once the server pulled
#     its result (never signalled), every round verified; the launcher starts the next one
#     right away (the stock executor starts it with the next task), so the last one gets _END_
#     without a task (2.8.1's then exits; 2.7.2's keeps its non-daemon threads after leaving its
#     loop until the staged stop's SIGTERM: no task is lost either way)
# (c) the trainer SIGKILLed while it downloads its task: the task is reported failed upstream
#     at once, the server re-issues it, the relaunched trainer serves both rounds
# Skipped, with the reason, when ../shared/flare (FLARE_TREES) or Debian's python3-numpy and
# python3-msgpack are missing.
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
TREES=${FLARE_TREES:-$ROOT/../shared/flare}
SYSPY=${SYSPY:-/usr/bin/python3}
if [ ! -d "$TREES/2.8.1/nvflare" ] && [ ! -d "$TREES/2.7.2/nvflare" ]; then
    skip "all: no FLARE release trees (FLARE_TREES or ../shared/flare/2.8.1, 2.7.2)"; finish
fi
if ! $SYSPY -c 'import numpy, msgpack' 2>/dev/null; then
    skip "all: Debian's python3-numpy / python3-msgpack are missing (tests/deps.sh installs them)"; finish
fi
TREES=$(cd "$TREES" && pwd)
W=$(mktemp -d); SIMS=; RELAY=
cleanup() {
    for p in $RELAY $SIMS; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $RELAY $SIMS; do kill -KILL "$p" 2>/dev/null; done
    pkill -KILL -f "$W/" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
CTL="$C -s $W/status.sock"

relay_ini "$W/site.ini" relay.job_id= relay.max_jobs=4 relay.job_linger=120 workers.heartbeat_interval=1 \
    workers.heartbeat_timeout=30 workers.shutdown_grace=10 status.socket="$W/status.sock" log.level=info
CJTEST_DAEMON_ONLY=1 $D -c "$W/site.ini" > "$W/relay.log" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/status.sock"

TOKEN=cjtest-pipetoken-41c7e2; SIG=cjtest-pipesig-9d03aa
# desc JOB VERSION PORT LAUNCH_ONCE [creds]: the description cjrelay_flare sends for a ScriptRunner job
desc() {
    app=$W/ws/$1/app_site-1
    printf '{"job_id": "%s", "flare_version": "%s", "server_url": "tcp://127.0.0.1:%s", "workspace": "%s/ws",' \
        "$1" "$2" "$3" "$W"
    if [ -n "$5" ]; then
        printf ' "credentials": {"token": "%s", "token_signature": "%s", "ssid": "s1"},' "$TOKEN" "$SIG"
    fi
    printf ' "worker": {"argv": ["%s", "-u", "custom/train.py"], "cwd": "%s", "env": {"PYTHONPATH": "%s/%s:%s/custom",' \
        "$SYSPY" "$app" "$TREES" "$2" "$app"
    printf ' "PATH": "/usr/bin:/bin"}, "count": 1, "listen": "tcp://127.0.0.1:0", "launch_timeout": 120},'
    printf ' "bootstrap": {"TASK_EXCHANGE": {"pipe_channel_name": "task", "HEARTBEAT_TIMEOUT": 60,'
    printf ' "submit_result_timeout": 300, "max_resends": 3, "download_complete_timeout": 1800, "launch_once": %s,' "$4"
    printf ' "exchange_format": "numpy", "server_expected_format": "numpy", "transfer_type": "FULL",'
    printf ' "train_with_eval": false, "train_task_name": "train", "eval_task_name": "validate",'
    printf ' "submit_model_task_name": "submit_model"}, "METRICS_EXCHANGE": {"pipe_channel_name": "metric",'
    printf ' "HEARTBEAT_TIMEOUT": 60}}}\n'
}

# run LABEL JOB VERSION LAUNCH_ONCE ROUNDS [creds]: one job through to its end, then its checks
run() {
    label=$1; job=$2; ver=$3; once=$4; rounds=$5; creds=$6
    trainer=site-1.$job.site-1_${job}_active
    if [ ! -d "$TREES/$ver/nvflare" ]; then skip "($label) no FLARE $ver tree in $TREES"; return; fi
    mkdir -p "$W/ws/$job/app_site-1/custom"
    cp "$ROOT/tests/e2e/pipe/train.py" "$W/ws/$job/app_site-1/custom/"
    $S --listen tcp://127.0.0.1:0 --job-id "$job" --rounds "$rounds" --model-size 1M --tensors 2 --format numpy \
        --download-log "$W/$job.dl" > "$W/$job.sim" 2> "$W/$job.simlog" &
    sim=$!; SIMS="$SIMS $sim"
    port=$(sim_port "$W/$job.sim")
    desc "$job" "$ver" "$port" "$once" "$creds" > "$W/$job.json"
    a=$($CTL job start - < "$W/$job.json")
    check "($label) job start: $a" [ "$a" = "OK job $job started" ]
    check "($label) show jobs: the job runs FLARE generation 2.7-2.8" \
        sh -c "$CTL show jobs | awk '\$1 == \"$job\"' | grep -q ' 2.7-2.8 '"
    check "($label) show workers and show prometheus say so too" sh -c \
        "$CTL show workers job $job json | jq -e '.workers | length > 0 and all(.flare == \"2.7-2.8\")' > /dev/null &&
         $CTL show prometheus | grep -qx 'cjrelay_job_info{job_id=\"$job\",flare=\"2.7-2.8\"} 1'"
    check "($label) show metrics: the trainer's flare.log('round', ...) from its metric pipe" \
        wait_for 60 sh -c "$CTL show metrics job $job 2>/dev/null | grep -q '$trainer  *round  *[0-9]'"
    wait_for 120 sh -c "grep -q '^SIM OK\|^SIM FAIL' $W/$job.sim"
    wait "$sim"; rc=$?
    check "($label) the server verified every round (rc $rc): $(tail -1 "$W/$job.sim")" \
        sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=$rounds' $W/$job.sim"
    out=$(timeout 60 $CTL job wait "$job" | tr '\n' ' ')
    check "($label) job wait: outcome 0 ($out)" sh -c "printf '%s' '$out' | grep -q '^job_id: $job outcome: 0 '"
    grep "worker site-1_${job}_active" "$W/relay.log" > "$W/$job.trainer"
    check "($label) downloads: $rounds, each by the trainer's cell $trainer" \
        sh -c "[ \$(wc -l < $W/$job.dl) -eq $rounds ] && [ \$(awk '\$2 == \"$trainer\"' $W/$job.dl | wc -l) -eq $rounds ]"
    check "($label) the relay never downloaded a tensor (no download by site-1.$job)" \
        sh -c "! awk '{print \$2}' $W/$job.dl | grep -qx 'site-1.$job'"
    check "($label) each result pulled by the server from the trainer's cell, through the relay" \
        sh -c "[ \$(grep -c '^RESULT .* from=$trainer ' $W/$job.sim) -eq $rounds ]"
    check "($label) the trainer's cell is a child of the job's cell (HELLO $trainer on the job's listener)" \
        grep -q "link worker $trainer (127.0.0.1:[0-9]*): handshake -> up: peer $trainer" "$W/relay.log"
    check "($label) it found its parent as site-1.$job (the READY's name): its downloads and pulls crossed it" \
        grep -q "$trainer: created backbone internal connector to tcp://127.0.0.1:" "$W/$job.trainer"
    check "($label) CLIENT_API_TYPE=EX_PROCESS_API, no bootstrap variable" \
        grep -q 'trainer: env CLIENT_API_TYPE=EX_PROCESS_API NVFLARE_CLIENT_API_BOOTSTRAP=None' "$W/$job.trainer"
    cfgf=$W/ws/$job/app_site-1/config/client_api_config.json
    check "($label) config/client_api_config.json is 0600" sh -c "[ \$(stat -c %a $cfgf) = 600 ]"
    check "($label) ... with cp_conn_props site-1.$job at the job's tcp listener, the same as the pipe's root_url" \
        $SYSPY -c "import json,sys; c=json.load(open('$cfgf')); p=c['cp_conn_props']; a=c['TASK_EXCHANGE']['pipe']['ARG'];
sys.exit(not (p['fqcn'] == 'site-1.$job' and p['url'].startswith('tcp://127.0.0.1:') and a['root_url'] == p['url']
 and c['root_conn_props']['fqcn'] == 'server' and a['token'] == '$job' and c['METRICS_EXCHANGE']['pipe']['ARG']['mode'] == 'ACTIVE'
 and c['TASK_EXCHANGE']['launch_once'] == $( [ "$once" = true ] && echo True || echo False)))"
    if [ -n "$creds" ]; then
        check "($label) the config holds the job's token; every pipe request carried it (none refused)" \
            sh -c "grep -q '\"auth_token\": \"$TOKEN\"' $cfgf && ! grep -q 'without the site.s credentials' $W/relay.log"
    fi
    check "($label) the metric pipe's messages were taken (flare.log returned every round)" \
        sh -c "[ \$(grep -c 'trainer: round' $W/$job.trainer) -eq $rounds ]"
    check "($label) _END_ sent at the end of the run" grep -q "pipe: _END_ (end_of_job) sent to $trainer" "$W/relay.log"
    check "($label) the trainer took it (its task pipe status changed to _END_)" \
        grep -q 'task pipe status changed to _END_' "$W/$job.trainer"
    check "($label) the trainer left its loop at _END_" grep -q 'trainer: done' "$W/$job.trainer"
    launches=$(grep -c "worker $trainer launched" "$W/relay.log")
    if [ "$once" = true ]; then
        check "($label) launch_once true: one trainer process for the $rounds rounds ($launches)" [ "$launches" -eq 1 ]
        check "($label) ... which exited by itself after _END_ (exit code 0)" \
            sh -c "grep 'worker $trainer (pid [0-9]*) stopped' $W/relay.log | tail -1 | grep -q 'exit code 0\$'"
    else
        # one per round, and the one launched for the next task that _END_ ended instead
        check "($label) launch_once false: one trainer process per round, + the one _END_ ended ($launches for $rounds)" \
            [ "$launches" -eq $((rounds + 1)) ]
        check "($label) launch_once false: each trainer that served a round exited 0 by itself, never signalled" \
            sh -c "[ \$(grep -c 'worker $trainer (pid [0-9]*) exited after [0-9.]* s: exit code 0\$' $W/relay.log) -eq $rounds ]"
        check "($label) launch_once false: ... only after the server pulled its result" \
            sh -c "[ \$(grep -c 'exiting after server download' $W/$job.trainer) -eq $rounds ]"
    fi
}

run "2.8.1 a" P281 2.8.1 true 3 creds
run "2.8.1 b" Q281 2.8.1 false 2
run "2.7.2 a" P272 2.7.2 true 3 creds
run "2.7.2 b" Q272 2.7.2 false 2
# ---- (c) the trainer killed mid-download: the task fails upstream, a new trainer serves the next --------
# (2.8.1; 128 MiB tasks so that the download is under way when the SIGKILL comes)
if [ -d "$TREES/2.8.1/nvflare" ]; then
    job=K281; trainer=site-1.$job.site-1_${job}_active
    mkdir -p "$W/ws/$job/app_site-1/custom"
    cp "$ROOT/tests/e2e/pipe/train.py" "$W/ws/$job/app_site-1/custom/"
    $S --listen tcp://127.0.0.1:0 --job-id "$job" --rounds 2 --model-size 128M --tensors 4 --format numpy \
        --download-log "$W/$job.dl" > "$W/$job.sim" 2> "$W/$job.simlog" &
    sim=$!; SIMS="$SIMS $sim"
    port=$(sim_port "$W/$job.sim")
    desc "$job" 2.8.1 "$port" true > "$W/$job.json"
    a=$($CTL job start - < "$W/$job.json")
    check "(c) job start: $a" [ "$a" = "OK job $job started" ]
    wait_for 60 grep -q "sent to $trainer on cell_pipe.task" "$W/relay.log"
    pid=$(grep "worker $trainer launched: pid" "$W/relay.log" | head -1 | sed 's/.*launched: pid \([0-9]*\).*/\1/')
    kill -KILL "$pid" 2>/dev/null
    wait_for 180 sh -c "grep -q '^SIM OK\|^SIM FAIL' $W/$job.sim"
    wait "$sim"; rc=$?
    check "(c) the task it held failed upstream at once (EXECUTION_EXCEPTION), no wait for a timeout" \
        grep -q "failure reported upstream as EXECUTION_EXCEPTION (process killed by signal 9)" "$W/relay.log"
    check "(c) the server re-issued it and verified both rounds with the relaunched trainer (rc $rc): $(tail -1 "$W/$job.sim")" \
        sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=2' $W/$job.sim && [ \$(grep -c '^ROUND .* FAILED' $W/$job.sim) -eq 1 ]"
    check "(c) two trainer processes ($(grep -c "worker $trainer launched" "$W/relay.log"))" \
        [ "$(grep -c "worker $trainer launched" "$W/relay.log")" -eq 2 ]
    check "(c) still no download by the relay" sh -c "! awk '{print \$2}' $W/$job.dl | grep -qx 'site-1.$job'"
else
    skip "(c) no FLARE 2.8.1 tree in $TREES"
fi
check "no Python traceback from any trainer" sh -c "! grep -q 'Traceback' $W/relay.log"
if [ "$_f" -gt 0 ]; then grep -v 'status: pid' "$W/relay.log" | tail -60 | note; fi
finish
