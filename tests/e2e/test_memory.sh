#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The relay's memory does not follow the model, with the binaries a site runs (the plain
# build: under ASan the figures mean nothing, so this suite has no sanitized pass; the
# suites test_fl and test_spool run the same rounds sanitized, without the figures):
#   cjrelay-sim (FL server) <- cjrelayd (site-1.J1) <- one launched cjrelay-worker
# (1) pass_through, a 256 MiB model round (the task's tensors down, the result's up, all
#     through the relay): its peak RSS stays within 64 MiB of its idle RSS
# (2) spool, a 256 MiB model round (the relay downloads the task to disk, serves it, spools
#     the result): its peak RSS stays within 40 MiB of its idle RSS (12-19 MiB seen)
# Idle RSS is measured before the relay reaches the server (in spool mode it fetches a task
# as soon as it has one): the relay starts first, then the simulator on a port found free
# just before.
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
W=$(mktemp -d -p "${TMPDIR:-/var/tmp}"); SIM=; RELAY=
cleanup() {
    for p in $RELAY $SIM; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $RELAY $SIM; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
MB=256M

# round NAME MODE [SECTION.KEY=VALUE ...]: one $MB round; sets IDLE and PEAK (KiB) and rc
round() {
    n=$1; mode=$2; shift 2
    $S --listen tcp://127.0.0.1:0 --job-id J1 > "$W/$n.port" 2>&1 & SIM=$!
    PORT=$(sim_port "$W/$n.port")
    kill "$SIM"; wait "$SIM" 2>/dev/null; SIM=
    relay_ini "$W/$n.ini" relay.on_end_run=wait relay.mode="$mode" \
        upstream.url="tcp://127.0.0.1:$PORT" upstream.reconnect_min=0.1 upstream.reconnect_max=0.2 \
        workers.listen="unix:$W/$n.w.sock" workers.command="$BUILD/cjrelay-worker" workers.count=1 \
        workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=2 \
        status.socket="$W/$n.status.sock" "$@"
    $D -c "$W/$n.ini" > "$W/$n.relay" 2>&1 & RELAY=$!
    wait_for 15 "$C" -s "$W/$n.status.sock" show info
    sleep 1
    IDLE=$(kb "$RELAY" VmRSS)
    isolate=; [ "$mode" = spool ] && isolate=--isolate
    $S --listen "tcp://127.0.0.1:$PORT" --job-id J1 $isolate --rounds 1 --model-size $MB --tensors 8 \
        --format numpy > "$W/$n.sim" 2> "$W/$n.simlog" & SIM=$!
    wait "$SIM"; rc=$?; SIM=
    PEAK=$(kb "$RELAY" VmHWM)
    "$C" -s "$W/$n.status.sock" shutdown > /dev/null
    wait_for 20 sh -c "! kill -0 $RELAY"; wait "$RELAY"; RELAY=
}

if [ "$CJ_SAN" = 1 ]; then skip "all: memory figures mean nothing under ASan"; finish; fi

round p pass_through
check "(1) pass_through: the $MB round verified: $(grep '^ROUND' $W/p.sim | cut -c1-100)" \
    sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=1' $W/p.sim"
check "(1) pass_through: relay peak RSS ${PEAK} KiB within 64 MiB of idle ${IDLE} KiB" [ $((PEAK - IDLE)) -lt 65536 ]

round s spool relay.spool_dir="$W/spool"
check "(2) spool: the $MB round verified: $(grep '^ROUND' $W/s.sim | cut -c1-100)" \
    sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=1' $W/s.sim"
check "(2) spool: relay peak RSS ${PEAK} KiB within 40 MiB of idle ${IDLE} KiB" [ $((PEAK - IDLE)) -lt 40960 ]
finish
