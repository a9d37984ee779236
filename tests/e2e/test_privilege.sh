#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Least privilege: the site daemon runs as a service account (uid 4242 here, as the
# packaged units run it as cjrelay) holding only CAP_SETUID, CAP_SETGID and CAP_CHOWN,
# given the way systemd's AmbientCapabilities gives them (setpriv --ambient-caps here,
# systemd/worker-accounts.conf.example in a unit):
# (a) a job whose worker.user is another account (65534): the worker runs as it, owns its
#     socket, its round verifies through the relay, and it holds no capability at all
#     (CapEff, CapPrm, CapInh, CapAmb 0): it cannot take the daemon's back
# (b) a job with no worker.user: its worker runs as the service account, with no capability
# (c) the same daemon without the capabilities: the job is refused, ERR 400 naming them
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { skip "needs root to start the daemon as another uid"; finish; }
command -v setpriv >/dev/null || { skip "setpriv missing"; finish; }
SVC=4242
# A directory the service account owns and the worker account can traverse, holding
# copies of the binaries both run (the build tree may not be reachable by them).
W=$(mktemp -d /tmp/cjrelay-priv.XXXXXX); chmod 755 "$W"; PID=; SIMS=
cleanup() {
    for p in $PID $SIMS; do kill -9 "$p" 2>/dev/null; done
    pkill -KILL -f "$W/" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
for b in cjrelayd cjrelayctl cjrelay-worker; do cp "$BUILD/$b" "$W/$b"; chmod 755 "$W/$b"; done
D=$W/cjrelayd; C=$W/cjrelayctl; S=$BUILD/cjrelay-sim
mkdir -p "$W/run" "$W/acc" && chown "$SVC:$SVC" "$W/run" && chmod 1777 "$W/acc"
# Sanitizer reports are written by every uid of the test.
[ -n "${CJ_SAN_LOG:-}" ] && chmod 1777 "$CJ_SAN_LOG"
CAPS=+setuid,+setgid,+chown
AS_SERVICE="setpriv --reuid=$SVC --regid=$SVC --clear-groups"
AS_SERVICE_CAPS="$AS_SERVICE --inh-caps=$CAPS --ambient-caps=$CAPS --bounding-set=-all,$CAPS"
ctl() { $C -s "$W/run/status.sock" "$@"; }

start() { # start SETPRIV...: the site daemon as the service account
    relay_ini "$W/site.ini" relay.job_id= relay.max_jobs=4 workers.command="$W/cjrelay-worker" \
        workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=1 \
        status.socket="$W/run/status.sock" status.socket_mode=0666 log.level=info
    rm -f "$W/run/status.sock"
    "$@" "$D" -c "$W/site.ini" > "$W/relay.log" 2>&1 & PID=$!
    wait_for 10 test -S "$W/run/status.sock"
}
stop() { kill -TERM "$PID" 2>/dev/null; wait_for 10 sh -c "! kill -0 $PID"; kill -9 "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=; }
sim() { # sim NAME JOB: a one-round simulator; sets PORT
    $S --listen "tcp://127.0.0.1:0" --job-id "$2" --rounds 1 --model-size 4M --tensors 2 > "$W/$1.sim" 2> "$W/$1.simlog" &
    SIMS="$SIMS $!"
    PORT=$(sim_port "$W/$1.sim")
}
# recorder DIR: a worker argv that writes its ids and capability sets into DIR, then becomes the worker
recorder() {
    printf '["/bin/sh", "-c", "mkdir -p %s && id -u > %s/uid && id -g > %s/gid && grep ^Cap %s > %s/caps; exec %s"]' \
        "$1" "$1" "$1" /proc/self/status "$1" "$W/cjrelay-worker"
}
no_caps() { # no_caps FILE: every capability set but the bounding one is empty
    [ "$(grep -c '^Cap\(Inh\|Prm\|Eff\|Amb\):[[:space:]]*0000000000000000$' "$1")" = 4 ]
}

start $AS_SERVICE_CAPS
check "the daemon runs as uid $SVC: $(grep '^Uid' /proc/$PID/status | tr -s '\t ' ' ')" \
    sh -c "grep -q '^Uid:[[:space:]]*$SVC[[:space:]]' /proc/$PID/status"
check "... holding CAP_SETUID, CAP_SETGID and CAP_CHOWN only: $(grep '^CapEff' /proc/$PID/status | tr -s '\t ' ' ')" \
    grep -q '^CapEff:[[:space:]]*00000000000000c1$' "/proc/$PID/status"

# (a) a worker under another account
sim a JA
r=$(ctl job start "{\"job_id\": \"JA\", \"server_url\": \"tcp://127.0.0.1:$PORT\", \"worker\": {\"argv\": $(recorder "$W/acc/a"), \"user\": \"65534\", \"group\": \"65534\"}}")
check "(a) job start JA with worker.user 65534: $r" [ "$r" = "OK job JA started" ]
check "(a) its worker socket is given to that account" \
    sh -c "[ \"\$(stat -c %u:%g $W/run/status.jobs/JA/workers.sock)\" = 65534:65534 ]"
wait_for 60 sh -c "grep -q '^SIM OK\|^SIM FAIL' $W/a.sim"
check "(a) the worker ran as uid and gid 65534" sh -c "[ \"\$(cat $W/acc/a/uid):\$(cat $W/acc/a/gid)\" = 65534:65534 ]"
check "(a) ... with no capability: $(tr -s '\t\n' ' ' < "$W/acc/a/caps" 2>/dev/null)" no_caps "$W/acc/a/caps"
check "(a) JA's round verified through the relay: $(tail -1 "$W/a.sim")" grep -q '^SIM OK rounds=1' "$W/a.sim"

# (b) a worker under the service account itself
sim b JB
r=$(ctl job start "{\"job_id\": \"JB\", \"server_url\": \"tcp://127.0.0.1:$PORT\", \"worker\": {\"argv\": $(recorder "$W/acc/b")}}")
check "(b) job start JB with no worker.user: $r" [ "$r" = "OK job JB started" ]
wait_for 60 sh -c "grep -q '^SIM OK\|^SIM FAIL' $W/b.sim"
check "(b) the worker ran as the service account" sh -c "[ \"\$(cat $W/acc/b/uid)\" = $SVC ]"
check "(b) ... without the daemon's capabilities: $(tr -s '\t\n' ' ' < "$W/acc/b/caps" 2>/dev/null)" no_caps "$W/acc/b/caps"
check "(b) JB's round verified: $(tail -1 "$W/b.sim")" grep -q '^SIM OK rounds=1' "$W/b.sim"
stop

# (c) no capabilities: another account is refused, saying what it takes
start $AS_SERVICE
r=$(ctl job start "{\"job_id\": \"JC\", \"server_url\": \"tcp://127.0.0.1:1\", \"worker\": {\"argv\": [\"/bin/true\"], \"user\": \"65534\"}}")
check "(c) without the capabilities: $r" sh -c "printf '%s' '$r' | grep -q '^ERR 400 worker.user: .*CAP_SETUID, CAP_SETGID and CAP_CHOWN'"
stop
[ "$_f" -gt 0 ] && tail -20 "$W/relay.log" | note
finish
