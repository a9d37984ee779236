#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# FLARE's transports on the upstream link (doc/protocol/sfm.md §1), with the real
# binaries: for each of tcp, stcp, http, https, grpc and grpcs the simulator listens
# with that scheme (the TLS ones with certificates made here, client certificates
# required) and the relay reaches it with mutual TLS where it applies; two rounds of a
# model sent as download refs go to a launched worker and come back verified, and when
# the server comes back on the same port the relay reconnects.  Then
# what an operator must be told clearly:
#   - grpcs checks the server certificate's name against the URL's host (FLARE's gRPC
#     client does), https does not (FLARE's http client does not);
#   - the TLS refusals of test_tls.sh (a server CA not trusted, a client certificate from
#     another CA, an expired one) on https and grpcs, each with OpenSSL's reason;
#   - the direct worker (the bench's baseline, cjrelay-worker --direct) downloads a task
#     straight from an https and a grpcs server with the site's certificate (--tls-dir),
#     and refuses a TLS URL without --tls-dir, naming the option;
#   - a relay speaking the wrong scheme to a server: each side names what it got;
#   - hostile servers (tests/e2e/cjhostile serve): a refused upgrade, a bad accept hash,
#     a text or oversized WebSocket message, a GOAWAY in the middle of a gRPC message, a
#     gRPC window that never opens: each is logged with its reason, the relay retries and
#     stays alive.
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim; WK=$BUILD/cjrelay-worker
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

is_tls() { case $1 in stcp|https|grpcs) return 0 ;; esac; return 1; }

# start_sim NAME SCHEME [HOST] [ROUNDS]: the simulator listening on SCHEME://HOST:0; sets SIM, PORT
start_sim() {
    R=$W/$1; mkdir -p "$R"
    tls=; is_tls "$2" && tls="--tls-dir $K"
    # shellcheck disable=SC2086
    $S --listen "$2://${3:-127.0.0.1}:0" $tls --job-id J1 --rounds "${4:-2}" --model-size 16M --tensors 4 \
        --format numpy > "$R/sim.out" 2> "$R/sim.err" & SIM=$!
    PORT=$(sim_port "$R/sim.out")
}

# start_relay NAME URL [SECTION.KEY=VALUE ...]: a relay with one launched worker toward URL
# (with the test's client certificate when URL's scheme is a TLS one); sets RELAY
start_relay() {
    R=$W/$1; _url=$2; shift 2
    if is_tls "${_url%%:*}"; then
        set -- upstream.connection_security=mtls upstream.ca_file="$K/rootCA.pem" \
            upstream.cert_file="$K/client.crt" upstream.key_file="$K/client.key" "$@"
    fi
    relay_ini "$R/relay.ini" relay.on_end_run=wait upstream.url="$_url" "$@" \
        upstream.reconnect_min=0.1 upstream.reconnect_max=0.5 \
        workers.listen="unix:$R/w.sock" workers.command="$WK" workers.count=1 workers.shutdown_grace=2 \
        status.socket="$R/status.sock" log.level=debug
    $D -c "$R/relay.ini" > "$R/relay.log" 2>&1 & RELAY=$!
}

# stop_relay LOG: SIGTERM, then 30 s for the drain (its worker's staged stop, SHUTDOWN, SIGTERM,
# SIGKILL, is shutdown_grace 2 s apart: the default 10 s made it 20 s and more, past 30 s on a
# loaded machine under ASan); a relay still there fails the suite, with its log, and is killed (an unbounded wait here once ran into the suite's 300 s limit)
stop_relay() {
    kill -TERM "$RELAY" 2>/dev/null
    if ! wait_for 30 sh -c "! kill -0 $RELAY 2>/dev/null"; then
        fail "the relay (pid $RELAY) did not stop within 30 s of SIGTERM"; tail -15 "$1" 2>/dev/null | note
        kill -9 "$RELAY" 2>/dev/null
    fi
    wait "$RELAY" 2>/dev/null
}
stop_all() {
    [ -n "$RELAY" ] && stop_relay "${R:-$W}/relay.log"
    [ -n "$SIM" ] && { kill -TERM "$SIM" 2>/dev/null; wait "$SIM" 2>/dev/null; }
    RELAY=; SIM=
}

for sc in tcp stcp http https grpc grpcs; do
    start_sim "$sc" "$sc"
    if [ -z "$PORT" ]; then fail "$sc: the simulator listens"; note "$W/$sc/sim.err"; continue; fi
    start_relay "$sc" "$sc://127.0.0.1:$PORT"
    wait_for 120 sh -c "! kill -0 $SIM 2>/dev/null"
    check "$sc: 2 rounds through the relay verified" grep -q '^SIM OK rounds=2' "$W/$sc/sim.out" ||
        { tail -5 "$W/$sc/sim.err" | note; grep -iE 'error|warn' "$W/$sc/relay.log" | tail -5 | note; }
    check "$sc: show info names the url with its scheme" \
        sh -c "'$C' -s '$W/$sc/status.sock' show info | grep -q 'upstream_url.*$sc://127.0.0.1:$PORT'"
    # the server comes back on the same port: the relay, retrying with back-off, reconnects
    R=$W/$sc; tls=; is_tls "$sc" && tls="--tls-dir $K"
    wait_for 10 grep -q 'upstream lost' "$R/relay.log"
    # shellcheck disable=SC2086
    $S --listen "$sc://127.0.0.1:$PORT" $tls --job-id J1 --rounds 1 > "$R/sim2.out" 2> "$R/sim2.err" & SIM=$!
    wait_for 20 grep -q "upstream up (server at $sc://127.0.0.1:$PORT) after retrying" "$R/relay.log"
    check "$sc: the server restarted on its port; the relay reconnected" \
        grep -q "upstream up (server at $sc://127.0.0.1:$PORT) after retrying" "$R/relay.log"
    stop_all
done

# grpcs checks the server's name, https does not: both dial 127.0.0.2, which the
# server certificate does not name (it names server, localhost, 127.0.0.1, ::1).
start_sim name-grpcs grpcs 0.0.0.0 1
start_relay name-grpcs "grpcs://127.0.0.2:$PORT"
wait_for 15 grep -qiE 'IP address mismatch|hostname mismatch' "$W/name-grpcs/relay.log"
check "grpcs to a host the certificate does not name: refused, the log says the address does not match" \
    grep -qi 'certificate verify failed; server certificate: IP address mismatch' "$W/name-grpcs/relay.log"
check "grpcs: no round ran" sh -c "! grep -q '^ROUND' '$W/name-grpcs/sim.out'"
stop_all
start_sim name-grpcs2 grpcs 0.0.0.0 1
start_relay name-grpcs2 "grpcs://127.0.0.2:$PORT" upstream.tls_server_name=localhost
wait_for 60 sh -c "! kill -0 $SIM 2>/dev/null"
check "grpcs with tls_server_name = localhost (a name the certificate carries): the round verifies" \
    grep -q '^SIM OK rounds=1' "$W/name-grpcs2/sim.out"
stop_all
start_sim name-https https 0.0.0.0 1
start_relay name-https "https://127.0.0.2:$PORT"
wait_for 60 sh -c "! kill -0 $SIM 2>/dev/null"
check "https to a host the certificate does not name: accepted (FLARE's http client does not check)" \
    grep -q '^SIM OK rounds=1' "$W/name-https/sim.out"
stop_all

# The direct worker on https and grpcs: mutual TLS with --tls-dir, one task downloaded;
# without --tls-dir a usage error (exit 2) before any connection.
for sc in https grpcs; do
    start_sim "direct-$sc" "$sc" 127.0.0.1 1
    R=$W/direct-$sc
    timeout 60 "$WK" --direct "$sc://127.0.0.1:$PORT" --tls-dir "$K" --job-id J1 --raw > "$R/direct.out" 2> "$R/direct.err"; rc=$?
    check "$sc: cjrelay-worker --direct --tls-dir downloads the task from the server (exit 0)" \
        sh -c "[ $rc = 0 ] && grep -q '^DIRECT round=1 task=.* bytes=[1-9]' '$R/direct.out'" || { note "$R/direct.out"; tail -5 "$R/direct.err" | note; }
    timeout 10 "$WK" --direct "$sc://127.0.0.1:$PORT" --job-id J1 > "$R/notls.out" 2> "$R/notls.err"; rc=$?
    check "$sc: --direct without --tls-dir: refused (exit 2), the message names --tls-dir" \
        sh -c "[ $rc = 2 ] && grep -q '^cjrelay-worker: --direct $sc://127.0.0.1:$PORT: a TLS scheme needs --tls-dir DIR' '$R/notls.err'" ||
        head -2 "$R/notls.err" | note
    stop_all
done

# The wrong scheme for the server: each refusal names what came back.
start_sim wrong-grpc http 127.0.0.1 1
start_relay wrong-grpc "grpc://127.0.0.1:$PORT"
wait_for 15 grep -q 'does not speak HTTP/2' "$W/wrong-grpc/relay.log"
check "grpc:// to a WebSocket server: 'does not speak HTTP/2' with its first bytes" \
    grep -q 'does not speak HTTP/2 (first bytes "HTTP/1.1 400' "$W/wrong-grpc/relay.log"
check "the WebSocket server says what it was sent" grep -q 'not a GET upgrade: "PRI \* HTTP/2.0"' "$W/wrong-grpc/sim.err"
stop_all
start_sim wrong-http grpc 127.0.0.1 1
start_relay wrong-http "http://127.0.0.1:$PORT"
wait_for 15 grep -q 'WebSocket: the peer closed before the WebSocket was set up (it sent' "$W/wrong-http/relay.log"
check "http:// to a gRPC server: the relay says the upgrade was never answered, quoting what came back" \
    grep -q 'WebSocket: the peer closed before the WebSocket was set up (it sent' "$W/wrong-http/relay.log"
check "the gRPC server names the HTTP/1.1 request" grep -q 'bad client magic' "$W/wrong-http/sim.err"
check "the relay keeps retrying with back-off" \
    sh -c "[ \$(grep -c 'WebSocket: the peer closed' '$W/wrong-http/relay.log') -ge 2 ]"
stop_all

# TLS refusals on https and grpcs, as test_tls.sh checks them on stcp: each logged
# with OpenSSL's reason.  refused SCHEME NAME CA CERT KEY REGEX
refused() {
    start_sim "$2-$1" "$1" 127.0.0.1 1
    start_relay "$2-$1" "$1://127.0.0.1:$PORT"
    sed -i "s|^ca_file = .*|ca_file = $3|; s|^cert_file = .*|cert_file = $4|; s|^key_file = .*|key_file = $5|" "$W/$2-$1/relay.ini"
    stop_relay "$W/$2-$1/relay.log"
    $D -c "$W/$2-$1/relay.ini" > "$W/$2-$1/relay.log" 2>&1 & RELAY=$!
    wait_for 15 grep -Eq "$6" "$W/$2-$1/relay.log"
    check "$1, $2: refused, the relay log says /$6/" grep -Eq "$6" "$W/$2-$1/relay.log"
    stop_all
}
for sc in https grpcs; do
    refused $sc wrong-ca "$K/wrongCA.pem" "$K/client.crt" "$K/client.key" 'TLS handshake failed: .*certificate verify failed'
    refused $sc client-cert-from-other-ca "$K/rootCA.pem" "$K/wrong.crt" "$K/client.key" 'alert unknown ca'
    refused $sc expired-client-cert "$K/rootCA.pem" "$K/expired.crt" "$K/client.key" 'alert certificate expired'
done

# hostile KIND SCHEME REGEX [COUNT]: cjhostile serves COUNT (2) connections with KIND
H=$BUILD/tests/e2e/cjhostile
hostile() {
    R=$W/h-$1; mkdir -p "$R"
    $H serve 0 "$1" "${4:-2}" > "$R/serve.out" 2>&1 & SIM=$!
    wait_for 10 grep -q '^SERVE READY' "$R/serve.out"
    start_relay "h-$1" "$2://127.0.0.1:$(awk '/^SERVE READY/ {print $3}' "$R/serve.out")"
    wait_for 40 sh -c "[ \$(grep -c '^SERVE [0-9]' '$R/serve.out') -ge ${4:-2} ]"
    if grep -Eq "$3" "$R/relay.log"; then
        pass "hostile $2 server, $1: logged: $(grep -Eo "$3.*" "$R/relay.log" | head -1 | cut -c1-100)"
    else
        fail "hostile $2 server, $1: no log line /$3/"; grep -E 'upstream' "$R/relay.log" | tail -4 | note
    fi
    check "hostile $2 server, $1: the relay retried and is alive" \
        sh -c "kill -0 $RELAY && [ \$(grep -c '^SERVE [0-9]' '$R/serve.out') -ge ${4:-2} ]"
    stop_all
}
hostile ws-refuse http 'WebSocket: upgrade refused: "HTTP/1.1 403 Forbidden"'
hostile ws-badaccept http 'WebSocket: bad Sec-WebSocket-Accept "AAAA'
hostile ws-garbage http 'WebSocket: text message from the server'
hostile ws-oversized http 'WebSocket: WebSocket message over 2145386496 bytes'
hostile h2-goaway grpc 'gRPC: the server sent GOAWAY \(INTERNAL_ERROR: going away\)'
hostile h2-nowindow grpc "handshake not completed within 10 s \\(still waiting for the READY" 1
finish
