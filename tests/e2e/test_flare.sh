#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# FLARE's side: the client parent's job launcher (integrations/flare, cjrelay_flare) against the
# real cjrelayd (a site daemon) and cjrelay-sim, with FLARE replaced by the stand-in in
# tests/flare (tests/flare/README.md). tests/flare/drive.py plays the CP's launch steps on a
# client workspace laid out as FLARE's (startup/, local/resources.json, the job's
# app_site-1/config/config_fed_client.json with ClientAPIExecutor external_process):
# (a) a job runs to the simulator's verified end: poll while running, wait, return code 0;
#     the sim, as the client parent, saw STARTED and STOPPED; what the trainer got
#     and over mutual TLS with the startup kit's certificates (scheme tcp, mtls -> stcp://)
# (b) terminate() mid-run: the job ends as aborted (9)
# (c) jobs cjrelay does not serve (an in_process executor; a job_property the meta lacks)
#     go to FLARE's ClientProcessJobLauncher
#     and a job cjrelayd refuses falls back too, as does one whose CP environment is more than
#     cjrelayd's worker.env takes; one whose start answer was lost does not
# (d) cjrelayd down: fallback to the stock launcher, or (on_daemon_error fail) 104
# (e) the credentials and the resolved secret appear in no log, argv or show output
# (f) least privilege: cjrelayd runs as another account (uid 4242, as the packaged unit runs it
#     as cjrelay) that cannot read the startup kit's key (0600, root's here, the FLARE account's
#     on a site); the launcher passes the kit's files as open files and the job runs over mTLS
# (g) the launcher configured with integrations/flare/README.md's resources.json snippet as it
#     stands: a trainer that starts as a stock FLARE trainer does (tests/flare/stock_trainer.py)
#     reaches its job and the job runs to the simulator's verified end; its environment is the
#     CP's (MALLOC_ARENA_MAX, PATH, ...) without the job's credentials
# (h) a stock trainer given a URL it cannot use dies at once: relaunched a few times, then, at
#     the executor's launch_timeout (3 s), the job ends with 101 and the trainer's error in the
#     reason (job wait, show jobs, the CP's log, the daemon's log); no launch after that
# (i) python3 -m cjrelay_flare.configure (the README's "At a FLARE site") on a workspace as FLARE
#     provisions it: the README's job_launcher entry in place of process_launcher, the rest kept;
#     again: unchanged; --undo: the stock launcher back; a site it cannot change: refused
# (j) FLARE's releases, the real code ($FLARE_DIR/2.8.1 and 2.7.2, FLARE_DIR default
#     ../shared/flare; each skipped when absent): the installed package imports and registers on that
#     version's CP set-up (FLARE's FLClientStarterConfiger and get_job_launcher), recognises a job
#     exported at test time with that version's FedJob + ScriptRunner, and builds the pipe dialect's
#     description (argv, cwd, env, credentials from JOB_PROCESS_ARGS, flare_version, TASK_EXCHANGE
#     and METRICS_EXCHANGE as that version's executor writes them); each job it cannot serve goes to
#     FLARE's ClientProcessJobLauncher with the reason logged (tests/flare/releases.py; cjrelayd is
#     not asked)
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
PY=/usr/bin/python3
W=$(mktemp -d); SIMS=; RELAY=
cleanup() {
    for p in $RELAY $SIMS; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $RELAY $SIMS; do kill -KILL "$p" 2>/dev/null; done
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
if [ ! -x "$PY" ]; then skip "all: $PY missing (tests/deps.sh installs python3)"; finish; fi
export PYTHONDONTWRITEBYTECODE=1
# the package as a site installs it: pip install of a copy (the tree stays clean), else the source
cp -r "$ROOT/integrations/flare" "$W/pkg"
if $PY -m pip install -q --no-deps --no-build-isolation --no-index --target "$W/site" "$W/pkg" > "$W/pip.log" 2>&1; then
    pass "pip install ./integrations/flare"
    PKG=$W/site
else
    skip "pip install ./integrations/flare: pip or setuptools missing; the tests use the source ($(tail -1 "$W/pip.log"))"
    PKG=$ROOT/integrations/flare
fi
export PYTHONPATH="$ROOT/tests/flare:$PKG"
check "the installed package imports with the FLARE stand-in" $PY -c "import cjrelay_flare; assert cjrelay_flare.__file__.startswith('$PKG')"
CTL="$C -s $W/status.sock"
# drive SCENARIO ARGS...: runs tests/flare/drive.py, counts its ok / not ok lines here
drive() {
    sc=$1; shift
    $PY "$ROOT/tests/flare/drive.py" --scenario "$sc" --socket "$W/status.sock" --worker "$BUILD/cjrelay-worker" \
        "$@" > "$W/$sc.tap" 2> "$W/$sc.log"
    tap_results "$sc" $? "$W/$sc.tap" "$W/$sc.log" drive.py
}

relay_ini "$W/site.ini" relay.job_id= relay.max_jobs=4 relay.job_linger=60 workers.count=1 \
    workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=2 \
    status.socket="$W/status.sock" log.level=info
CJTEST_DAEMON_ONLY=1 $D -c "$W/site.ini" > "$W/relay.log" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/status.sock"
check "the site daemon runs with no job" sh -c "$CTL show jobs | wc -l | grep -qx 1"

# ---- (a) a job to its verified end, the simulator as server and client parent ---------------
mkdir -p "$W/a"
$S --listen tcp://127.0.0.1:0 --parent tcp://127.0.0.1:0 --site site-1 --job-id FJ1 --rounds 3 --model-size 4M \
    --tensors 2 > "$W/a.sim" 2> "$W/a.simlog" & SIMS="$SIMS $!"; PA=$!
P=$(sim_port "$W/a.sim"); wait_for 10 grep -q '^SIM PARENT' "$W/a.sim"
PP=$(awk '/^SIM PARENT/ {print $3}' "$W/a.sim")
drive success --ws "$W/a" --target "127.0.0.1:$P" --parent "tcp://localhost:$PP"
wait_for 15 sh -c "! kill -0 $PA"
note "$W/a.sim" | grep -E "ROUND|JOB_STATUS|SIM (OK|FAIL)"
check "(a) the simulator verified the job's every round" grep -q '^SIM OK rounds=3' "$W/a.sim"
check "(a) the daemon took the credentials from the job description" grep -q 'from the job description' "$W/relay.log"
check "(a) the client parent saw STARTED and STOPPED from site-1.FJ1" sh -c \
    "grep -q '^SIM JOB_STATUS FJ1 2 from=site-1.FJ1' $W/a.sim && grep -q '^SIM JOB_STATUS FJ1 3 from=site-1.FJ1' $W/a.sim"

# ---- (a) mutual TLS with the startup kit's files ----------------------------------------------
if command -v openssl >/dev/null && sh "$ROOT/tests/unit/tls_certs.sh" "$W/t/startup"; then
    $S --listen stcp://127.0.0.1:0 --tls-dir "$W/t/startup" --job-id FJ8 --rounds 2 --model-size 4M --tensors 2 \
        > "$W/t.sim" 2> "$W/t.simlog" & SIMS="$SIMS $!"; PT=$!
    P=$(sim_port "$W/t.sim")
    drive tls --ws "$W/t" --target "127.0.0.1:$P" --conn-sec mtls
    wait_for 15 sh -c "! kill -0 $PT"
    check "(a) the stcp simulator verified the TLS job" grep -q '^SIM OK rounds=2' "$W/t.sim"
else
    skip "(a) mutual TLS: openssl missing or the certificates could not be made"
fi

# ---- (f) least privilege: the daemon cannot read the kit's key ----------------------------------
L=$W/lp
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    skip "(f) least privilege: needs root and setpriv to run the daemon as another uid"
elif ! sh "$ROOT/tests/unit/tls_certs.sh" "$L/ws/startup"; then
    skip "(f) least privilege: the certificates could not be made"
else
    # the kit as provisioned (the key owner-only, root's); the rest of the workspace the daemon's
    mkdir -p "$L/bin" "$L/run"; chmod 711 "$W"; chmod 755 "$L" "$L/bin" "$L/ws/startup"
    chmod 644 "$L/ws/startup"/*.pem "$L/ws/startup"/*.crt; chmod 600 "$L/ws/startup"/*.key
    chown 4242:4242 "$L/run" "$L/ws"
    cp "$D" "$BUILD/cjrelay-worker" "$L/bin/"; chmod 755 "$L/bin"/*
    [ -n "${CJ_SAN_LOG:-}" ] && chmod 1777 "$CJ_SAN_LOG"
    relay_ini "$L/site.ini" relay.job_id= relay.job_linger=60 workers.count=1 workers.heartbeat_interval=1 \
        workers.heartbeat_timeout=5 workers.shutdown_grace=2 status.socket="$L/run/status.sock" log.level=info
    setpriv --reuid=4242 --regid=4242 --clear-groups "$L/bin/cjrelayd" -c "$L/site.ini" > "$L/relay.log" 2>&1 &
    SIMS="$SIMS $!"; LPD=$!
    wait_for 10 test -S "$L/run/status.sock"
    check "(f) the daemon runs as uid 4242, which cannot read the kit's key" sh -c \
        "grep -q '^Uid:[[:space:]]*4242[[:space:]]' /proc/$LPD/status && ! setpriv --reuid=4242 --regid=4242 --clear-groups cat $L/ws/startup/client.key 2>/dev/null"
    $S --listen stcp://127.0.0.1:0 --tls-dir "$L/ws/startup" --job-id FJ8 --rounds 2 --model-size 4M --tensors 2 \
        > "$L/sim" 2> "$L/simlog" & SIMS="$SIMS $!"; PT=$!
    P=$(sim_port "$L/sim")
    $PY "$ROOT/tests/flare/drive.py" --scenario tls --socket "$L/run/status.sock" --worker "$L/bin/cjrelay-worker" \
        --ws "$L/ws" --target "127.0.0.1:$P" --conn-sec mtls > "$L/tap" 2> "$L/log"
    tap_results "least privilege" $? "$L/tap" "$L/log" drive.py
    wait_for 15 sh -c "! kill -0 $PT"
    check "(f) the stcp simulator verified the job of the daemon that cannot read the key" grep -q '^SIM OK rounds=2' "$L/sim"
    kill -TERM "$LPD"; wait_for 20 sh -c "! kill -0 $LPD"
fi

# ---- (b) terminate() mid-run ---------------------------------------------------------------
mkdir -p "$W/b"
$S --listen tcp://127.0.0.1:0 --job-id FJ2 --rounds 50 --model-size 4M --tensors 2 > "$W/b.sim" 2> "$W/b.simlog" &
SIMS="$SIMS $!"
P=$(sim_port "$W/b.sim")
drive abort --ws "$W/b" --target "127.0.0.1:$P" --sim-out "$W/b.sim"
check "(b) the daemon logged the stop's reason" grep -q 'terminated by the client parent' "$W/relay.log"

# ---- (g) the documented snippet, a stock trainer -------------------------------------------
mkdir -p "$W/f"
$S --listen tcp://127.0.0.1:0 --job-id FJD --rounds 2 --model-size 4M --tensors 2 > "$W/f.sim" 2> "$W/f.simlog" &
SIMS="$SIMS $!"; PF=$!
P=$(sim_port "$W/f.sim")
drive documented --ws "$W/f" --target "127.0.0.1:$P" --readme "$ROOT/integrations/flare/README.md"
wait_for 15 sh -c "! kill -0 $PF"
check "(g) the simulator verified the stock trainer's job" grep -q '^SIM OK rounds=2' "$W/f.sim"
check "(g) the trainer's link came over the job's Unix socket" grep -q "link worker site-1.FJD.[^ ]* (unix peer pid" "$W/relay.log"

# ---- (h) a trainer that cannot start ----------------------------------------------------------
mkdir -p "$W/g"
$S --listen tcp://127.0.0.1:0 --job-id FJN --rounds 2 --model-size 1M --tensors 1 > "$W/g.sim" 2> "$W/g.simlog" &
SIMS="$SIMS $!"; PG=$!
P=$(sim_port "$W/g.sim")
drive nostart --ws "$W/g" --target "127.0.0.1:$P"
launches() { grep -c "worker site-1.FJN.client_api_trainer_[0-9]* launched" "$W/relay.log"; }
n=$(launches)
check "(h) the trainer was launched $n times in the 3 s, and not again after the end" \
    sh -c "[ $n -ge 2 ] && [ $n -le 6 ] && sleep 2.5 && [ \$(grep -c 'worker site-1.FJN.client_api_trainer_[0-9]* launched' $W/relay.log) -eq $n ]"
check "(h) the daemon logged the end: $(grep -m1 'job FJN ended' "$W/relay.log" | cut -c1-200)" \
    grep -q "job FJN ended: outcome 101 (no worker completed its HELLO within launch_timeout 3 s" "$W/relay.log"
kill -TERM "$PG" 2>/dev/null

# ---- (i) the configure command ----------------------------------------------------------------
drive configure --ws "$W/k" --target 127.0.0.1:1 --readme "$ROOT/integrations/flare/README.md"

# ---- (j) FLARE's releases: the real 2.8.1 and 2.7.2 trees --------------------------------------
for v in 2.8.1 2.7.2; do
    FLV=${FLARE_DIR:-$ROOT/../shared/flare}/$v
    if [ ! -d "$FLV/nvflare" ]; then skip "(j) FLARE $v: no FLARE tree ($FLV)"; continue; fi
    if ! $PY -c 'import msgpack, numpy, yaml' 2>/dev/null; then
        skip "(j) FLARE $v: Debian's python3 packages for FLARE are missing (tests/deps.sh installs them)"; continue
    fi
    mkdir -p "$W/j$v"
    PYTHONPATH="$ROOT/tests/site/shim:$(cd "$FLV" && pwd):$PKG" $PY "$ROOT/tests/flare/releases.py" \
        --tree "$FLV" --work "$W/j$v" --label "$v" > "$W/j$v.tap" 2> "$W/j$v.log"
    tap_results "releases $v" $? "$W/j$v.tap" "$W/j$v.log" releases.py
done

# ---- (c) jobs cjrelay does not serve -------------------------------------------------------
mkdir -p "$W/c" "$W/c2"
drive stock --ws "$W/c" --target 127.0.0.1:1
drive narrowed --ws "$W/c2" --target 127.0.0.1:1
check "(c) neither reached cjrelayd" sh -c "! $CTL show jobs | grep -q '^FJ[34] '"
mkdir -p "$W/c3"
drive refused --ws "$W/c3" --target 127.0.0.1:1
mkdir -p "$W/c4"
drive lost --ws "$W/c4" --target 127.0.0.1:1
mkdir -p "$W/c5"
drive bigenv --ws "$W/c5" --target 127.0.0.1:1

# ---- (e) secrets ------------------------------------------------------------------------------
for w in info jobs config; do $CTL show $w; $CTL show $w json; done > "$W/shows.txt" 2>&1
for f in relay.log shows.txt; do
    check "(e) no credential or secret in $f" sh -c "! grep -qF -e cjtest-flaretoken -e cjtest-flaresig -e cjtest-flaressid -e cjtest-secret $W/$f"
done

# ---- (d) cjrelayd down ---------------------------------------------------------------------------
kill -TERM "$RELAY"; wait_for 20 sh -c "! kill -0 $RELAY"; wait "$RELAY"; RELAY=
mkdir -p "$W/d" "$W/d2"
drive down --ws "$W/d" --target 127.0.0.1:1
drive downfail --ws "$W/d2" --target 127.0.0.1:1
finish
