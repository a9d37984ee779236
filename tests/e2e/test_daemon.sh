#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The daemon shell, with the real cjrelayd and cjrelayctl:
# --check-config errors with file:line, reload good and bad, every status command
# in text and JSON, socket mode, abusive status clients, signals, notify datagrams.
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; T=$BUILD/tests/e2e/cjtest
W=$(mktemp -d); PID=; SINK=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; [ -n "$SINK" ] && kill "$SINK" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT

write_conf() { # write_conf FILE [SECTION.KEY=VALUE ...]: a good config, but for the pairs given
    f=$1; shift
    relay_ini "$f" upstream.url=tcp://127.0.0.1:8002 upstream.get_task_interval=0.5 \
        workers.listen="unix:$W/workers.sock" workers.heartbeat_interval=5 workers.heartbeat_timeout=30 "$@" \
        status.socket="$W/status.sock" status.socket_mode=0640 log.level=info
}

# ---- --check-config ---------------------------------------------------------
write_conf "$W/good.ini"
check "check-config accepts a good file" $D -c "$W/good.ini" --check-config

expect_problem() { # expect_problem NAME FILE REGEX
    out=$($D -c "$2" --check-config 2>&1); rc=$?
    if [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -Eq "$3"; then pass "$1"
    else fail "$1: rc=$rc out=$out"; fi
}
printf '[relay]\nsite = site-1\njob_id = J1\nheartbeat_timout = 3\n' > "$W/b1.ini"
expect_problem "unknown key names file:line" "$W/b1.ini" "b1.ini:4: .*heartbeat_timout"
printf '[relay]\nsite = site-1\njob_id = J1\n[wrokers]\ncount = 1\n' > "$W/b2.ini"
expect_problem "unknown section names file:line" "$W/b2.ini" "b2.ini:4: .*wrokers.*workers"
write_conf "$W/b3.ini" workers.heartbeat_timeout=2
expect_problem "heartbeat_timeout <= heartbeat_interval" "$W/b3.ini" "b3.ini:[0-9]+: .*heartbeat_timeout"
write_conf "$W/b4.ini"
sed -i 's/^get_task_interval = 0.5/reconnect_min = 40\nreconnect_max = 30/' "$W/b4.ini"
expect_problem "reconnect_min above reconnect_max" "$W/b4.ini" "b4.ini:[0-9]+: .*reconnect_min"
write_conf "$W/b5.ini"
sed -i "s|^listen = .*|listen = tcp://0.0.0.0:9000|" "$W/b5.ini"
expect_problem "non-loopback tcp worker listen" "$W/b5.ini" "b5.ini:$(grep -n '^listen' "$W/b5.ini" | cut -d: -f1): .*loopback"
write_conf "$W/b6.ini"
sed -i 's|^url = .*|url = stcp://127.0.0.1:8002\nconnection_security = mtls\nca_file = /nonexistent/rootCA.pem|' "$W/b6.ini"
expect_problem "mtls without a key file" "$W/b6.ini" "b6.ini:[0-9]+: .*(key_file|cert_file)"
write_conf "$W/b7.ini" workers.count=99999
expect_problem "out of range value" "$W/b7.ini" "b7.ini:[0-9]+: .*count"
printf '[relay]\nsite = site-1\njob_id = J1\nbogus1 = 1\nbogus2 = 2\n[log]\nlevel = loud\n' > "$W/b8.ini"
out=$($D -c "$W/b8.ini" --check-config 2>&1)
n=$(printf '%s\n' "$out" | grep -c "b8.ini:[0-9]*:")
check "every problem printed (3 expected, got $n)" [ "$n" -ge 3 ]

# ---- start with a fake systemd notify socket --------------------------------
$T notify-sink "$W/notify.sock" > "$W/notify.log" & SINK=$!
sleep 0.2
NOTIFY_SOCKET=$W/notify.sock WATCHDOG_USEC=400000 $D -c "$W/good.ini" > "$W/d.log" 2>&1 & PID=$!
for i in $(seq 50); do [ -S "$W/status.sock" ] && break; sleep 0.1; done
check "status socket created" [ -S "$W/status.sock" ]
check "status socket mode 0640" [ "$(stat -c %a "$W/status.sock")" = 640 ]

# ---- every status command, text and JSON ------------------------------------
for what in info stats workers tasks refs config metrics; do
    check "show $what (text)" $C -s "$W/status.sock" show $what
    j=$($C -s "$W/status.sock" show $what json)
    check "show $what json parses" sh -c "printf '%s' '$j' | jq -e . >/dev/null"
done
check "info json fields" sh -c "$C -s $W/status.sock show info json | jq -e '.fqcn == \"site-1.J1\" and .pid > 0 and .rss_bytes > 0 and .mode == \"pass_through\"' >/dev/null"
check "stats json fields" sh -c "$C -s $W/status.sock show stats json | jq -e '.tasks_in == 0 and has(\"bytes_up\") and has(\"reconnects\")' >/dev/null"
check "config json has every key" sh -c "[ \$($C -s $W/status.sock show config json | jq '.config | length') -ge 30 ]"
check "workers json is an empty table" sh -c "$C -s $W/status.sock show workers json | jq -e '.workers == []' >/dev/null"
check "help lists commands" sh -c "$C -s $W/status.sock help | grep -q 'show info'"
$C -s "$W/status.sock" frobnicate > "$W/err.out"; rc=$?
check "unknown command is ERR and exit 1" sh -c "[ $rc -eq 1 ] && grep -q '^ERR 400' $W/err.out"
check "pause" $C -s "$W/status.sock" pause
check "state paused" sh -c "$C -s $W/status.sock show info json | jq -e '.state == \"paused\"' >/dev/null"
check "resume" $C -s "$W/status.sock" resume
check "cjrelayctl -c reads the socket from the config" $C -c "$W/good.ini" show info

# ---- abusive clients --------------------------------------------------------
$T noread "$W/status.sock" 200000 4 & NR=$!
out=$($T longline "$W/status.sock" 1048576)
check "1 MiB line refused with ERR 413" sh -c "printf '%s' '$out' | grep -q '^ERR 413'"
sleep 1
check "daemon answers others while a client never reads" $C -s "$W/status.sock" show info
rss=$($C -s "$W/status.sock" show info json | jq .rss_bytes)
check "memory bounded with a non-reading client (rss $rss < 64 MiB)" [ "$rss" -lt 67108864 ]
wait $NR
flood=$($T flood "$W/status.sock" 100)
check "a flood of 100 connections: daemon still answers" $C -s "$W/status.sock" show stats

# ---- reload -----------------------------------------------------------------
sed -i 's/^get_task_interval = 0.5/get_task_interval = 2.5/' "$W/good.ini"
check "reload (good) answers OK" $C -s "$W/status.sock" reload
check "reloaded value visible" sh -c "$C -s $W/status.sock show config json | jq -e '.config[] | select(.key == \"upstream.get_task_interval\") | .value == \"2.5\"' >/dev/null"
cp "$W/good.ini" "$W/good.bak"
printf 'nonsense line\n' >> "$W/good.ini"
sed -i 's/^get_task_interval = 2.5/get_task_interval = 7/' "$W/good.ini"
$C -s "$W/status.sock" reload > "$W/reload.out"; rc=$?
check "reload (bad) answers ERR" sh -c "[ $rc -eq 1 ] && grep -q '^ERR 500' $W/reload.out"
check "bad reload keeps the running value" sh -c "$C -s $W/status.sock show config json | jq -e '.config[] | select(.key == \"upstream.get_task_interval\") | .value == \"2.5\"' >/dev/null"
kill -HUP $PID; sleep 0.3
check "SIGHUP with a bad file keeps running" kill -0 $PID
check "bad reload logged with file:line" grep -q "good.ini:[0-9]*:" "$W/d.log"
cp "$W/good.bak" "$W/good.ini"

# ---- signal ladder ----------------------------------------------------------
kill -TERM $PID; wait $PID; rc=$?; PID=
check "SIGTERM drains and exits 0 (rc $rc)" [ $rc -eq 0 ]
check "status socket removed at exit" [ ! -e "$W/status.sock" ]
sleep 0.2
kill $SINK; SINK=
first=$(grep -m1 -E '^(READY|STATUS|WATCHDOG|RELOADING|STOPPING)' "$W/notify.log" | cut -c1-7)
check "first notify datagram is READY=1" [ "$first" = "READY=1" ]
check "STATUS= line sent" grep -q '^STATUS=site-1.J1' "$W/notify.log"
check "WATCHDOG=1 sent" grep -q '^WATCHDOG=1' "$W/notify.log"
check "RELOADING=1 with MONOTONIC_USEC" grep -q '^RELOADING=1|MONOTONIC_USEC=[0-9]' "$W/notify.log"
check "STOPPING=1 is the last" sh -c "grep -v -e '^STATUS' -e '^WATCHDOG' $W/notify.log | tail -1 | grep -q '^STOPPING=1'"

$D -c "$W/good.ini" > "$W/d2.log" 2>&1 & PID=$!
for i in $(seq 50); do [ -S "$W/status.sock" ] && break; sleep 0.1; done
kill -QUIT $PID; wait $PID; rc=$?; PID=
check "SIGQUIT stops at once with exit 0" [ $rc -eq 0 ]
$D -c "$W/good.ini" > "$W/d3.log" 2>&1 & PID=$!
for i in $(seq 50); do [ -S "$W/status.sock" ] && break; sleep 0.1; done
$D -c "$W/good.ini" > "$W/d4.log" 2>&1; rc=$?
check "a second daemon refuses the live socket (exit 2)" sh -c "[ $rc -eq 2 ] && grep -q 'in use' $W/d4.log"
kill -9 $PID; wait $PID 2>/dev/null; PID=
check "stale socket left by a killed daemon" [ -S "$W/status.sock" ]
$D -c "$W/good.ini" > "$W/d5.log" 2>&1 & PID=$!
sleep 0.5
check "stale socket replaced on start" grep -q "replaced stale socket" "$W/d5.log"
kill -TERM $PID; kill -TERM $PID 2>/dev/null; wait $PID; rc=$?; PID=
check "two SIGTERMs still exit 0" [ $rc -eq 0 ]
$D -c "$W/nonexistent.ini" 2>/dev/null; rc=$?
check "missing config file exits 1" [ $rc -eq 1 ]
finish
