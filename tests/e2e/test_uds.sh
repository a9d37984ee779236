#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Stock trainers over a Unix socket: cjrelay_flare's FLARE comm driver for uds://
# (integrations/flare/cjrelay_flare/comm_drivers/uds_driver.py), loaded from
# NVFLARE_COMM_DRIVER_PATH the way FLARE loads one, with FLARE replaced by the stand-in in
# tests/flare (tests/flare/README.md):
# (a) a Python peer finds the driver, connects over uds:// to a cjrelayd worker socket written
#     uds://PATH, and exchanges SFM frames through FLARE's SocketConnection: a trainer cell's
#     captured HELLO gets READY, a PING gets PONG; the relay logs the worker link up
# (b) the uds:// listener checks the peer's uid: another account is refused at accept even
#     where the socket's mode lets it connect (root only)
# (c) the driver's listen() and connect() between two Python peers, and a missing socket
# (d) the job launcher with uds_driver true: the job's own socket goes to cjrelayd as uds://,
#     the trainer (cjrelay-worker) gets the driver's folder on NVFLARE_COMM_DRIVER_PATH and the
#     uds:// connect_url in its bootstrap, and the job runs to the simulator's verified end
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; S=$BUILD/cjrelay-sim
PY=/usr/bin/python3
W=$(mktemp -d /tmp/cjrelay-uds.XXXXXX); chmod 755 "$W"; PIDS=
cleanup() {
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $PIDS; do kill -KILL "$p" 2>/dev/null; done
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
if [ ! -x "$PY" ]; then skip "all: $PY missing (tests/deps.sh installs python3)"; finish; fi
export PYTHONDONTWRITEBYTECODE=1
# copies another uid can read: the stand-in, the package, the captured HELLO
cp -r "$ROOT/tests/flare" "$W/flare"; cp -r "$ROOT/integrations/flare" "$W/pkg"
cp "$ROOT/tests/vectors/frames/cap17_hello_trainer.bin" "$W/hello.bin"
chmod -R a+rX "$W/flare" "$W/pkg" "$W/hello.bin"
export PYTHONPATH="$W/flare:$W/pkg"
export NVFLARE_COMM_DRIVER_PATH="$W/pkg/cjrelay_flare/comm_drivers"
# peer NAME ARGS...: runs tests/flare/uds_peer.py, counts its ok / not ok lines here
peer() {
    pn=$1; shift
    $PY "$W/flare/uds_peer.py" "$@" > "$W/$pn.tap" 2> "$W/$pn.log"
    tap_results "$pn" $? "$W/$pn.tap" "$W/$pn.log" uds_peer.py
}

# ---- (a) a trainer's HELLO over uds:// ------------------------------------------------------
# the single-job shorthand as site-1.J1, the cell the captured trainer HELLO names as its parent
SOCK="$W/a/workers.sock"; mkdir -p "$W/a"; chmod 755 "$W/a"
relay_ini "$W/a.ini" workers.listen="uds://$SOCK" workers.socket_mode=0666 status.socket="$W/a.sock" \
    upstream.url=tcp://127.0.0.1:1 log.level=info
$D -c "$W/a.ini" > "$W/a.log" 2>&1 & PIDS="$PIDS $!"; PA=$!
wait_for 10 test -S "$SOCK"
check "(a) the uds:// listener is the Unix socket $SOCK" grep -q "listening on uds://${SOCK#/}" "$W/a.log"
peer a relay "uds://${SOCK#/}" "$W/hello.bin"
check "(a) the relay took the peer as the worker site-1.J1.trainer_1" \
    grep -q "link worker site-1.J1.trainer_1 (unix peer pid [0-9]* uid $(id -u)): handshake -> up" "$W/a.log"

# ---- (b) peer credentials ---------------------------------------------------------------------
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    skip "(b) another uid refused: needs root and setpriv"
else
    setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/ $PY "$W/flare/uds_peer.py" refused \
        "uds://${SOCK#/}" "$W/hello.bin" > "$W/b.tap" 2> "$W/b.log"
    check "(b) uid 65534 reached the socket (mode 0666) and was closed unanswered" grep -q "^ok - the relay closed" "$W/b.tap"
    check "(b) the relay logged the refusal with the peer's uid" \
        grep -q "refused unix peer pid [0-9]* uid 65534: not the daemon's, root's or the workers' account" "$W/a.log"
    check "(b) no worker link for it" sh -c "! grep -q 'link worker.*uid 65534' $W/a.log"
fi
kill -TERM "$PA"; wait_for 10 sh -c "! kill -0 $PA"

# ---- (c) listen() and connect() between two Python peers -----------------------------------------
mkdir -p "$W/c"
peer c loop "$W/c"

# ---- (d) the job launcher with uds_driver --------------------------------------------------------
relay_ini "$W/d.ini" relay.job_id= relay.max_jobs=2 relay.job_linger=60 workers.count=1 \
    workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=2 \
    status.socket="$W/status.sock" log.level=info
CJTEST_DAEMON_ONLY=1 $D -c "$W/d.ini" > "$W/d.log" 2>&1 & PIDS="$PIDS $!"
wait_for 10 test -S "$W/status.sock"
mkdir -p "$W/d"
$S --listen tcp://127.0.0.1:0 --job-id FJU --rounds 2 --model-size 4M --tensors 2 > "$W/d.sim" 2> "$W/d.simlog" &
PIDS="$PIDS $!"; PS=$!
P=$(sim_port "$W/d.sim")
$PY "$W/flare/drive.py" --scenario uds --socket "$W/status.sock" --worker "$BUILD/cjrelay-worker" \
    --ws "$W/d" --target "127.0.0.1:$P" > "$W/d.tap" 2> "$W/d.drive.log"
tap_results d $? "$W/d.tap" "$W/d.drive.log" drive.py
wait_for 15 sh -c "! kill -0 $PS"
check "(d) the simulator verified the job's every round" grep -q '^SIM OK rounds=2' "$W/d.sim"
check "(d) the trainer's link came over the job's Unix socket" \
    grep -q "link worker site-1.FJU.[^ ]* (unix peer pid" "$W/d.log"
finish
