#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Transport end to end with the real binaries: cjrelay-sim as the server
# (cells server and server.J1), cjrelayd as site-1.J1, tests/e2e/cjpeer as workers.
#   (a) a worker's stream request and direct ping reach the sim with exactly the
#       forwarding rewrite of doc/protocol/cellnet.md §6; the replies come back
#   (b) 1 GiB from the sim to a worker through the relay, intact, relay VmHWM < +64 MiB
#   (c) a worker that stops reading: the upstream is paced for it at most for its first
#       5 s (a new worker's grace), then, with the sender's window (64M) above link_buffer
#       (16M), the stalled worker's queue takes the upstream's slack (one window) instead
#       of pausing the shared upstream, so a second worker is still served and memory
#       stays within link_buffer + stream_window; with the window (8M) below
#       link_buffer the sender is held by its window while a second worker and
#       PING/PONG go on
#   (d) the sim is stopped (SIGTERM, exit 0) and restarted on the same port: the
#       relay reconnects and traffic flows again
#   (e) a non-child HELLO and a spoofed cn__origin are refused with a log line; a
#       non-loopback tcp listener is refused by --check-config
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim; P=$BUILD/tests/e2e/cjpeer
W=$(mktemp -d); SIM=; RELAY=; BG=
cleanup() {
    for p in $BG $SIM $RELAY; do kill -9 "$p" 2>/dev/null; done
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# wait_for SECS CMD...: polls CMD every 0.1 s until it succeeds; 1 after SECS.
stat_of() { $C -s "$W/status.sock" show stats json | jq -r ".$1"; }
info_of() { $C -s "$W/status.sock" show info json | jq -r ".$1"; }
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$RELAY/status"; }    # kB
field() { sed -n "s/.* $1=\([0-9][0-9]*\).*/\1/p" "$2"; }     # field NAME FILE (ping counters)
upstream_is() { [ "$(info_of upstream)" = "$1" ]; }
peer() { $P --timeout "${TMO:-20}" "$@" 2>> "$W/peer.err"; }
mem_ok() { # mem_ok WHEN [LIMIT_MIB]: relay VmHWM within LIMIT (default 64) MiB of its value at start
    h=$(hwm); lim=${2:-64}
    check_mem "relay VmHWM after $1: +$(((h - H0) / 1024)) MiB (< $lim MiB)" [ $((h - H0)) -lt $((lim * 1024)) ]
}

# start_sim N PORT [ARGS]: starts the sim (output sim-N.out), sets SIM and SIM_PORT.
start_sim() {
    _sn=$1; _port=$2; shift 2
    $S --listen "tcp://127.0.0.1:$_port" --job-id J1 --log-headers "$W/sim-headers.log" --heartbeat 1 "$@" \
        > "$W/sim-$_sn.out" 2> "$W/sim-$_sn.err" & SIM=$!
    SIM_PORT=$(sim_port "$W/sim-$_sn.out") || { note "$W/sim-$_sn.err"; fail "sim $_sn starts"; finish; }
}

# ---- setup --------------------------------------------------------------------------
start_sim 1 0
check "sim prints SIM READY with the real port ($SIM_PORT)" [ "$SIM_PORT" -gt 0 ]
WPORT=$($P freeport)
relay_ini "$W/relay.ini" \
    upstream.url="tcp://127.0.0.1:$SIM_PORT" upstream.reconnect_min=0.2 upstream.reconnect_max=1 \
    workers.listen="unix:$W/w.sock, tcp://127.0.0.1:$WPORT" workers.heartbeat_interval=2 workers.heartbeat_timeout=30 \
    status.socket="$W/status.sock" limits.link_buffer=16M log.level=info
$D -c "$W/relay.ini" > "$W/relay.log" 2>&1 & RELAY=$!
wait_for 10 upstream_is up
check "relay upstream up (peer server)" [ "$(info_of upstream_peer)" = server ]
H0=$(hwm)

# ---- (a) headers --------------------------------------------------------------------
# fwd_ok SENT RECEIVED: the received line is the sent one with exactly cn__from,
# cn__to, cn__route (+[site-1.J1, t]) and cn__send_time (= t) rewritten.
fwd_ok() {
    printf '%s\n%s\n' "$1" "$2" | awk '
    NR == 1 { ns = split($0, s, " ") }
    NR == 2 { nr = split($0, r, " ") }
    END {
        bad = ""
        if (ns != nr || ns == 0) bad = bad " key-count(" ns "/" nr ")"
        for (i = 1; i <= ns; i++) {
            k = s[i]; sub(/=.*/, "", k); v = s[i]; sub(/^[^=]*=/, "", v)
            k2 = r[i]; sub(/=.*/, "", k2); v2 = r[i]; sub(/^[^=]*=/, "", v2)
            if (k != k2) { bad = bad " order:" k "/" k2; continue }
            S[k] = v; R[k] = v2
            if (k != "cn__from" && k != "cn__to" && k != "cn__route" && k != "cn__send_time" && v != v2)
                bad = bad " changed:" k
        }
        if (S["cn__from"] != S["cn__origin"] || S["cn__to"] != "site-1.J1") bad = bad " sent-hop"
        if (R["cn__from"] != "site-1.J1") bad = bad " cn__from=" R["cn__from"]
        if (R["cn__to"] != "server") bad = bad " cn__to=" R["cn__to"]
        pre = substr(S["cn__route"], 1, length(S["cn__route"]) - 1) ",[site-1.J1,"
        if (index(R["cn__route"], pre) != 1) bad = bad " route"
        tail = R["cn__route"]; sub(/.*,\[site-1\.J1,/, "", tail); sub(/\]\]$/, "", tail)
        if (tail != R["cn__send_time"]) bad = bad " send_time(" tail "/" R["cn__send_time"] ")"
        if (bad != "") { print "header mismatch:" bad; exit 1 }
    }'
}
has() { printf '%s\n' "$1" | grep -q "$2"; }                        # has TEXT REGEX
line_of() { grep "$2" "$1" | grep -m1 'cn__origin=site-1.J1.w1 '; }   # line_of FILE PATTERN

peer --log-headers "$W/peer-headers.log" "unix:$W/w.sock" site-1.J1.w1 echo 2500000 > "$W/a-echo.out"
check "(a) worker echo of 2500000 bytes through the relay: reply identical" grep -q '^OK echo 2500000' "$W/a-echo.out"
sent=$(line_of "$W/peer-headers.log" 'sm__tp=echo'); got=$(line_of "$W/sim-headers.log" 'sm__tp=echo')
if fwd_ok "$sent" "$got"; then pass "(a) stream request at the sim: cn__from/to/route/send_time rewritten, every other header intact"
else fail "(a) stream request headers"; printf 'sent %s\ngot  %s\n' "$sent" "$got" | note; fi
check "(a) application header x-app arrived" has "$got" 'x-app=cjpeer'
check "(a) route: the worker, then the relay" has "$got" 'cn__route=\[\[site-1.J1.w1,[0-9.]*\],\[site-1.J1,[0-9.]*\]\]'
peer --log-headers "$W/peer-headers.log" "unix:$W/w.sock" site-1.J1.w1 ping > "$W/a-ping.out"
check "(a) direct ping answered by server.J1" grep -q '^OK ping rc=ok.*pong from server.J1 to site-1.J1.w1' "$W/a-ping.out"
sent=$(line_of "$W/peer-headers.log" 'cn__topic=ping'); got=$(line_of "$W/sim-headers.log" 'cn__topic=ping')
if fwd_ok "$sent" "$got"; then pass "(a) direct request at the sim: exactly the forwarding rewrite"
else fail "(a) direct request headers"; printf 'sent %s\ngot  %s\n' "$sent" "$got" | note; fi
check "(a) sim printed a line per served request" sh -c "grep -q '^SERVED echo 2500000 bytes to site-1.J1.w1' $W/sim-1.out && grep -q '^SERVED ping from site-1.J1.w1' $W/sim-1.out"

# ---- (b) 1 GiB ------------------------------------------------------------------------
TMO=50 peer "tcp://127.0.0.1:$WPORT" site-1.J1.w2 blob 1G > "$W/b.out"
check "(b) 1 GiB blob through the relay (tcp worker link), every byte checked: $(cut -c1-90 "$W/b.out")" \
    grep -q '^OK blob 1073741824 bytes' "$W/b.out"
mem_ok "1 GiB"
check "(b) relay counted >= 1 GiB relayed down" [ "$(stat_of bytes_down)" -ge 1073741824 ]
note <<EOF
(b) relay throttles during the 1 GiB: $(stat_of throttles)
EOF

# ---- (c, window 64M > link_buffer 16M) a stalled worker does not stall the upstream ----
T0=$(stat_of throttles)
peer "unix:$W/w.sock" site-1.J1.st1 stall 5 > "$W/c1.out" & BG=$!
wait_for 10 grep -q '^STALLING' "$W/c1.out"
sleep 1   # let the sender fill its window toward the stalled worker
TMO=5 peer "unix:$W/w.sock" site-1.J1.w3 ping > "$W/c1-ping.out"
check "(c) second worker served while the first is stalled ($(cut -c1-60 "$W/c1-ping.out"))" grep -q '^OK ping' "$W/c1-ping.out"
# (the upstream may be paced for the stalled worker within its first 5 s, each pace lifted
# at once by the second worker's traffic: the throttle count is reported, not checked)
echo "# (c) throttles during the stall: $T0 -> $(stat_of throttles)"
mem_ok "a stalled worker (sender window 64M; bound link_buffer 16M + window 64M)" 96
wait_for 15 sh -c "! kill -0 $BG"; BG=
check "(c) the stalled worker left after 5 s" grep -q '^OK stall' "$W/c1.out"
TMO=10 peer "unix:$W/w.sock" site-1.J1.w3 ping > "$W/c1-after.out"
check "(c) upstream flows again once the stalled worker is gone" grep -q '^OK ping' "$W/c1-after.out"

# ---- (d) sim stopped and restarted on the same port ---------------------------------------
R0=$(stat_of reconnects)
kill -TERM "$SIM"; wait "$SIM"; rc=$?; SIM=
check "(d) sim exits 0 on SIGTERM" [ "$rc" -eq 0 ]
wait_for 10 sh -c "[ \"\$($C -s $W/status.sock show info json | jq -r .upstream)\" != up ]"
check "(d) relay sees the upstream go ($(info_of upstream))" [ "$(info_of upstream)" != up ]
start_sim 2 "$SIM_PORT" --window 8M
wait_for 15 upstream_is up
check "(d) relay reconnected (upstream up, reconnects $R0 -> $(stat_of reconnects))" \
    sh -c "[ \"$(info_of upstream)\" = up ] && [ $(stat_of reconnects) -gt $R0 ]"
peer "unix:$W/w.sock" site-1.J1.w1 echo 1500000 > "$W/d.out"
check "(d) echo after the reconnect" grep -q '^OK echo 1500000' "$W/d.out"
check "(d) transitions logged" sh -c "grep -q 'upstream lost' $W/relay.log && [ \$(grep -c 'upstream up' $W/relay.log) -ge 2 ]"

# ---- (c, window 8M < link_buffer 16M) the sender is held by its window ----------------------
T0=$(stat_of throttles)
peer "unix:$W/w.sock" site-1.J1.st2 stall 12 > "$W/c2.out" & BG=$!
wait_for 10 grep -q '^STALLING' "$W/c2.out"
# the sender fills its window at once (it hands chunks to its link as it makes them); on a
# loaded machine that may take longer than a moment, so wait until two answers 0.5 s apart
# give the same chunk count
sleep 0.5
peer "unix:$W/w.sock" site-1.J1.w3 ping > "$W/c2-p1.out"
_i=0; while [ $_i -lt 10 ]; do
    sleep 0.5
    peer "unix:$W/w.sock" site-1.J1.w3 ping > "$W/c2-p1b.out"
    [ "$(field chunks_out "$W/c2-p1b.out")" = "$(field chunks_out "$W/c2-p1.out")" ] && break
    mv "$W/c2-p1b.out" "$W/c2-p1.out"; _i=$((_i + 1))
done
check "(c) second worker's ping while the first is stalled" grep -q '^OK ping' "$W/c2-p1.out"
PO=$(field pongs_in "$W/c2-p1b.out"); CO=$(field chunks_out "$W/c2-p1b.out")
# PING/PONG on the upstream: the sim pings after 1 s without traffic and counts the
# relay's PONGs (so no tight polling here: each ping is traffic).
_i=0; while [ $_i -lt 4 ]; do
    sleep 1.5
    peer "unix:$W/w.sock" site-1.J1.w3 ping > "$W/c2-p2.out"
    [ "$(field pongs_in "$W/c2-p2.out")" -gt "$PO" ] 2>/dev/null && break
    _i=$((_i + 1))
done
check "(c) upstream PING/PONG goes on (sim pongs_in $PO -> $(field pongs_in "$W/c2-p2.out"))" \
    [ "$(field pongs_in "$W/c2-p2.out")" -gt "$PO" ]
# (one more chunk at most: an ACK still on its way when the count was taken frees room for it)
check "(c) the sender is held by its window (chunks_out stays $CO: $(field chunks_out "$W/c2-p2.out"), a stream active)" \
    sh -c "[ $(field chunks_out "$W/c2-p2.out") -le $((CO + 1)) ] && [ $(field tx_active "$W/c2-p2.out") -ge 1 ]"
peer "unix:$W/w.sock" site-1.J1.w4 echo 1048576 > "$W/c2-echo.out"
check "(c) second worker's echo while the first is stalled" grep -q '^OK echo' "$W/c2-echo.out"
check "(c) upstream stays up" upstream_is up
check "(c) the stalled worker is still connected" sh -c "kill -0 $BG 2>/dev/null"
echo "# (c) throttles during the stall: $T0 -> $(stat_of throttles)"
mem_ok "a stalled worker (sender window 8M; the peak above included)" 96
wait_for 20 sh -c "! kill -0 $BG"; BG=
check "(c) the stalled worker stayed connected 12 s" grep -q '^OK stall' "$W/c2.out"

# ---- (e) spoofing, non-loopback listen ---------------------------------------------------------
peer "unix:$W/w.sock" site-1.J1.w1 spoof other-site.J1.x > "$W/e1.out"
check "(e) HELLO as other-site.J1.x refused" grep -q '^OK spoof' "$W/e1.out"
check "(e) refusal logged" grep -q "HELLO refused: 'other-site.J1.x' is not a child of site-1.J1" "$W/relay.log"
peer "unix:$W/w.sock" site-1.J1.w1 spoof-origin site-1.J1.w9 > "$W/e2.out"
check "(e) message with a spoofed cn__origin dropped, link kept" grep -q '^OK spoof-origin' "$W/e2.out"
check "(e) spoofed origin logged" grep -q 'dropped spoofed req origin=site-1.J1.w9' "$W/relay.log"
sed "s|^listen = .*|listen = tcp://10.1.2.3:9000|" "$W/relay.ini" > "$W/bad.ini"
out=$($D -c "$W/bad.ini" --check-config 2>&1); rc=$?
check "(e) --check-config refuses a non-loopback tcp listener (rc $rc)" sh -c "[ $rc -eq 1 ]"
check "(e) ... naming the loopback rule" has "$out" 'bad.ini:[0-9]*: .*loopback'

# ---- the end -------------------------------------------------------------------------------------
kill -TERM "$RELAY"; wait "$RELAY"; rc=$?; RELAY=
check "relay exits 0 on SIGTERM" [ "$rc" -eq 0 ]
kill -TERM "$SIM"; wait "$SIM"; rc=$?; SIM=
check "sim exits 0 on SIGTERM" [ "$rc" -eq 0 ]
if [ "$_f" -gt 0 ]; then
    echo "# relay log (last 30 lines):"; tail -30 "$W/relay.log" | note
    echo "# peer stderr (last 10 lines):"; tail -10 "$W/peer.err" | note
fi
finish
