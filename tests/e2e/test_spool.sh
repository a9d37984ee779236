#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Spool mode end to end with the real binaries:
#   cjrelay-sim --isolate (FL server) <- cjrelayd mode = spool (site-1.J1) <- cjrelay-worker x N
# (1) rounds verified; only the relay downloads task refs from the server (no REFUSED line);
#     the server downloads the results from the relay
# (2) a worker killed mid-download from the relay: the launcher restarts it, the relay serves
#     the same task again from its spool, the round verifies without a failed round
# (3) a 1 GiB-model round: the relay's peak RSS stays within 40 MiB of its idle RSS (12-19 MiB seen;
#     make check runs this suite sanitized only, 256 MiB without the figures; test_memory checks them)
# (4) the spool directory is gone after each run
# (5) a spool too small (a loop-mounted ext4 filled up, or else RLIMIT_FSIZE): the task fails
#     upstream with a clear line and no file left behind; with room again the next round
#     succeeds; spool_max_bytes too small (reloadable) fails the task naming the key
# (6) --check-config refuses a tmpfs spool_dir unless spool_allow_tmpfs = true
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
W=$(mktemp -d); SIM=; RELAY=; MNT=
cleanup() {
    for p in $RELAY $SIM; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $RELAY $SIM; do kill -KILL "$p" 2>/dev/null; done
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    if [ "${_f:-0}" -gt 0 ] || [ -n "$CJ_KEEP_LOGS" ]; then   # the logs of a failed run are kept
        keep=$ROOT/build/e2e-logs/test_spool; rm -rf "$keep"; mkdir -p "$keep"
        cp "$W"/*.relay "$W"/*.sim "$W"/*.simlog "$W"/*.downloads "$W"/*.ini "$keep" 2>/dev/null
        echo "# logs kept in $keep"
    fi
    rm -rf "$W"
}
trap cleanup EXIT
jqt() { # jqt FILTER [FILE]: the filter prints true (jq 1.6's -e passes on empty input)
    jq "$@" 2>/dev/null | grep -qx true
}
files_in() { find "$1" -type f 2>/dev/null | wc -l; }

# ini NAME COUNT ON_END SPOOL_DIR [SECTION.KEY=VALUE ...]: $W/NAME.ini, a spooling relay
ini() {
    n=$1; count=$2; onend=$3; dir=$4; shift 4
    relay_ini "$W/$n.ini" relay.on_end_run="$onend" relay.mode=spool relay.spool_dir="$dir" \
        upstream.url="tcp://127.0.0.1:${PORT:-1}" \
        workers.listen="unix:$W/$n.w.sock" workers.command="$BUILD/cjrelay-worker" workers.count="$count" \
        workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=2 \
        status.socket="$W/$n.status.sock" "$@"
}

# run_job NAME COUNT ON_END SPOOL_DIR EXTRA SIM-ARGS...: sim (--isolate) + relay (EXTRA: one
# SECTION.KEY=VALUE for its config, or ""); sets SIM, RELAY, PORT
run_job() {
    n=$1; count=$2; onend=$3; dir=$4; extra=$5; shift 5
    $S --listen tcp://127.0.0.1:0 --job-id J1 --isolate --download-log "$W/$n.downloads" "$@" \
        > "$W/$n.sim" 2> "$W/$n.simlog" & SIM=$!
    PORT=$(sim_port "$W/$n.sim")
    ini "$n" "$count" "$onend" "$dir" ${extra:+"$extra"}
    $D -c "$W/$n.ini" > "$W/$n.relay" 2>&1 & RELAY=$!
}
end_relay() { wait_for 20 sh -c "! kill -0 $RELAY"; wait "$RELAY"; _rc=$?; RELAY=; return $_rc; }

# ---- (6) tmpfs refused (first: no sim needed) -------------------------------------------
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
    SHM=/dev/shm/cjrelay-spool-test.$$
    ini t 1 exit "$SHM"
    "$D" -c "$W/t.ini" --check-config > "$W/t.out" 2>&1; rc=$?
    check "(6) --check-config refuses a tmpfs spool_dir (rc $rc): $(head -1 $W/t.out)" \
        sh -c "[ $rc -ne 0 ] && grep -q spool_allow_tmpfs $W/t.out"
    timeout 10 "$D" -c "$W/t.ini" > "$W/t.relay" 2>&1; rc=$?
    check "(6) the daemon refuses to start on it (rc $rc), naming spool_allow_tmpfs" \
        sh -c "[ $rc -ne 0 ] && grep -q spool_allow_tmpfs $W/t.relay"
    ini t 1 exit "$SHM" relay.spool_allow_tmpfs=true
    "$D" -c "$W/t.ini" --check-config > "$W/t.out" 2>&1; rc=$?
    check "(6) ... and accepts it with spool_allow_tmpfs = true (rc $rc)" [ "$rc" -eq 0 ]
    rm -rf "$SHM"
else
    skip "(6) /dev/shm is not tmpfs here"
fi

# ---- (1) rounds, numpy, 2 workers, --isolate ------------------------------------------------
SP=$W/spool
mkdir -p "$SP/J1/stale-task"; echo old > "$SP/J1/stale-task/chunk_0.npz"   # leftovers of an earlier run
run_job a 2 exit "$SP" "" --rounds 3 --model-size 16M --tensors 4 --format numpy
wait_for 15 "$C" -s "$W/a.status.sock" show info
check "(1) leftovers of an earlier run removed at start-up" [ ! -e "$SP/J1/stale-task" ]
wait "$SIM"; rc=$?; SIM=
check "(1) sim verified every round (--isolate, 2 workers): $(tail -1 $W/a.sim)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=3' $W/a.sim"
check "(1) 3 rounds verified" [ "$(grep -c '^ROUND .* verified' "$W/a.sim")" -eq 3 ]
check "(1) no download was refused (no worker reached the server)" sh -c "! grep -q '^REFUSED' $W/a.sim"
check "(1) every task ref downloaded once, by the relay's FQCN only" \
    sh -c "[ \$(grep -c ' site-1\.J1 [0-9]* ok' $W/a.downloads) -eq 3 ] && [ \$(awk '{print \$2}' $W/a.downloads | sort -u) = site-1.J1 ]"
check "(1) results downloaded by the server from the relay" sh -c "[ \$(grep -c 'result_from=site-1.J1 ' $W/a.sim) -eq 3 ]"
check "(1) the relay served the spooled refs to its workers" grep -q "delivery 1/3 from the spool to site-1.J1.client_api_trainer_" "$W/a.relay"
end_relay; rc=$?
check "(1) __end_run__ ends the relay with exit 0 (rc $rc)" [ "$rc" -eq 0 ]
check "(4) the spool directory is gone after the run" sh -c "[ ! -e $SP/J1 ] && [ \$(find $SP -type f | wc -l) -eq 0 ]"

# ---- (2) a worker killed mid-download from the relay -------------------------------------------
run_job c 1 exit "$SP" "" --rounds 2 --model-size 256M --tensors 8 --format numpy --max-failures 3 --fetch-timeout 20
# the worker is pulling from the relay: served bytes of the task ref grow
wait_for 40 sh -c "$C -s $W/c.status.sock show refs json | jq '[.refs[] | select(.state == \"serving\" and .bytes_served > 0)] | length >= 1' | grep -qx true"; dl=$?
victim=$($C -s "$W/c.status.sock" show workers json | jq -r '.workers[0].pid')
task=$($C -s "$W/c.status.sock" show tasks json | jq -r '.tasks[0].task_id')
check "(2) worker pid $victim is downloading task $task from the relay" [ "$dl" -eq 0 ] && [ "${victim:-0}" -gt 0 ]
kill -KILL "$victim"
wait "$SIM"; rc=$?; SIM=
check "(2) the rounds all verified: $(tail -1 $W/c.sim)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=2' $W/c.sim"
check "(2) no failed round: the server never heard of the lost worker" sh -c "! grep -q '^ROUND .*FAILED' $W/c.sim"
check "(2) the relay requeued task $task" grep -q "task $task .*requeued" "$W/c.relay"
check "(2) the restarted worker got the same task from the spool" grep -q "task $task: delivery 2/3 from the spool to site-1.J1.client_api_trainer_2" "$W/c.relay"
check "(2) the server's ref was downloaded once, by the relay" \
    sh -c "[ \$(grep -c ' site-1\.J1 [0-9]* ok round=1' $W/c.downloads) -eq 1 ] && ! grep -q '^REFUSED' $W/c.sim"
end_relay
check "(4) the spool directory is gone after the run" [ ! -e "$SP/J1" ]

# ---- (3) 1 GiB model: relay memory does not follow the model --------------------------------
# (under ASan the memory figures mean nothing: a 256 MiB model keeps the suite short there)
if [ "$CJ_SAN" = 1 ]; then BM=256M; BB=268435456; else BM=1G; BB=1073741824; fi
# Idle RSS is measured before the relay reaches the server (it spools a task as soon as it
# has one): the relay starts first, then the simulator on a port found free just before.
$S --listen tcp://127.0.0.1:0 --job-id J1 > "$W/port.sim" 2>&1 & SIM=$!
PORT=$(sim_port "$W/port.sim")
kill "$SIM"; wait "$SIM" 2>/dev/null; SIM=
ini b 1 wait "$SP" upstream.reconnect_min=0.1 upstream.reconnect_max=0.2
$D -c "$W/b.ini" > "$W/b.relay" 2>&1 & RELAY=$!
wait_for 15 "$C" -s "$W/b.status.sock" show info
sleep 1
IDLE=$(kb "$RELAY" VmRSS)
$S --listen "tcp://127.0.0.1:$PORT" --job-id J1 --isolate --download-log "$W/b.downloads" \
    --rounds 1 --model-size $BM --tensors 8 --format numpy > "$W/b.sim" 2> "$W/b.simlog" & SIM=$!
wait "$SIM"; rc=$?; SIM=
PEAK=$(kb "$RELAY" VmHWM)
check "(3) $BM round verified: $(grep '^ROUND' $W/b.sim | cut -c1-120)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=1' $W/b.sim"
check_mem "(3) relay peak RSS ${PEAK} KiB within 40 MiB of idle ${IDLE} KiB" [ $((PEAK - IDLE)) -lt 40960 ]
"$C" -s "$W/b.status.sock" show stats json > "$W/b.stats" 2>&1
check "(3) show stats has the spool totals (task and result fetched: 2 x $BM)" \
    jqt ".spool_fetched_bytes >= 2 * $BB and .spool_fetch_failures == 0 and .spool_disk_full == 0" "$W/b.stats"
"$C" -s "$W/b.status.sock" shutdown >/dev/null
end_relay; rc=$?
check "(3) shutdown after the run exits 0 (rc $rc)" [ "$rc" -eq 0 ]
check "(4) the spool directory is gone after the run" [ ! -e "$SP/J1" ]

# ---- (5) a spool too small -----------------------------------------------------------------------
# Model 32M in 2 tensors: one item is 16 MiB.  The spool has about 4 MiB free, then room again.
SMALL=$W/small; mkdir -p "$SMALL"
if truncate -s 96M "$W/small.img" && mkfs.ext4 -q -F "$W/small.img" >/dev/null 2>&1 &&
   mount -o loop "$W/small.img" "$SMALL" 2>/dev/null; then
    MNT=$SMALL; how=loop
    avail=$(df -B1 --output=avail "$SMALL" | tail -1)
    fallocate -l $((avail - 4 * 1048576)) "$SMALL/ballast"
else
    how=fsize
fi
run_job f 1 exit "$SMALL" "" --rounds 2 --model-size 32M --tensors 2 --format numpy --max-failures 5
[ $how = fsize ] && prlimit --pid "$RELAY" --fsize=4194304
# no new task after this one until the spool has room again
wait_for 20 sh -c "$C -s $W/f.status.sock show tasks json | jq '.tasks | length >= 1' | grep -qx true"
"$C" -s "$W/f.status.sock" pause >/dev/null 2>&1
wait_for 20 grep -qi "disk full" "$W/f.relay"
check "(5 $how) the spool filling up fails the task with a clear line: $(grep -i -m1 'disk full' $W/f.relay | cut -c1-160)" \
    grep -qi "disk full" "$W/f.relay"
wait_for 10 grep -q '^ROUND 1 .*FAILED' "$W/f.sim"
check "(5 $how) the task failed upstream: $(grep -m1 FAILED $W/f.sim | cut -c1-140)" grep -q '^ROUND 1 .*FAILED' "$W/f.sim"
wait_for 5 sh -c "[ \$(find $SMALL/J1 -type f 2>/dev/null | wc -l) -eq 0 ]"
check "(5 $how) no file left in the spool" [ "$(files_in "$SMALL/J1")" -eq 0 ]
if [ $how = loop ]; then rm -f "$SMALL/ballast"; else prlimit --pid "$RELAY" --fsize=unlimited; fi
"$C" -s "$W/f.status.sock" resume >/dev/null 2>&1
wait "$SIM"; rc=$?; SIM=
check "(5 $how) with room again the next rounds succeed: $(tail -1 $W/f.sim)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=2' $W/f.sim"
end_relay
check "(4) the spool directory is gone after the run" [ ! -e "$SMALL/J1" ]
[ -n "$MNT" ] && umount "$MNT" && MNT=

# spool_max_bytes (reloadable) below one item: the task fails naming the key; reload fixes it
run_job m 1 exit "$SP" relay.spool_max_bytes=1M --rounds 1 --model-size 8M --tensors 2 --format numpy --max-failures 5
wait_for 20 sh -c "$C -s $W/m.status.sock show tasks json | jq '.tasks | length >= 1' | grep -qx true"
"$C" -s "$W/m.status.sock" pause >/dev/null 2>&1
wait_for 20 sh -c "grep -v 'spool mode: tensors' $W/m.relay | grep -q spool_max_bytes"
check "(5) spool_max_bytes too small fails the task naming the key: $(grep -m1 'spool_max_bytes (' $W/m.relay | cut -c1-160)" \
    sh -c "grep -v 'spool mode: tensors' $W/m.relay | grep -q spool_max_bytes"
info=$("$C" -s "$W/m.status.sock" show info json)
check "(5) show info gives the spool's last error and its time: $(printf '%s' "$info" | jq -r '.spool_last_error' | cut -c1-120)" \
    sh -c "printf '%s' '$info' | jq -e '(.spool_last_error | test(\"spool_max_bytes\")) and (.spool_last_error_at | test(\"^20[0-9-]+T\"))' >/dev/null"
sed -i 's/^spool_max_bytes = 1M/spool_max_bytes = 64M/' "$W/m.ini"
"$C" -s "$W/m.status.sock" reload >/dev/null 2>&1
"$C" -s "$W/m.status.sock" resume >/dev/null 2>&1
wait "$SIM"; rc=$?; SIM=
check "(5) after a reload raising spool_max_bytes the round succeeds: $(tail -1 $W/m.sim)" sh -c "[ $rc -eq 0 ] && grep -q '^SIM OK rounds=1' $W/m.sim"
end_relay
check "(4) the spool directory is gone after the run" [ ! -e "$SP/J1" ]
finish
