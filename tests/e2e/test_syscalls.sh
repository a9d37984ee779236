#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# What the kernel is asked to do: a count, not a timing, so a fast machine cannot hide a
# return to small reads (lib/net/conn.c reads up to CJ_CONN_BLOCK = 1 MiB per read(2)).
#   cjrelay-sim (FL server) <- cjrelayd (site-1.J1, pass_through) <- one launched cjrelay-worker
# One round of a 256 MiB model: the task's tensors go down through the relay and the result's
# come back up, 512 MiB relayed (each byte counted once).  From the worker's arrival to the
# round's end, the relay's read and write syscalls (/proc/PID/io syscr, syscw) must stay under
#     relayed bytes / (CJ_CONN_BLOCK / 8) + 1000
# i.e. an average read of at least 128 KiB with room for the control traffic (heartbeats,
# requests, acks).  Reads of 4 KiB (libevent's bufferevents, before) made ~131,000 here; the
# 1 MiB reads make ~1,100.
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim; WK=$BUILD/cjrelay-worker
W=$(mktemp -d); SIM=; RELAY=
cleanup() {
    for p in $RELAY $SIM; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $RELAY $SIM; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
BLOCK=1048576                      # CJ_CONN_BLOCK (lib/net/conn.h)
MODEL=256M

$S --listen tcp://127.0.0.1:0 --job-id J1 --rounds 1 --model-size $MODEL --tensors 8 --format numpy \
    > "$W/sim.out" 2> "$W/sim.err" & SIM=$!
PORT=$(sim_port "$W/sim.out")
relay_ini "$W/relay.ini" relay.on_end_run=wait upstream.url="tcp://127.0.0.1:$PORT" \
    workers.listen="unix:$W/w.sock" workers.command="$WK" workers.count=1 status.socket="$W/status.sock"
$D -c "$W/relay.ini" > "$W/relay.log" 2>&1 & RELAY=$!
io() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/io" 2>/dev/null; }
wait_for 30 sh -c "$C -s $W/status.sock show workers json 2>/dev/null | grep -q client_api_trainer_1"
r0=$(io "$RELAY" syscr); w0=$(io "$RELAY" syscw)
check "the relay's /proc/PID/io is readable (syscr ${r0:-none})" [ -n "$r0" ]
wait_for 120 sh -c "! kill -0 $SIM 2>/dev/null"
r1=$(io "$RELAY" syscr); w1=$(io "$RELAY" syscw)
wait "$SIM"; rc=$?; SIM=
check "the round verified: $(grep '^ROUND' "$W/sim.out" | cut -c1-100)" \
    sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=1' '$W/sim.out'"
mb=$(sed -n 's/^ROUND .* bytes=\([0-9]*\) .*/\1/p' "$W/sim.out" | head -1)
bytes=$((2 * ${mb:-0}))
bound=$((bytes / (BLOCK / 8) + 1000))
reads=$((${r1:-0} - ${r0:-0})); writes=$((${w1:-0} - ${w0:-0}))
avg=$([ "$reads" -gt 0 ] && echo $((bytes / reads / 1024)) || echo "?")
check "relay read syscalls for $((bytes >> 20)) MiB relayed: $reads (bound $bound; average read ~$avg KiB)" \
    [ "$bytes" -gt 0 -a "$reads" -gt 0 -a "$reads" -le "$bound" ]
check "relay write syscalls: $writes (bound $bound)" [ "$writes" -gt 0 -a "$writes" -le "$bound" ]
kill -TERM "$RELAY"; wait "$RELAY"; rc=$?; RELAY=
check "relay exits 0 on SIGTERM" [ $rc -eq 0 ]
finish
