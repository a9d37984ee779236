#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A job's FLARE log files: a job started with a workspace leaves log.txt, error_log.txt,
# log.json and log_fl.txt in <workspace>/<job_id>/, in the line formats of FLARE's
# default log configuration, as FLARE's own client job does.
#   cjrelay-sim (server.J1) <- cjrelayd (site-1) <- a shell that prints, then becomes cjrelay-worker
# (a) the files are there; the worker's output lines (stdout and stderr) are records of the
#     logger FLARE's client job gives them; the daemon's lines about the job are records of
#     "cjrelayd"; the daemon's log keeps all of them too
# (b) every log.json line parses as JSON with exactly FLARE's keys, and log.txt lines are
#     FLARE's "asctime - name - levelname - message"; where FLARE's source is at hand
#     ($FLARE_SRC, default ../shared/flare/main), its own formatters make the same lines
# (c) error_log.txt holds ERROR records only; log_fl.txt the trainer's lines (FLFilter)
# (d) a workspace that cannot be written: one warning, the job still succeeds
# (e) a job with no workspace writes no files
# (f) J1's server leaves its first __sync_runner__ unanswered, as FLARE's does while the server job
#     starts: the wait is logged at info, counted in sync_waits, not as a timeout, retry or drop
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
W=$(mktemp -d); SIMS=; RELAY=
cleanup() {
    for p in $RELAY $SIMS; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $RELAY $SIMS; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
CTL="$C -s $W/status.sock"
FLARE_SRC=${FLARE_SRC:-$ROOT/../shared/flare/main}
sim() { # sim JOB [ARGS...]: a simulator for one job; sets PORT
    _j=$1; shift
    $S --listen "tcp://127.0.0.1:0" --job-id "$_j" "$@" --rounds 2 --model-size 1M --tensors 2 > "$W/$_j.sim" 2> "$W/$_j.simlog" &
    SIMS="$SIMS $!"
    PORT=$(sim_port "$W/$_j.sim")
}
relay_ini "$W/site.ini" relay.job_id= relay.max_jobs=3 relay.job_linger=60 workers.command="$BUILD/cjrelay-worker" workers.count=1 \
    workers.shutdown_grace=2 status.socket="$W/status.sock" log.level=info
mkdir -p "$W/ws"
CJTEST_DAEMON_ONLY=1 $D -c "$W/site.ini" > "$W/relay.log" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/status.sock"

# ---- (a) a job with a workspace -------------------------------------------------------------
sim J1 --sync-silent 1; P1=$PORT
printf '%s\n' "printf 'epoch 1: loss 0.25 \"quoted\" caf\\303\\251\\n'" "echo 'to stderr' >&2" echo "exec $BUILD/cjrelay-worker" > "$W/trainer.sh"
a=$($CTL job start "{\"job_id\": \"J1\", \"server_url\": \"tcp://127.0.0.1:$P1\", \"workspace\": \"$W/ws\", \"worker\": {\"argv\": [\"/bin/sh\", \"$W/trainer.sh\"]}}")
check "(a) job start J1: $a" [ "$a" = "OK job J1 started" ]
out=$(timeout 40 $CTL job wait J1 | tr '\n' ' ')
check "(a) J1 ends with outcome 0 ($out)" sh -c "printf '%s' '$out' | grep -q 'outcome: 0'"
J=$W/ws/J1
wait_for 5 grep -q 'ended: outcome' "$J/log.txt"
for f in log.txt error_log.txt log.json log_fl.txt; do check "(a) $f is in the job's folder" test -f "$J/$f"; done
check "(a) log.txt: the worker's stdout line as FLARE's client job logs it" \
    grep -q ' - ExternalProcessBackend - INFO - epoch 1: loss 0.25 "quoted" café$' "$J/log.txt"
check "(a) log.txt: its stderr line too (FLARE merges the two)" grep -q ' - ExternalProcessBackend - INFO - to stderr$' "$J/log.txt"
check "(a) log.txt: no record for the empty line" sh -c "! grep -q ' - ExternalProcessBackend - INFO - \$' $J/log.txt"
check "(a) log.txt: the daemon's start and end of the job" \
    sh -c "grep -q ' - cjrelayd - INFO - job J1 started' $J/log.txt && grep -q ' - cjrelayd - INFO - job J1 ended: outcome 0' $J/log.txt"
check "(a) log.txt: the worker's launch (its fqcn names the job)" grep -q ' - cjrelayd - INFO - worker site-1.J1.* launched' "$J/log.txt"
check "(a) the daemon's log keeps the worker's output" grep -q 'worker .*: epoch 1: loss 0.25' "$W/relay.log"
check "(a) the daemon's log keeps its own job lines" grep -q 'job J1 ended: outcome 0' "$W/relay.log"

# ---- (b) FLARE's formats ----------------------------------------------------------------------
check "(b) log.txt: every line is 'YYYY-MM-DD HH:MM:SS,mmm - name - LEVEL - message'" \
    sh -c "! grep -Ev '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{3} - [A-Za-z_][A-Za-z0-9_]* - (INFO|WARNING|ERROR) - ' $J/log.txt"
check "(b) log.json: every line is JSON with FLARE's keys in its order" python3 - "$J/log.json" <<'EOF'
import json, sys
keys = ["asctime", "name", "fullName", "levelname", "fl_ctx", "message"]
n = 0
for line in open(sys.argv[1], encoding="ascii"):   # json.dumps' ensure_ascii
    d = json.loads(line)
    assert list(d) == keys, d
    n += 1
found = [d for d in map(json.loads, open(sys.argv[1])) if d["message"].startswith("epoch 1")]
assert found and found[0]["message"] == 'epoch 1: loss 0.25 "quoted" caf\u00e9', found
assert found[0]["fullName"] == "nvflare.app_common.executors.client_api.external_process_backend.ExternalProcessBackend"
assert n > 3, n
EOF
if [ -f "$FLARE_SRC/nvflare/fuel/utils/log_utils.py" ]; then
    check "(b) FLARE's own BaseFormatter and JsonFormatter make the same lines" python3 - "$FLARE_SRC" "$J" <<'EOF'
import json, logging, sys, types
src, job = sys.argv[1], sys.argv[2]
# log_utils.py needs only Workspace from nvflare: a stub stands in for the package
ws = types.ModuleType("nvflare.apis.workspace"); ws.Workspace = object
for m in ("nvflare", "nvflare.apis"): sys.modules[m] = types.ModuleType(m)
sys.modules["nvflare.apis.workspace"] = ws
lu = types.ModuleType("log_utils"); lu.__file__ = src + "/nvflare/fuel/utils/log_utils.py"
exec(compile(open(lu.__file__).read(), lu.__file__, "exec"), lu.__dict__)
cfg = lu.default_log_dict["formatters"]
txt = [l.rstrip("\n") for l in open(job + "/log.txt")]
for i, line in enumerate(open(job + "/log.json")):
    d = json.loads(line)
    r = logging.LogRecord(d["fullName"], getattr(logging, d["levelname"]), "x", 1, d["message"], None, None)
    f = lu.JsonFormatter(fmt=cfg["jsonFormatter"]["fmt"])
    f.formatTime = lambda rec, datefmt=None: d["asctime"]
    assert f.format(r) == line.rstrip("\n"), (f.format(r), line)
    b = lu.BaseFormatter(fmt=cfg["baseFormatter"]["fmt"])
    b.formatTime = lambda rec, datefmt=None: d["asctime"]
    assert b.format(r) == txt[i], (b.format(r), txt[i])
EOF
else
    skip "(b) FLARE's own formatters: no FLARE source at $FLARE_SRC"
fi

# ---- (c) the filtered files -------------------------------------------------------------------
check "(c) error_log.txt: ERROR records only" sh -c "! grep -v ' - ERROR - ' $J/error_log.txt"
check "(c) log_fl.txt: the trainer's lines, not the daemon's info lines" \
    sh -c "grep -q 'ExternalProcessBackend - INFO - epoch 1' $J/log_fl.txt && ! grep -q ' - cjrelayd - INFO - ' $J/log_fl.txt"

# ---- (d) a workspace that cannot be written ---------------------------------------------------
sim J2; P2=$PORT
: > "$W/notadir"
a=$($CTL job start "{\"job_id\": \"J2\", \"server_url\": \"tcp://127.0.0.1:$P2\", \"workspace\": \"$W/notadir\"}")
check "(d) job start J2 (workspace is a file): $a" [ "$a" = "OK job J2 started" ]
out=$(timeout 40 $CTL job wait J2 | tr '\n' ' ')
check "(d) J2 still ends with outcome 0 ($out)" sh -c "printf '%s' '$out' | grep -q 'outcome: 0'"
check "(d) one warning names the folder" sh -c "[ \$(grep -c \"job J2: cannot create $W/notadir/J2: .*FLARE's log files\" $W/relay.log) = 1 ]"

# ---- (e) no workspace, no files ---------------------------------------------------------------
sim J3; P3=$PORT
a=$($CTL job start "{\"job_id\": \"J3\", \"server_url\": \"tcp://127.0.0.1:$P3\", \"worker\": {\"cwd\": \"$W\"}}")
out=$(timeout 40 $CTL job wait J3 | tr '\n' ' ')
check "(e) J3 (no workspace) ends with outcome 0 ($out)" sh -c "printf '%s' '$out' | grep -q 'outcome: 0'"
check "(e) ... and leaves no log files" sh -c "[ ! -e $W/J3 ] && [ ! -e $W/ws/J3 ] && [ ! -e $W/log.txt ]"

# ---- (f) the sync wait of J1's start --------------------------------------------------------
stats=$($CTL show stats job J1 | tr '\n' ' ')
stat() { printf '%s' "$stats" | tr ' ' '\n' | awk -v k="$1:" '$0 == k {getline; print; exit}'; }
check "(f) J1 waited for its server job: sync_waits 1 ($(stat sync_waits))" [ "$(stat sync_waits)" = 1 ]
check "(f) ... not counted as timeouts, retries or drops ($(stat timeouts) $(stat retries) $(stat drops))" \
    [ "$(stat timeouts)/$(stat retries)/$(stat drops)" = 0/0/0 ]
check "(f) ... logged at info" grep -q ' info: upstream server.J1: __sync_runner__ not accepted yet: timeout' "$W/relay.log"
check "(f) ... and no warning or error on the way" sh -c "! grep -E ' (warning|error): ' $W/relay.log | grep -v 'J2'"
finish
