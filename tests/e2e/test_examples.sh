#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The example configurations in conf/examples/ work as shipped, once their site-specific
# values point at this test's machine: every file passes --check-config as it is written
# apart from paths, addresses and the trainer command, and each deployment runs a round
# against the simulator with the real binaries:
#   lab-tcp.ini            one job over plain TCP, the worker on the relay's Unix socket
#   stock-trainer-tcp.ini  the worker on a loopback TCP listener (port 0 here: the bootstrap's
#                          connect_url names the port taken)
#   spool.ini              spool mode over grpcs with mutual TLS (certificates made here)
#   site-mtls.ini          the site daemon; a job handed to it over https with the INI's mTLS
#                          defaults
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || { skip "openssl missing"; finish; }
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim; WK=$BUILD/cjrelay-worker
EX=$ROOT/conf/examples
W=$(mktemp -d); SIM=; RELAY=
cleanup() {
    for p in $SIM $RELAY; do kill -9 "$p" 2>/dev/null; done
    pkill -KILL -f "$W/" 2>/dev/null
    [ -n "$KEEP" ] && echo "# kept $W" || rm -rf "$W"
}
trap cleanup EXIT
sh "$ROOT/tests/unit/tls_certs.sh" "$W/c" || { fail "tls_certs.sh could not make the certificates"; finish; }
chmod 600 "$W"/c/*.key
mkdir -p "$W/run" "$W/lib"

# localize NAME [SECTION.KEY=VALUE ...]: $W/NAME.ini from the example, its machine-specific
# paths moved under $W and the given keys set (each must already be in the example)
localize() {
    _n=$1; shift
    sed -e "s|/run/cjrelay/|$W/run/$_n.|g" -e "s|/var/lib/cjrelay/|$W/lib/|g" \
        -e "s|/srv/flare/site-1/startup/|$W/c/|g" "$EX/$_n.ini" > "$W/$_n.ini"
    for _kv in "$@"; do
        _s=${_kv%%.*}; _k=${_kv#*.}; _k=${_k%%=*}; _v=${_kv#*=}
        awk -v s="[$_s]" -v k="$_k" -v v="$_v" '
            /^\[/ { in_s = ($0 == s) }
            in_s && $1 == k && $2 == "=" { print k " = " v; done = 1; next }
            { print }
            END { if (!done) exit 1 }' "$W/$_n.ini" > "$W/$_n.tmp" ||
            fail "$_n: no $_kv in the example to set"
        mv "$W/$_n.tmp" "$W/$_n.ini"
    done
    # spool_dir on tmpfs is refused unless allowed: this test's $W may be tmpfs
    if [ "$(stat -f -c %T "$W")" = tmpfs ]; then sed -i 's/^mode = spool$/mode = spool\nspool_allow_tmpfs = true/' "$W/$_n.ini"; fi
}
sim() { # sim SCHEME [ARGS...]: a one-round simulator; sets SIM, PORT
    _sc=$1; shift
    _tls=; case $_sc in stcp|https|grpcs) _tls="--tls-dir $W/c" ;; esac
    # a fresh file: the backgrounded shell may not have truncated the last one when it is read
    rm -f "$W/sim.out"
    # shellcheck disable=SC2086
    $S --listen "$_sc://127.0.0.1:0" $_tls --job-id "${JOB:-J1}" --rounds 1 --model-size 8M --tensors 2 "$@" \
        > "$W/sim.out" 2> "$W/sim.err" & SIM=$!
    PORT=$(sim_port "$W/sim.out") || { fail "the simulator ($_sc) did not start"; note "$W/sim.err"; }
}
reap() { wait_for 60 sh -c "! kill -0 $SIM 2>/dev/null"; kill -9 "$SIM" 2>/dev/null; wait "$SIM" 2>/dev/null; SIM=; }
relay_stop() { kill -TERM "$RELAY" 2>/dev/null; wait_for 10 sh -c "! kill -0 $RELAY 2>/dev/null"; kill -9 "$RELAY" 2>/dev/null; wait "$RELAY" 2>/dev/null; RELAY=; }

for f in "$EX"/*.ini; do
    n=$(basename "$f" .ini)
    localize "$n"
    out=$($D -c "$W/$n.ini" --check-config 2>&1); rc=$?
    check "$n.ini passes --check-config as written: $(printf '%s' "$out" | sed "s|$W|W|g" | tr '\n' ' ')" [ $rc -eq 0 ]
done

# single-job examples: one round each against the simulator
run_single() { # run_single NAME SCHEME [SECTION.KEY=VALUE ...]
    _n=$1; _sc=$2; shift 2
    sim "$_sc"
    localize "$_n" upstream.url="$_sc://127.0.0.1:$PORT" workers.command="$WK" "$@"
    $D -c "$W/$_n.ini" > "$W/$_n.log" 2>&1 & RELAY=$!
    reap
    check "$_n.ini: a round through the relay verified: $(tail -1 "$W/sim.out")" grep -q '^SIM OK rounds=1' "$W/sim.out"
}
run_single lab-tcp tcp
relay_stop
run_single stock-trainer-tcp tcp workers.listen=tcp://127.0.0.1:0
check "stock-trainer-tcp.ini: the worker came over loopback TCP" grep -q "listening on tcp://127.0.0.1:[1-9]" "$W/stock-trainer-tcp.log"
relay_stop
run_single spool grpcs
check "spool.ini: the task was spooled to disk first" grep -qi "spool" "$W/spool.log"
relay_stop

# the site daemon: a job handed to it uses the INI's mTLS defaults
JOB=J9 sim https
localize site-mtls
$D -c "$W/site-mtls.ini" > "$W/site-mtls.log" 2>&1 & RELAY=$!
wait_for 10 test -S "$W/run/site-mtls.status.sock"
r=$($C -s "$W/run/site-mtls.status.sock" job start "{\"job_id\": \"J9\", \"server_url\": \"https://127.0.0.1:$PORT\", \"worker\": {\"argv\": [\"$WK\"]}}")
check "site-mtls.ini: job start J9 over https: $r" [ "$r" = "OK job J9 started" ]
reap
check "site-mtls.ini: J9's round verified with the INI's client certificate: $(tail -1 "$W/sim.out")" grep -q '^SIM OK rounds=1' "$W/sim.out"
relay_stop
if [ "$_f" -gt 0 ]; then for l in "$W"/*.log "$W/sim.err"; do [ -f "$l" ] && { echo "# $l:"; tail -8 "$l" | note; }; done; fi
finish
