#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# TLS on the upstream link (doc/protocol/cellnet.md §9) with the real binaries and certificates
# made by openssl here (tests/unit/tls_certs.sh): cjrelay-sim listens on stcp://
# and requires client certificates; cjrelayd connects with mtls.
#   - mtls works end to end: worker echo and a 64 MiB blob through relay -> sim
#   - refused, each with a clear relay log line, while the relay keeps retrying
#     with back-off: the relay does not trust the server's CA; the client
#     certificate is signed by another CA; it is expired; there is none (tls mode)
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim; P=$BUILD/tests/e2e/cjpeer
W=$(mktemp -d); SIM=; RELAY=
cleanup() {
    for p in $SIM $RELAY; do kill -9 "$p" 2>/dev/null; done
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
command -v openssl >/dev/null || { skip "openssl missing"; finish; }

K=$W/certs
if ! sh "$ROOT/tests/unit/tls_certs.sh" "$K"; then
    fail "certificates made with openssl"; note "$K/openssl.log"; finish
fi
pass "certificates made with openssl (CA, server, client, expired, other CA)"

$S --listen stcp://127.0.0.1:0 --tls-dir "$K" --job-id J1 > "$W/sim.out" 2> "$W/sim.err" & SIM=$!
PORT=$(sim_port "$W/sim.out")
check "sim listens on stcp:// (port $PORT)" [ "${PORT:-0}" -gt 0 ]

# relay NAME SECURITY CA CERT KEY: starts a relay in $W/NAME against the sim.
relay() {
    R=$W/$1; mkdir -p "$R"
    # log level debug: the per-attempt reconnect lines are debug-level
    relay_ini "$R/relay.ini" \
        upstream.url="stcp://127.0.0.1:$PORT" upstream.connection_security="$2" \
        upstream.ca_file="$3" upstream.cert_file="$4" upstream.key_file="$5" \
        upstream.reconnect_min=0.05 upstream.reconnect_max=0.2 \
        workers.listen="unix:$R/w.sock" status.socket="$R/status.sock" log.level=debug
    $D -c "$R/relay.ini" > "$R/relay.log" 2>&1 & RELAY=$!
    wait_for 10 test -S "$R/status.sock"
}
stop_relay() {
    kill -TERM "$RELAY" 2>/dev/null; wait "$RELAY"; _rc=$?; RELAY=
    return $_rc
}
upstream() { $C -s "$R/status.sock" show info json | jq -r .upstream; }

# ---- mtls works ---------------------------------------------------------------------
relay ok mtls "$K/rootCA.pem" "$K/client.crt" "$K/client.key"
wait_for 15 sh -c "[ \"\$($C -s $R/status.sock show info json | jq -r .upstream)\" = up ]"
check "mtls: upstream up" [ "$(upstream)" = up ]
check "mtls: relay logs the TLS session" grep -q 'link upstream.*TLS established: TLSv1\.[23]' "$R/relay.log"
$P --timeout 20 "unix:$R/w.sock" site-1.J1.w1 echo 2000000 > "$R/echo.out" 2>> "$W/peer.err"
check "mtls: worker echo through relay -> sim over TLS" grep -q '^OK echo 2000000' "$R/echo.out"
$P --timeout 30 "unix:$R/w.sock" site-1.J1.w1 blob 64M > "$R/blob.out" 2>> "$W/peer.err"
check "mtls: 64 MiB blob from the sim over TLS, verified: $(cut -c1-60 "$R/blob.out")" grep -q '^OK blob 67108864' "$R/blob.out"
check "mtls: the sim saw a TLS client site-1.J1" grep -q 'client site-1.J1 connected .*(TLS)' "$W/sim.err"
stop_relay
check "mtls: relay exits 0" [ $_rc -eq 0 ]

# refused NAME SECURITY CA CERT KEY REGEX: the link never comes up, the relay logs
# REGEX and backs off (at least two reconnect attempts with a growing attempt count).
# Under TLS 1.3 the server refuses a client certificate after the client's side of
# the handshake is done; when the relay's HELLO reaches the server before it
# closes, the close is a TCP reset that can destroy the alert, and the relay then
# only logs "peer closed the connection before READY" for that attempt.  So the
# alert is awaited over several quick attempts, and the unclear ones are counted.
refused() {
    _n=$1; _re=$6
    relay "$@"
    wait_for 15 grep -Eq "$_re" "$R/relay.log"
    if grep -Eq "$_re" "$R/relay.log"; then pass "$_n: refused, relay log: $(grep -Eo "$_re" "$R/relay.log" | head -1)"
    else fail "$_n: no log line matching /$_re/"; grep -E 'upstream' "$R/relay.log" | tail -5 | note; fi
    echo "# $_n: attempts $(grep -c 'upstream reconnect in' "$R/relay.log"), of which only" \
        "'closed before READY': $(grep -c 'handshake -> closed: peer closed the connection before READY' "$R/relay.log")"
    wait_for 10 grep -q 'upstream reconnect in .* (attempt 3)' "$R/relay.log"
    check "$_n: relay keeps retrying with back-off ($(grep -c 'upstream reconnect in' "$R/relay.log") attempts logged)" \
        grep -q 'upstream reconnect in .* (attempt 3)' "$R/relay.log"
    check "$_n: upstream never up ($(upstream))" sh -c "! grep -q 'upstream up' $R/relay.log"
    stop_relay
}

refused wrong-ca mtls "$K/wrongCA.pem" "$K/client.crt" "$K/client.key" \
    'TLS handshake failed: .*certificate verify failed'
refused client-cert-from-other-ca mtls "$K/rootCA.pem" "$K/wrong.crt" "$K/client.key" 'alert unknown ca'
refused expired-client-cert mtls "$K/rootCA.pem" "$K/expired.crt" "$K/client.key" 'alert certificate expired'
refused no-client-cert tls "$K/rootCA.pem" "" "" 'alert certificate required'
check "the sim logged each refused handshake" \
    sh -c "[ \$(grep -c 'client (.*closed: TLS' $W/sim.err) -ge 3 ]"

kill -TERM "$SIM"; wait "$SIM"; rc=$?; SIM=
check "sim exits 0 on SIGTERM" [ $rc -eq 0 ]
finish
