#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Hostile input on every socket with the real binaries:
# cjrelayd (site-1.J1) between a fake or real upstream and tests/e2e/cjhostile peers.
#   (u) upstream: a fake "server" answering the relay's HELLO with garbage, an oversized
#       frame, a malformed READY, a DATA frame with a malformed header block or one whose
#       header_len lies: each a relay log line naming the upstream, the link closed, the
#       relay retries with back-off and comes up once the real simulator listens there
#   (w) worker sockets (unix and loopback tcp): garbage, oversized, short and lying
#       prefixes, a 1 MiB HELLO (frames before the handshake are capped at 64 KiB), malformed HELLO msgpack, a truncated HELLO, DATA before HELLO, invalid
#       FQCNs (empty part, bad character, too long, our own name, deeper than a child);
#       after a good HELLO: a lying header_len, a malformed header block, a 3 GiB frame
#       and half a frame.  Each: a log line naming the peer and the connection closed,
#       while a well-behaved worker's ping and `show info` keep being served
#       A frame over max_message_size is refused at its prefix without being buffered.
#   (f) a flood of 300 unix + 100 tcp connections holding half a HELLO: a worker is
#       still served during it, and the relay's fd count returns to where it was
#   (d) out of descriptors: 40 connections to the worker socket of a daemon allowed 24
#       descriptors: accepting pauses a second at a time (one warning each), no spinning,
#       and a worker is accepted again once they closed
#   (s) status socket: a line of every byte value, an HTTP request: ERR answers,
#       the daemon keeps answering
#   (t) TLS: a client certificate whose CN is not the site is refused at start
#       (--check-config and a real start, exit 1); a server speaking plain TCP on
#       an stcp:// url; a server closing mid-record during the handshake; a TLS 1.2
#       server asking to renegotiate (refused, logged); the TLS
#       simulator SIGKILLed in the middle of a blob (mid-record) and restarted: the
#       relay reconnects, no crash, fd count back to its baseline
# Already covered elsewhere (not repeated here): a non-child HELLO and a spoofed
# cn__origin (test_transport (e)); a 1 MiB status line, a non-reading status client
# and 100 status connections (test_daemon); wrong CA, expired and foreign-CA client
# certificates (test_tls); a worker claiming another's FQCN with a wrong launch token
# (test_faults).
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim; P=$BUILD/tests/e2e/cjpeer
H=$BUILD/tests/e2e/cjhostile
W=$(mktemp -d); SIM=; RELAY=; SRV=; BG=
cleanup() {
    for p in $BG $SRV $SIM $RELAY; do kill -9 "$p" 2>/dev/null; done
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

info_of() { $C -s "$W/status.sock" show info json | jq -r ".$1"; }
upstream_is() { [ "$(info_of upstream)" = "$1" ]; }
nfd() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
mark() { MARK=$(wc -l < "$1"); }                              # mark LOG: remember its length
since() { tail -n +"$((MARK + 1))" "$1"; }                    # since LOG: lines after the mark
logged() { since "$1" | grep -Eq "$2"; }                      # logged LOG REGEX
served() { # served WHAT: a well-behaved worker's ping and show info still work
    $P --timeout 10 "unix:$W/w.sock" site-1.J1.good ping > "$W/good.out" 2>> "$W/peer.err"
    if grep -q '^OK ping' "$W/good.out" && $C -s "$W/status.sock" show info > /dev/null; then
        pass "$1: a well-behaved worker is still served, show info answers"
    else
        fail "$1: good worker: $(cat "$W/good.out")"
    fi
}

set -- $($P freeport 2)
UP=$1; WPORT=$2
relay_ini "$W/relay.ini" relay.on_end_run=wait \
    upstream.url="tcp://127.0.0.1:$UP" upstream.reconnect_min=0.1 upstream.reconnect_max=0.5 \
    workers.listen="unix:$W/w.sock, tcp://127.0.0.1:$WPORT" workers.heartbeat_interval=2 workers.heartbeat_timeout=30 \
    status.socket="$W/status.sock" limits.max_message_size=64M log.level=info

# ---- (u) a fake upstream server ----------------------------------------------------------
$D -c "$W/relay.ini" > "$W/relay.log" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/status.sock"
# upstream KIND REGEX: the fake server answers two connection attempts with KIND
LOG=$W/relay.log; SEC=u
upstream() {
    mark "$LOG"
    $H serve "$UP" "$1" 2 > "$W/serve-$1.out" 2>&1 & SRV=$!
    wait_for 10 sh -c "[ \$(grep -c '^SERVE [0-9]' $W/serve-$1.out) -ge 2 ]"
    wait "$SRV"; SRV=
    # the link's line names the url; a repeated failure may only get the router's line
    if logged "$LOG" "(link upstream .*tcp://127.0.0.1:$UP.*closed|router site-1.J1: upstream unreachable): .*$2"; then
        pass "($SEC) fake server sends $1: relay closed the link: $(since "$LOG" | grep -Eo "(closed|unreachable): .*$2.*" | head -1 | cut -c1-110)"
    else
        fail "($SEC) fake server sends $1: no log line /$2/"; since "$LOG" | tail -5 | note
    fi
    check "($SEC) $1: the relay retried (second connection served: $(grep -c '^SERVE [0-9]' "$W/serve-$1.out"))" \
        [ "$(grep -c '^SERVE [0-9]' "$W/serve-$1.out")" -ge 2 ]
    check "($SEC) $1: relay alive, upstream not up ($(info_of upstream))" sh -c "kill -0 $RELAY && [ \"\$($C -s $W/status.sock show info json | jq -r .upstream)\" != up ]"
}
upstream garbage 'malformed frame: (frame type [0-9]+ at offset 6 is unknown|frame length [0-9]+ at offset 0 exceeds the limit)'
upstream oversized 'frame length 4294967280 at offset 0 exceeds the limit'
upstream badready 'malformed READY payload'
upstream data-badhdr 'malformed header block .*cn__from'
upstream data-hdrlie 'header_len 60000 at offset 4 does not fit'
check "(u) each failure logged by the router as a retry" grep -q 'router site-1.J1: upstream .*; retrying every' "$W/relay.log"

$S --listen "tcp://127.0.0.1:$UP" --job-id J1 --rounds 1 > "$W/sim.out" 2> "$W/sim.err" & SIM=$!
wait_for 15 upstream_is up
check "(u) the real simulator on the same port: upstream up" upstream_is up
served "(u)"
FD0=$(nfd "$RELAY")

# ---- (w) worker sockets --------------------------------------------------------------------
# worker URL-LABEL URL KIND REGEX [NAME]
worker() {
    _l=$1; _u=$2; _k=$3; _re=$4; shift 4
    mark "$W/relay.log"
    $H --wait 3 conn "$_u" "$_k" "$@" > "$W/h.out" 2>&1
    sleep 0.1
    if grep -q '^CLOSED' "$W/h.out" && logged "$W/relay.log" "link worker .*(unix peer pid [0-9]+ uid [0-9]+|127\.0\.0\.1:[0-9]+).*$_re"; then
        pass "(w) $_l $_k${1:+ $(printf %.40s "$1")}: closed; log: $(since "$W/relay.log" | grep -Eo "closed: .*" | tail -1 | cut -c1-100)"
    else
        fail "(w) $_l $_k $*: $(tr '\n' ' ' < "$W/h.out")"; since "$W/relay.log" | tail -4 | note
    fi
}
for u in "unix unix:$W/w.sock" "tcp tcp://127.0.0.1:$WPORT"; do
    set -- $u; L=$1; U=$2
    worker "$L" "$U" garbage 'malformed frame: (frame type 72 at offset 6 is unknown|frame length 1195725856 at offset 0 exceeds the limit)'
    worker "$L" "$U" oversized 'frame length 4294967280 at offset 0 exceeds the limit'
    worker "$L" "$U" bighello 'frame length 1048576 at offset 0 exceeds the limit'   # 64 KiB before HELLO
    worker "$L" "$U" shortlen 'frame length 8 at offset 0 is below the 16-byte prefix'
    worker "$L" "$U" hdrlie 'header_len 4000 at offset 4 does not fit'
    worker "$L" "$U" badhello 'malformed HELLO payload'
    worker "$L" "$U" truncated 'peer closed the connection before HELLO'
    worker "$L" "$U" data-first 'DATA frame before the handshake completed'
    worker "$L" "$U" data-hdrlie 'header_len 60000 at offset 4 does not fit'
    worker "$L" "$U" data-badhdr "malformed header block .*'cn__from'"
    worker "$L" "$U" data-huge 'frame length 3221225472 at offset 0 exceeds the limit'
    worker "$L" "$U" data-trunc 'up -> closed: peer closed the connection'
    served "(w) after the hostile frames on $L"
done
U="unix:$W/w.sock"
# A frame over max_message_size (64M) is refused at its prefix, before any of it is held.
HWM0=$(awk '/^VmHWM/ {print $2}' "/proc/$RELAY/status")
mark "$W/relay.log"
$H --wait 3 --size 100000000 conn "$U" data-big > "$W/h.out" 2>&1
check "(w) unix data-big: a 100 MB frame over max_message_size closed at once ($(tr '\n' ' ' < "$W/h.out"))" \
    sh -c "grep -q '^CLOSED' $W/h.out && tail -n +$((MARK + 1)) $W/relay.log | grep -q 'frame length 100000000 at offset 0 exceeds the limit'"
HWM1=$(awk '/^VmHWM/ {print $2}' "/proc/$RELAY/status")
check_mem "(w) ... without buffering it: relay VmHWM +$((HWM1 - HWM0)) kB (< 4 MiB)" [ $((HWM1 - HWM0)) -lt 4096 ]
worker unix "$U" hello "HELLO refused: endpoint_name 'site-1..x' is not a valid FQCN" site-1..x
worker unix "$U" hello "HELLO refused: endpoint_name 'site-1.J1.a b' is not a valid FQCN" 'site-1.J1.a b'
worker unix "$U" hello "HELLO refused: endpoint_name 'site-1.J1' is our own name" site-1.J1
worker unix "$U" hello "HELLO refused: 'site-1.J1.w.deeper' is not a child of site-1.J1" site-1.J1.w.deeper
worker unix "$U" hello "HELLO refused: 'server' is not a child of site-1.J1" server
LONG=site-1.J1.$(printf '%0300d' 0)
worker unix "$U" hello 'HELLO endpoint_name at offset [0-9]+ is 310 bytes, limit 255' "$LONG"
served "(w) after the invalid FQCNs"
sleep 0.3
check "(w) relay fd count back to its baseline ($FD0 -> $(nfd "$RELAY"))" [ "$(nfd "$RELAY")" -le "$FD0" ]

# ---- (f) a flood of connections -------------------------------------------------------------------
$H flood "unix:$W/w.sock" 300 3 > "$W/flood1.out" & BG=$!
$H flood "tcp://127.0.0.1:$WPORT" 100 3 > "$W/flood2.out" &
F2=$!
sleep 1
served "(f) during a flood of 400 connections"
wait "$BG" "$F2"; BG=
note "$W/flood1.out" "$W/flood2.out"
check "(f) the flood connected ($(cat "$W/flood1.out" "$W/flood2.out" | tr '\n' ' '))" \
    sh -c "grep -q '^connected 300 of 300' $W/flood1.out && grep -q '^connected 100 of 100' $W/flood2.out"
wait_for 5 sh -c "[ \$(ls /proc/$RELAY/fd | wc -l) -le $FD0 ]"
check "(f) relay fd count back to its baseline after the flood ($FD0 -> $(nfd "$RELAY"))" [ "$(nfd "$RELAY")" -le "$FD0" ]

# ---- (s) status socket --------------------------------------------------------------------------------
for k in junk garbage; do
    mark "$W/relay.log"
    $H --wait 2 conn "unix:$W/status.sock" "$k" > "$W/st.out" 2>&1
    check "(s) status client sending $k: answered ERR ($(grep '^ANSWER' "$W/st.out" | cut -c1-60))" grep -q '^ANSWER ERR 4[0-9][0-9]' "$W/st.out"
    check "(s) $k: the refusal logged with the client's pid and uid" logged "$W/relay.log" 'status: pid [0-9]+ uid [0-9]+: .*ERR 400 '
done
served "(s) after the garbage status clients"

kill -TERM "$RELAY"; wait "$RELAY"; rc=$?; RELAY=
check "relay exits 0 on SIGTERM after all that (rc $rc)" [ "$rc" -eq 0 ]
kill -TERM "$SIM" 2>/dev/null; wait "$SIM" 2>/dev/null; SIM=

# ---- (t) TLS ----------------------------------------------------------------------------------------------
if ! command -v openssl >/dev/null; then skip "(t) openssl missing"; finish; fi
K=$W/certs
if ! sh "$ROOT/tests/unit/tls_certs.sh" "$K"; then fail "(t) certificates"; note "$K/openssl.log"; finish; fi
( cd "$K" && openssl req -new -key client.key -subj "/CN=site-2" -out othercn.csr &&
  openssl x509 -req -in othercn.csr -CA rootCA.pem -CAkey rootCA.key -CAcreateserial -sha256 -days 30 \
      -extfile leaf.ext -out othercn.crt ) 2>> "$K/openssl.log"
tls_ini() { # tls_ini FILE CERT: an mtls relay presenting CERT
    relay_ini "$1" relay.on_end_run=wait \
        upstream.url="stcp://127.0.0.1:$UP" upstream.connection_security=mtls upstream.ca_file="$K/rootCA.pem" \
        upstream.cert_file="$2" upstream.key_file="$K/client.key" upstream.reconnect_min=0.1 upstream.reconnect_max=0.5 \
        workers.listen="unix:$W/w.sock" status.socket="$W/status.sock"
}
tls_ini "$W/cn.ini" "$K/othercn.crt"
out=$($D -c "$W/cn.ini" --check-config 2>&1); rc=$?
check "(t) --check-config refuses a client certificate whose CN is not the site (rc $rc): $(printf %.90s "$out")" \
    sh -c "[ $rc -eq 1 ] && printf '%s' \"$out\" | grep -q \"cert_file: the certificate's CN 'site-2' is not the site name 'site-1'\""
$D -c "$W/cn.ini" > "$W/cn.log" 2>&1; rc=$?
check "(t) ... and so does a start (exit 1, nothing listening)" sh -c "[ $rc -eq 1 ] && [ ! -e $W/status.sock ] && grep -q \"CN 'site-2'\" $W/cn.log"

tls_ini "$W/tls.ini" "$K/client.crt"
LOG=$W/tls.log; SEC=t
$D -c "$W/tls.ini" > "$LOG" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/status.sock"
upstream plain 'TLS handshake failed: .*wrong version number -- the peer does not speak TLS'
upstream tlsmid 'peer closed the connection during the TLS handshake'
# A TLS 1.2 server asking to renegotiate once the link is established (openssl
# s_server's R command, sent when it printed the session): refused and logged.
mark "$LOG"; TFDR=$(nfd "$RELAY")
rm -f "$W/ssctl"; mkfifo "$W/ssctl"; exec 7<>"$W/ssctl"
openssl s_server -tls1_2 -accept "$UP" -cert "$K/server.crt" -key "$K/server.key" -CAfile "$K/rootCA.pem" \
    -Verify 1 < "$W/ssctl" > "$W/sserver.out" 2>&1 & SRV=$!
wait_for 10 grep -q '^CIPHER is' "$W/sserver.out"
printf 'R\n' >&7
wait_for 10 logged "$LOG" 'renegotiation was refused'
check "(t) a server asking for a TLS renegotiation: refused and logged: $(since "$LOG" | grep -Eo 'the peer asked for a TLS renegotiation.*' | head -1)" \
    logged "$LOG" 'link upstream .*: the peer asked for a TLS renegotiation: refused'
check "(t) ... the link's end says why: $(since "$LOG" | grep -Eo '(closed|unreachable): .*renegotiation was refused' | head -1 | cut -c1-90)" \
    logged "$LOG" '(closed|unreachable): .*renegotiation was refused'
exec 7>&-; kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; SRV=
check "(t) relay alive after the broken TLS servers" kill -0 "$RELAY"

$S --listen "stcp://127.0.0.1:$UP" --tls-dir "$K" --job-id J1 > "$W/tsim1.out" 2> "$W/tsim1.err" & SIM=$!
wait_for 15 upstream_is up
check "(t) the TLS simulator on the same port: upstream up" upstream_is up
TFD0=$(nfd "$RELAY")
# 4 GiB (the stream layer's largest blob); the server is killed once 64 MiB of it went down,
# whatever the machine's speed
$P --timeout 5 "unix:$W/w.sock" site-1.J1.w1 blob 4G > "$W/tblob.out" 2>> "$W/peer.err" & BG=$!
wait_for 20 sh -c "[ \$($C -s $W/status.sock show stats json | jq -r .bytes_down) -ge 67108864 ]"
mark "$LOG"
kill -KILL "$SIM"; wait "$SIM" 2>/dev/null; SIM=
wait "$BG"; BG=
check "(t) the blob in flight failed at the worker ($(cut -c1-80 "$W/tblob.out"))" grep -q '^FAIL blob' "$W/tblob.out"
check "(t) relay logged the upstream loss mid-stream" logged "$W/tls.log" 'router site-1.J1: upstream lost'
$S --listen "stcp://127.0.0.1:$UP" --tls-dir "$K" --job-id J1 > "$W/tsim2.out" 2> "$W/tsim2.err" & SIM=$!
wait_for 15 upstream_is up
check "(t) relay reconnected over TLS after the SIGKILL" upstream_is up
$P --timeout 20 "unix:$W/w.sock" site-1.J1.w1 blob 16M > "$W/tblob2.out" 2>> "$W/peer.err"
check "(t) a blob through the new TLS link, verified" grep -q '^OK blob 16777216' "$W/tblob2.out"
sleep 0.3
check "(t) relay fd count back to its baseline ($TFD0 -> $(nfd "$RELAY"))" [ "$(nfd "$RELAY")" -le "$TFD0" ]
kill -TERM "$RELAY"; wait "$RELAY"; rc=$?; RELAY=
check "(t) relay exits 0 on SIGTERM (rc $rc)" [ "$rc" -eq 0 ]

# ---- (d) out of descriptors -------------------------------------------------------------------
relay_ini "$W/fd.ini" upstream.url="tcp://127.0.0.1:1" workers.listen="unix:$W/fdw.sock" status.socket="$W/fds.sock"
(ulimit -n 24; exec $D -c "$W/fd.ini") > "$W/fd.log" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/fdw.sock"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
t0=$(ticks "$RELAY")
hold_conns "unix:$W/fdw.sock" 40 2   # 40 connections held for 2 s against 24 descriptors
t1=$(ticks "$RELAY")
n=$(grep -c "listener unix:$W/fdw.sock: accept failed: Too many open files; not accepting for 1 s" "$W/fd.log")
check "(d) out of descriptors: the worker socket pauses accepting, a warning a second ($n in 2 s)" sh -c "[ $n -ge 1 ] && [ $n -le 4 ]"
check "(d) ... no spinning ($((t1 - t0)) ticks of CPU while held)" [ $((t1 - t0)) -lt 50 ]
sleep 1.2
$P --timeout 10 "unix:$W/fdw.sock" site-1.J1.w9 ping > "$W/fdping.out" 2>> "$W/peer.err"
check "(d) ... and a worker is accepted again once they closed: $(head -1 "$W/fdping.out")" grep -q '^OK ping\|RETURN from site-1.J1: comm_error' "$W/fdping.out"
kill -TERM "$RELAY"; wait "$RELAY"; RELAY=

if [ "$_f" -gt 0 ]; then
    echo "# relay log (last 20 lines):"; tail -20 "$W/relay.log" | note
    echo "# tls relay log (last 20 lines):"; tail -20 "$W/tls.log" 2>/dev/null | note
fi
finish
