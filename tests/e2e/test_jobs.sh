#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The site daemon: one cjrelayd with no [relay] job_id runs the jobs `job start` hands it.
#   3 simulators (server.J1 over tcp, server.J2 over http, server.J3 over grpc in spool mode)
#   <- cjrelayd (site-1) <- a cjrelay-worker per job, launched in the job's own directory
# (a) three jobs at once, each verified by its simulator; job wait gives outcome 0 each;
#     show jobs / show stats job ID / show workers job ID; the totals are labelled
# (b) every kind of mistake in a description refused with the field named, nothing started;
#     a second job with a live job's id (409); the job limit (503); read-only clients (403)
# (c) job stop mid-download: outcome 9 (aborted), reason given, _process_rc.txt in the workspace;
#     a second job stop while a job drains ends it at once
# (d) the description's credentials appear in no log, argv or show output
# (e) SIGTERM with a job running: it drains, the daemon exits 0, no job directory is left;
#     a stale job directory from an earlier daemon is removed (and logged) at start
# (f) a job whose server never answers ends with 104 after [upstream] first_connect_timeout,
#     while a job beside it verifies
# (g) 100 short jobs in sequence: RSS and open fds flat; 20 idle jobs: the per-job cost
# (h) the client parent (the simulator plays it): STARTED and STOPPED, show_stats answered,
#     client_command abort ends the job as aborted (9)
# (i) worker.user / worker.group: the worker runs as that account (root only), owns its socket
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
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
ctl() { $CTL "$@"; }
TOKEN=cjtest-jobtoken-7d21c0e94f; SIG=cjtest-jobsig-0b93e7a2; SSID=cjtest-jobssid-55c1

# sim NAME SCHEME JOB ARGS...: a simulator for one job; sets PORT
sim() {
    n=$1; scheme=$2; job=$3; shift 3
    $S --listen "$scheme://127.0.0.1:0" --job-id "$job" --download-log "$W/$n.downloads" "$@" > "$W/$n.sim" 2> "$W/$n.simlog" &
    SIMS="$SIMS $!"
    eval "PID_$n=$!"
    PORT=$(sim_port "$W/$n.sim")
}
# job JSON: job start; prints the answer
job() { ctl job start "$1"; }

mkdir -p "$W/status.jobs/OLD" && touch "$W/status.jobs/OLD/client_api_bootstrap_1.json"   # left by an earlier daemon
mkdir -p "$W/spool/OLD/t1/r1" "$W/spool/KEEP" && touch "$W/spool/OLD/t1/r1/chunk_0.npz"      # and its spool
relay_ini "$W/site.ini" relay.job_id= relay.max_jobs=3 relay.job_linger=60 relay.spool_dir="$W/spool" \
    relay.spool_allow_tmpfs=true workers.command="$BUILD/cjrelay-worker" workers.count=1 \
    workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=2 \
    status.socket="$W/status.sock" status.socket_mode=0666 log.level=info
mkdir -p "$W/spool" "$W/ws"
chmod 755 "$W"
CJTEST_DAEMON_ONLY=1 $D -c "$W/site.ini" > "$W/relay.log" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/status.sock"
check "the daemon starts with no job" sh -c "$CTL show jobs | wc -l | grep -qx 1"
check "(e) a stale job directory is removed at start, and logged" sh -c "[ ! -e $W/status.jobs/OLD ] && grep -q 'stale directory of job OLD' $W/relay.log"
check "(e) ... and its spool directory, not another's" sh -c "[ ! -e $W/spool/OLD ] && [ -d $W/spool/KEEP ] && grep -q 'stale spool directory of job OLD' $W/relay.log"
check "show info: no job, site fqcn" sh -c "$CTL show info | grep -qx 'fqcn: site-1' && $CTL show info | grep -qx 'jobs: 0'"

# ---- (a) three jobs at once ------------------------------------------------------------
sim 1 tcp J1 --rounds 2 --model-size 8M --tensors 4; P1=$PORT
sim 2 http J2 --rounds 2 --model-size 8M --tensors 4 --format numpy; P2=$PORT
sim 3 grpc J3 --rounds 2 --model-size 8M --tensors 4; P3=$PORT
# J1's worker: a shell that records its environment and directory, then becomes the worker
a1=$(job "{\"job_id\": \"J1\", \"server_url\": \"tcp://127.0.0.1:$P1\", \"workspace\": \"$W/ws\", \"worker\": {\"argv\": [\"/bin/sh\", \"-c\", \"env > $W/j1.env; pwd > $W/j1.cwd; exec $BUILD/cjrelay-worker\"], \"env\": {\"CJTEST_MARK\": \"j1 env\"}, \"cwd\": \"$W/ws\"}}")
# J2's description, with its credentials, goes in on standard input: on no argv, not even cjrelayctl's
# and its worker is a bare command name found on the PATH its description sets
mkdir -p "$W/bin" && ln -s "$BUILD/cjrelay-worker" "$W/bin/cjtest-j2-worker"
a2=$(printf '{"job_id": "J2", "server_url": "http://127.0.0.1:%s",\n "credentials": {"token": "%s", "token_signature": "%s", "ssid": "%s"},\n "worker": {"argv": ["cjtest-j2-worker"], "env": {"PATH": "%s/bin:/usr/bin:/bin"}}}\n' \
    "$P2" "$TOKEN" "$SIG" "$SSID" "$W" | ctl job start -)
# J3's workers on a loopback port the kernel picks (as a stock trainer needs tcp)
a3=$(job "{\"job_id\": \"J3\", \"server_url\": \"grpc://127.0.0.1:$P3\", \"mode\": \"spool\", \"worker\": {\"listen\": \"tcp://127.0.0.1:0\"}}")
check "(a) job start J1 (tcp): $a1" [ "$a1" = "OK job J1 started" ]
check "(a) job start J2 (http, credentials, its own PATH): $a2" [ "$a2" = "OK job J2 started" ]
check "(a) job start J3 (grpc, spool, workers on tcp port 0): $a3" [ "$a3" = "OK job J3 started" ]
# (b) while they run
r=$(job '{"job_id": "J9"}'); check "(b) the job limit: $r" sh -c "printf '%s' '$r' | grep -q '^ERR 503 .*max_jobs'"
r=$(job "{\"job_id\": \"J1\", \"server_url\": \"tcp://127.0.0.1:$P1\"}"); check "(b) a live job's id: $r" sh -c "printf '%s' '$r' | grep -q '^ERR 409 job J1 is running'"
printf '%s\n' "$TOKEN" "$SIG" "$SSID" > "$W/secrets"   # grep reads them from a file: its own argv stays clean
check "(d) J2's credentials on no process's argv" sh -c "! cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -qF -f $W/secrets"
check "(a) each job has its own directory and worker socket" sh -c "test -S $W/status.jobs/J1/workers.sock && test -S $W/status.jobs/J2/workers.sock && test -d $W/status.jobs/J3"
check "(a) J3's worker port 0 became the kernel's port, logged" grep -Eq 'listening on tcp://127\.0\.0\.1:[1-9][0-9]*$' "$W/relay.log"
ctl show jobs > "$W/jobs.txt"
check "(a) show jobs lists the three" sh -c "grep -c '^J[123] ' $W/jobs.txt | grep -qx 3"
cfg_of() { # cfg_of KEY [job ID]: one key's value in show config
    _k=$1; shift
    ctl show config "$@" json | jq -r ".config[] | select(.key == \"$_k\") | .value"
}
check "(a) show config job J3: the keys J3 runs with (mode $(cfg_of relay.mode job J3), url $(cfg_of upstream.url job J3))" \
    sh -c "[ \"\$($CTL show config job J3 json | jq -r '.config[] | select(.key == \"relay.mode\") | .value')\" = spool ] && $CTL show config job J3 json | jq -r '.config[] | select(.key == \"upstream.url\") | .value' | grep -q '^grpc://127.0.0.1:$P3\$'"
check "(a) show config with no job: the daemon's file (mode $(cfg_of relay.mode))" \
    sh -c "[ \"\$($CTL show config json | jq -r '.config[] | select(.key == \"relay.mode\") | .value')\" = pass_through ]"
for i in 1 2 3; do wait_for 60 sh -c "grep -q '^SIM OK\|^SIM FAIL' $W/$i.sim"; done
for i in 1 2 3; do
    eval "p=\$PID_$i"; wait "$p"; rc=$?
    check "(a) simulator $i verified its job (rc $rc): $(tail -1 $W/$i.sim)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=2' $W/$i.sim"
done
SIMS=
for j in J1 J2 J3; do
    out=$(timeout 30 $C -s "$W/status.sock" job wait $j | tr '\n' ' ')
    check "(a) job wait $j: outcome 0 ($out)" sh -c "printf '%s' '$out' | grep -q '^job_id: $j outcome: 0 reason: '"
done
check "(a) J1's worker: the description's env and cwd" sh -c "grep -qx 'CJTEST_MARK=j1 env' $W/j1.env && [ \"\$(cat $W/j1.cwd)\" = $W/ws ]"
check "(a) J1's worker: a clean environment (PATH, its own, the bootstrap path)" sh -c "! grep -q CJTEST_DAEMON_ONLY $W/j1.env && grep -q '^PATH=' $W/j1.env && grep -q '^NVFLARE_CLIENT_API_BOOTSTRAP=$W/status.jobs/J1/' $W/j1.env"
check "(a) show stats job J1: its own counters" sh -c "$CTL show stats job J1 | grep -qx 'tasks_in: 2' && $CTL show stats job J1 | grep -qx 'scope: J1'"
check "(a) show stats: totals labelled" sh -c "$CTL show stats | head -1 | grep -qx 'scope: all jobs (3)' && $CTL show stats | grep -qx 'tasks_in: 6'"
ctl show prometheus > "$W/prom.txt"
check "(a) show prometheus: each job's tasks_in, labelled" sh -c "[ \$(grep -Ec '^cjrelay_tasks_in_total[{]job_id=\"J[123]\"[}] 2\$' $W/prom.txt) -eq 3 ]"
if command -v promtool >/dev/null; then
    check "(a) show prometheus: promtool check metrics accepts it ($(promtool check metrics < "$W/prom.txt" 2>&1 | head -2 | tr '\n' ' '))" sh -c "promtool check metrics < $W/prom.txt"
else
    skip "(a) promtool check metrics: promtool not installed (make deps installs Debian's prometheus)"
fi
check "(a) show stats job J3: the spool section" sh -c "$CTL show stats job J3 | grep -q '^spool_results_spooled: 2'"
check "(a) show tasks without a job: name one" sh -c "$CTL show tasks | grep -q '^ERR 400 3 jobs: name one'"
check "(a) show tasks job NOPE: 404" sh -c "$CTL show tasks job NOPE | grep -q '^ERR 404'"
wait_for 5 sh -c "[ -z \"\$(ls $W/status.jobs)\" ]"
check "(a) ended jobs' directories removed" sh -c "[ -z \"\$(ls $W/status.jobs)\" ]"
check "(a) _process_rc.txt is 0 for J1" sh -c "[ \"\$(cat $W/ws/J1/_process_rc.txt)\" = 0 ]"

# ---- (b) mistakes ------------------------------------------------------------------------
bad() { # bad NAME JSON REGEX
    r=$(job "$2")
    if printf '%s' "$r" | grep -Eq "$3"; then pass "(b) $1: $r"; else fail "(b) $1: $r"; fi
}
bad "unknown key" '{"job_id": "B1", "colour": "red"}' '^ERR 400 colour: unknown'
bad "missing job_id" '{"mode": "spool"}' '^ERR 400 job_id: '
bad "bad job_id" '{"job_id": "a.b"}' '^ERR 400 job_id: '
bad "wrong type" '{"job_id": "B1", "worker": {"argv": "python"}}' '^ERR 400 worker.argv: '
bad "bad scheme" '{"job_id": "B1", "server_url": "ftp://h:1"}' '^ERR 400 server_url: '
bad "scheme vs security" '{"job_id": "B1", "server_url": "grpcs://h:1"}' '^ERR 400 server_url: .*connection_security'
bad "not JSON" 'job_id=B1' '^ERR 400 description: '
bad "trailing bytes" '{"job_id": "B1"} x' '^ERR 400 description: '
bad "another site" '{"job_id": "B1", "site": "site-2"}' '^ERR 400 site: '
bad "a TLS file missing" '{"job_id": "B1", "server_url": "stcp://h:1", "connection_security": "mtls", "ca_file": "/nonexistent/ca.pem", "cert_file": "/nonexistent/c.crt", "key_file": "/nonexistent/c.key"}' '^ERR 400 ca_file: cannot read /nonexistent/ca.pem: No such file'
bad "an unknown user" '{"job_id": "B1", "worker": {"user": "cjtest-no-such-user"}}' "^ERR 400 worker.user: no user 'cjtest-no-such-user'"
bad "an unknown group" '{"job_id": "B1", "worker": {"group": "cjtest-no-such-group"}}' "^ERR 400 worker.group: no group 'cjtest-no-such-group'"
check "(b) nothing started by a refused description" sh -c "! $CTL show jobs | grep -q '^B1 '"
check "(b) a read-only client cannot start or stop a job" sh -c "setpriv --reuid=65534 --regid=65534 --clear-groups $CTL job start '{\"job_id\": \"R1\"}' | grep -q '^ERR 403' && setpriv --reuid=65534 --regid=65534 --clear-groups $CTL job stop J1 | grep -q '^ERR 403'"
check "(b) a read-only client may wait for a job" sh -c "setpriv --reuid=65534 --regid=65534 --clear-groups $CTL job wait J1 | grep -qx 'outcome: 0'"

# ---- (c) job stop mid-download -----------------------------------------------------------------
sim 4 tcp J4 --rounds 50 --model-size 128M --tensors 4; P4=$PORT
r=$(job "{\"job_id\": \"J4\", \"server_url\": \"tcp://127.0.0.1:$P4\", \"workspace\": \"$W/ws\"}")
check "(c) job start J4: $r" [ "$r" = "OK job J4 started" ]
wait_for 30 grep -q '^ROUND 1 .*verified' "$W/4.sim"
check "(c) J4 is running once its server link came up" sh -c "$CTL show jobs | grep -q '^J4  *running '"
wait_for 30 grep -q '^TASK 2 ' "$W/4.sim"   # round 2's 128 MiB is on its way to the worker
r=$(ctl job stop J4 operator asked)
check "(c) job stop J4: $r" [ "$r" = "OK" ]
out=$(timeout 30 $C -s "$W/status.sock" job wait J4 | tr '\n' ' ')
check "(c) job wait J4: outcome 9 with the reason ($out)" sh -c "printf '%s' '$out' | grep -q 'outcome: 9' && printf '%s' '$out' | grep -q 'operator asked'"
check "(c) _process_rc.txt is 9 for J4" sh -c "[ \"\$(cat $W/ws/J4/_process_rc.txt)\" = 9 ]"
r=$($CTL job stop J4); check "(c) stopping an ended job: $r" sh -c "printf '%s' '$r' | grep -q '^ERR 409'"
note "$W/4.sim" | grep -E '^# (TASK|ROUND|DOWNLOAD|SIM)' | tail -4
# A second job stop while the job drains stops it at once (FLARE's parent: abort, then terminate).
sim 10 tcp J10 --rounds 50 --model-size 128M --tensors 4; P10=$PORT
r=$(job "{\"job_id\": \"J10\", \"server_url\": \"tcp://127.0.0.1:$P10\"}")
wait_for 30 grep -q '^TASK 1 ' "$W/10.sim"
wpid=$($CTL show workers job J10 json | jq -r '[.workers[] | select(.pid > 0)][0].pid // empty')
[ -n "$wpid" ] && kill -STOP "$wpid"   # holds its task: the drain would wait for it
ctl job stop J10 abort > /dev/null
check "(c) J10 drains after the first job stop: $($CTL show jobs | awk '$1 == "J10" {print $2}')" sh -c "$CTL show jobs | grep -q '^J10  *stopping '"
r=$(ctl job stop J10 terminate)
out=$(timeout 10 $C -s "$W/status.sock" job wait J10 | tr '\n' ' ')
check "(c) a second job stop ends it at once: $r, $out" sh -c "printf '%s' '$out' | grep -q 'outcome: 9'"
check "(c) ... logged: $(grep -m1 'again while it drains' "$W/relay.log" | cut -c1-150)" grep -q "job J10: job stop: terminate again while it drains: stopping now" "$W/relay.log"
wait_for 10 sh -c "! kill -0 $wpid 2>/dev/null"
check "(c) ... its stopped worker (pid $wpid) is gone" sh -c "! kill -0 $wpid 2>/dev/null"
kill -TERM $SIMS 2>/dev/null; SIMS=

# ---- (d) credentials ----------------------------------------------------------------------
for w in info stats jobs config; do ctl show $w; ctl show $w json; done > "$W/shows.txt" 2>&1
check "(d) credentials in no log line" sh -c "! grep -qF -e $TOKEN -e $SIG -e $SSID $W/relay.log"
check "(d) credentials in no show output" sh -c "! grep -qF -e $TOKEN -e $SIG -e $SSID $W/shows.txt"
check "(d) the log says where J2's credentials came from" grep -q "from the job description" "$W/relay.log"

# ---- (f) a server that never answers ----------------------------------------------------------
sed -i 's/^\[upstream\]$/[upstream]\nfirst_connect_timeout = 1/' "$W/site.ini"
grep -q '^first_connect_timeout' "$W/site.ini" || printf '[upstream]\nfirst_connect_timeout = 1\n' >> "$W/site.ini"
check "(f) reload with first_connect_timeout = 1" sh -c "$CTL reload | grep -qx OK"
sim 6 tcp J16 --rounds 3 --model-size 8M --tensors 4; P6=$PORT
r=$(job "{\"job_id\": \"J16\", \"server_url\": \"tcp://127.0.0.1:$P6\"}")
check "(f) job start J16 beside it (its server answers): $r" [ "$r" = "OK job J16 started" ]
r=$(job '{"job_id": "J6", "server_url": "tcp://127.0.0.1:1"}')
check "(f) job start J6 (nothing listens): $r" [ "$r" = "OK job J6 started" ]
wait_for 5 sh -c "$CTL show info job J6 | grep -q '^upstream_last_error: unreachable: '"
$CTL show info job J6 > "$W/j6.info"   # one answer for both checks: the job ends after 1 s
check "(f) show info job J6: the last error, its time and the next attempt ($(grep '^upstream_' "$W/j6.info" | tr '\n' ' '))" sh -c "grep -q '^upstream_last_error: unreachable: connect to tcp://127.0.0.1:1 failed: Connection refused' $W/j6.info && grep -Eq '^upstream_last_error_at: 20[0-9-]+T[0-9:]+Z' $W/j6.info"
out=$(timeout 30 $C -s "$W/status.sock" job wait J6 | tr '\n' ' ')
check "(f) job wait J6: outcome 104, the server named ($out)" sh -c "printf '%s' '$out' | grep -q 'outcome: 104 reason: the server tcp://127.0.0.1:1 was not reachable within 1 s'"
out=$(timeout 60 $C -s "$W/status.sock" job wait J16 | tr '\n' ' ')
wait_for 10 grep -q '^SIM OK\|^SIM FAIL' "$W/6.sim"
check "(f) J16 verified its rounds meanwhile ($(tail -1 "$W/6.sim"); $out)" sh -c "grep -q '^SIM OK rounds=3' $W/6.sim && printf '%s' '$out' | grep -q 'outcome: 0'"

# ---- (h) the client parent ---------------------------------------------------------------------
$S --listen tcp://127.0.0.1:0 --parent tcp://127.0.0.1:0 --site site-1 --job-id JP --rounds 5 --model-size 4M \
    --tensors 2 --abort-job JP@2 --job-status-log "$W/h.status" > "$W/h.sim" 2> "$W/h.simlog" & SIMS="$SIMS $!"; HP=$!
PORT=$(sim_port "$W/h.sim"); wait_for 10 grep -q '^SIM PARENT' "$W/h.sim"
PP=$(awk '/^SIM PARENT/ {print $3}' "$W/h.sim")
r=$(job "{\"job_id\": \"JP\", \"server_url\": \"tcp://127.0.0.1:$PORT\", \"parent_url\": \"tcp://127.0.0.1:$PP\"}")
check "(h) job start JP with a parent: $r" [ "$r" = "OK job JP started" ]
out=$(timeout 60 $C -s "$W/status.sock" job wait JP | tr '\n' ' ')
check "(h) client_command abort ends JP as aborted ($out)" sh -c "printf '%s' '$out' | grep -q 'outcome: 9 reason: aborted by the client parent'"
wait_for 15 sh -c "! kill -0 $HP"
note "$W/h.sim" | grep -E "JOB_STATUS|SHOW_STATS|ABORT|SIM (OK|FAIL)"
check "(h) the parent recorded STARTED" grep -q '^SIM JOB_STATUS JP 2 from=site-1.JP' "$W/h.sim"
check "(h) the parent recorded STOPPED" grep -q '^SIM JOB_STATUS JP 3 from=site-1.JP' "$W/h.sim"
check "(h) show_stats answered with the job's counters" grep -q '^SIM SHOW_STATS JP rc=ok .*tasks_in' "$W/h.sim"
check "(h) the parent saw the job end as aborted, STOPPED after the abort" grep -q '^SIM OK aborted round=2: STOPPED from site-1.JP' "$W/h.sim"

# ---- (i) a worker under another account (needs root: the daemon switches its child's ids) ----
if [ "$(id -u)" -ne 0 ]; then
    skip "(i) a worker under another account: the suite does not run as root"
elif ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$BUILD/cjrelay-worker"; then
    skip "(i) a worker under another account: uid 65534 cannot reach $BUILD/cjrelay-worker"
else
    sim 7 tcp J7 --rounds 1 --model-size 4M --tensors 2; P7=$PORT
    mkdir -p "$W/acc" && chmod 1777 "$W/acc"
    r=$(job "{\"job_id\": \"J7\", \"server_url\": \"tcp://127.0.0.1:$P7\", \"worker\": {\"argv\": [\"/bin/sh\", \"-c\", \"id -u > $W/acc/uid; id -g > $W/acc/gid; pwd > $W/acc/cwd; exec $BUILD/cjrelay-worker\"], \"user\": \"65534\", \"group\": \"65534\", \"cwd\": \"$W/acc\"}}")
    check "(i) job start J7 as uid 65534: $r" [ "$r" = "OK job J7 started" ]
    check "(i) its worker socket belongs to the account" sh -c "[ \"\$(stat -c %u:%g $W/status.jobs/J7/workers.sock)\" = 65534:65534 ]"
    wait_for 60 sh -c "grep -q '^SIM OK\|^SIM FAIL' $W/7.sim"
    check "(i) the worker ran as uid and gid 65534 in its cwd" sh -c "[ \"\$(cat $W/acc/uid):\$(cat $W/acc/gid)\" = 65534:65534 ] && [ \"\$(cat $W/acc/cwd)\" = $W/acc ]"
    check "(i) J7's round verified through the relay: $(tail -1 "$W/7.sim")" grep -q '^SIM OK rounds=1' "$W/7.sim"
    out=$(timeout 30 $C -s "$W/status.sock" job wait J7 | tr '\n' ' ')
    check "(i) job wait J7: outcome 0 ($out)" sh -c "printf '%s' '$out' | grep -q 'outcome: 0'"
    r=$(job "{\"job_id\": \"J8\", \"server_url\": \"tcp://127.0.0.1:1\", \"worker\": {\"argv\": [\"/bin/true\"], \"user\": \"root\", \"group\": \"root\"}}")
    check "(i) a user and group by name resolve: $r" [ "$r" = "OK job J8 started" ]
    $CTL job stop J8 > /dev/null
fi

# ---- (e) SIGTERM with a job running ---------------------------------------------------------
sim 5 tcp J5 --rounds 50 --model-size 8M --tensors 4; P5=$PORT
r=$(job "{\"job_id\": \"J5\", \"server_url\": \"tcp://127.0.0.1:$P5\"}")
check "(e) job start J5: $r" [ "$r" = "OK job J5 started" ]
wait_for 30 grep -q '^ROUND 1 .*verified' "$W/5.sim"
kill -TERM "$RELAY"
wait_for 30 sh -c "! kill -0 $RELAY"
wait "$RELAY"; rc=$?; RELAY=
check "(e) SIGTERM drains the jobs and exits 0 (rc $rc)" [ "$rc" -eq 0 ]
check "(e) J5 ended as aborted" grep -q "job J5 ended: outcome 9" "$W/relay.log"
check "(e) no job directory left" sh -c "[ ! -e $W/status.jobs ] || [ -z \"\$(ls $W/status.jobs)\" ]"

# ---- (g) many jobs: a daemon whose workers start on their own (nothing launched) --------------
relay_ini "$W/g.ini" relay.job_id= relay.max_jobs=32 relay.job_linger=2 status.socket="$W/g.sock" log.level=warning
$D -c "$W/g.ini" > "$W/g.log" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/g.sock"
G="$C -s $W/g.sock"
short_job() { # short_job ID: start (its server does not listen), stop, wait; prints the outcome
    $G job start "{\"job_id\": \"$1\", \"server_url\": \"tcp://127.0.0.1:1\"}" >/dev/null
    $G job stop "$1" >/dev/null
    $G job wait "$1" | sed -n 's/^outcome: //p'
}
fds() { ls /proc/$RELAY/fd | wc -l; }
for i in $(seq 1 10); do short_job W$i; done > /dev/null
sleep 3   # job_linger = 2: the records go at a sweep (every second) after that
rss0=$(kb "$RELAY" VmRSS); fd0=$(fds)
bad=0
for i in $(seq 1 100); do [ "$(short_job S$i)" = 9 ] || bad=$((bad + 1)); done
sleep 3
rss1=$(kb "$RELAY" VmRSS); fd1=$(fds)
check "(g) ended records dropped after job_linger" sh -c "[ \$($G show jobs | wc -l) -eq 1 ]"
check "(g) 100 short jobs in sequence, each ended aborted (9): $bad not" [ "$bad" -eq 0 ]
check "(g) open fds flat over 100 jobs: $fd0 -> $fd1" [ "$fd1" -le "$fd0" ]
check_mem "(g) RSS flat over 100 jobs: $rss0 -> $rss1 KiB (< 1 MiB growth)" [ $((rss1 - rss0)) -lt 1024 ]
for i in $(seq 1 20); do $G job start "{\"job_id\": \"I$i\", \"server_url\": \"tcp://127.0.0.1:1\"}" > /dev/null; done
sleep 0.5
rss2=$(kb "$RELAY" VmRSS); fd2=$(fds)
per_kb=$(((rss2 - rss1) / 20)); per_fd=$(((fd2 - fd1 + 19) / 20))
check "(g) 20 idle jobs running" sh -c "$G show jobs | grep -c ' starting ' | grep -qx 20"
check_mem "(g) idle cost per job: $per_kb KiB RSS (<= 512)" [ "$per_kb" -le 512 ]
check "(g) idle cost per job: $per_fd fds (<= 8)" [ "$per_fd" -le 8 ]
kill -TERM "$RELAY"; wait_for 20 sh -c "! kill -0 $RELAY"; wait "$RELAY"; rc=$?; RELAY=
check "(g) SIGTERM with 20 jobs: exit 0 (rc $rc)" [ "$rc" -eq 0 ]
finish
