#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make demo: one job end to end on cjrelay's own simulator.
#   cjrelay-sim (the FL server) <- cjrelayd (site-1.J1) <- 2 x cjrelay-worker (launched by the relay)
# 3 rounds of a 256 MiB model whose tensors travel as download refs: each worker pulls
# them straight from the server through the relay's router, adds 1.0, and serves its
# result back; the relay never holds a tensor.
# SCHEME (tcp, stcp, http, https, grpc, grpcs; default tcp) is how the relay reaches the
# simulator: `make demo SCHEME=http`.  The TLS schemes use certificates made here with
# openssl (mutual TLS, as a provisioned FLARE site).
SCHEME=${SCHEME:-tcp}
ROUNDS=${DEMO_ROUNDS:-3}
MODEL=${DEMO_MODEL:-256M}
B=$(cd "$(dirname "$0")/.." && pwd)/build
W=$(mktemp -d /tmp/cjrelay-demo.XXXXXX)
SIM=; RELAY=
cleanup() {
    [ -n "$RELAY" ] && kill -TERM "$RELAY" 2>/dev/null
    [ -n "$SIM" ] && kill -TERM "$SIM" 2>/dev/null
    sleep 0.5
    [ -n "$RELAY" ] && kill -KILL "$RELAY" 2>/dev/null
    [ -n "$SIM" ] && kill -KILL "$SIM" 2>/dev/null
    pkill -KILL -f "$W/" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT INT TERM
kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }

echo "demo: $ROUNDS rounds, model $MODEL in 8 tensors, 2 workers, over $SCHEME, in $W"
TLS_DIR=; SECURITY=
case $SCHEME in
tcp|http|grpc) ;;
stcp|https|grpcs)
    sh "$(dirname "$0")/unit/tls_certs.sh" "$W/certs" || { echo "demo: cannot make certificates (openssl)"; exit 1; }
    TLS_DIR=$W/certs
    SECURITY="connection_security = mtls
ca_file = $W/certs/rootCA.pem
cert_file = $W/certs/client.crt
key_file = $W/certs/client.key" ;;
*) echo "demo: SCHEME must be tcp, stcp, http, https, grpc or grpcs, not '$SCHEME'"; exit 2 ;;
esac
"$B/cjrelay-sim" --listen "$SCHEME://127.0.0.1:0" ${TLS_DIR:+--tls-dir "$TLS_DIR"} --job-id J1 --rounds "$ROUNDS" --model-size "$MODEL" --tensors 8 \
    --format numpy --download-log "$W/downloads.log" > "$W/sim.out" 2> "$W/sim.log" & SIM=$!
i=0; while ! grep -q '^SIM READY' "$W/sim.out" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "demo: the simulator did not start"; cat "$W/sim.log"; exit 1; }
    sleep 0.1
done
PORT=$(awk '/^SIM READY/ {print $3}' "$W/sim.out")

cat > "$W/relay.ini" <<EOF
[relay]
site = site-1
job_id = J1
on_end_run = wait
[upstream]
url = $SCHEME://127.0.0.1:$PORT
project_name = example_project
$SECURITY
[workers]
listen = unix:$W/workers.sock
command = $B/cjrelay-worker
count = 2
[status]
socket = $W/status.sock
EOF
"$B/cjrelayd" -c "$W/relay.ini" > "$W/relay.log" 2>&1 & RELAY=$!
sleep 1
IDLE=$(kb "$RELAY" VmRSS)

wait "$SIM"; rc=$?; SIM=
grep '^ROUND' "$W/sim.out"
tail -1 "$W/sim.out"
echo
"$B/cjrelayctl" -s "$W/status.sock" show stats
echo "downloads served by the simulator (ref, downloader, bytes):"
sed 's/^/  /' "$W/downloads.log" 2>/dev/null | head -20
PEAK=$(kb "$RELAY" VmHWM)
echo "relay memory: idle RSS ${IDLE:-?} KiB, peak RSS (VmHWM) ${PEAK:-?} KiB, model $MODEL per round"
"$B/cjrelayctl" -s "$W/status.sock" shutdown >/dev/null
wait "$RELAY"; RELAY=
if [ $rc -ne 0 ]; then
    echo "demo: FAILED (simulator exit $rc); last relay log lines:"
    tail -30 "$W/relay.log"
    exit 1
fi
echo "demo: OK"
