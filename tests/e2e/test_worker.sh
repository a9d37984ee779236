#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cjrelay-worker without a relay: the bootstrap file is refused
# with a clear message and exit 2 when absent or invalid; a dead connect_url is
# retried for the connect window, then exit 3; a vanished relay pid ends the
# worker (exit 4); SIGTERM ends it (exit 1); the launch token is never printed.
# The session and task loop with the real relay are tested by test_fl.sh.
. "$(dirname "$0")/lib.sh"
WK=$BUILD/cjrelay-worker
W=$(mktemp -d); BG=; SLEEPER=
cleanup() {
    [ -n "$BG" ] && kill "$BG" 2>/dev/null
    [ -n "$SLEEPER" ] && kill "$SLEEPER" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
unset NVFLARE_CLIENT_API_BOOTSTRAP CLIENT_API_TYPE
TOKEN=tok-ZZ9plural-zalpha-sekrit-0123456789abcdefg   # 43 characters, grepped for below

# bootstrap FILE [key=json-value ...]: a valid bootstrap with the given keys replaced
# (value "DELETE" removes the key).
bootstrap() {
    f=$1; shift
    url="unix:$W/dead.sock"; pid=$$; tok="\"$TOKEN\""; mode='"external_process"'; schema=1
    fq='"site-1.J1"'; tfq='"site-1.J1.client_api_trainer_1"'
    for kv in "$@"; do
        k=${kv%%=*}; v=${kv#*=}
        case $k in
        connect_url) url=$v ;; cj_pid) pid=$v ;; launch_token) tok=$v ;; execution_mode) mode=$v ;;
        schema_version) schema=$v ;; cj_fqcn) fq=$v ;; trainer_fqcn) tfq=$v ;;
        esac
    done
    {
        printf '{'
        [ "$schema" = DELETE ] || printf '"schema_version": %s, ' "$schema"
        printf '"execution_mode": %s, "connect_url": "%s", "cj_fqcn": %s, "cj_pid": %s, ' "$mode" "$url" "$fq" "$pid"
        printf '"trainer_fqcn": %s, "launch_token": %s, "job_id": "J1", "site_name": "site-1", ' "$tfq" "$tok"
        printf '"secure_mode": false, "task_exchange": {"launch_once": true}, "memory_gc_rounds": 0}\n'
    } > "$f"
    chmod 600 "$f"
}

# expect NAME RC REGEX command...: exit status RC and a line matching REGEX (stdout+stderr).
expect() {
    name=$1; want=$2; re=$3; shift 3
    "$@" > "$W/out" 2>&1; rc=$?
    if [ "$rc" -eq "$want" ] && grep -Eq "$re" "$W/out"; then pass "$name"
    else fail "$name: rc=$rc (want $want) out=$(head -c 600 "$W/out")"; fi
    cat "$W/out" >> "$W/all.out"
}

# A 30 s default-window run goes on in the background while the rest runs.
bootstrap "$W/slow.json"
t0=$(date +%s)
( NVFLARE_CLIENT_API_BOOTSTRAP=$W/slow.json "$WK" > "$W/slow.out" 2>&1; echo $? > "$W/slow.rc"; date +%s > "$W/slow.t1" ) &
BG=$!

# ---- command line and bootstrap -------------------------------------------------
expect "--version" 0 "^cjrelay-worker [0-9]" "$WK" --version
expect "--help names the exit codes" 0 "3 no session" "$WK" --help
expect "unknown option: exit 2" 2 "unknown option" "$WK" --frobnicate 1
expect "no bootstrap at all: exit 2, says how to give one" 2 \
    "no bootstrap file: pass --bootstrap FILE or set NVFLARE_CLIENT_API_BOOTSTRAP" "$WK"
expect "bootstrap file missing: exit 2" 2 "bootstrap file $W/none.json refused: .*No such file" \
    "$WK" --bootstrap "$W/none.json"
printf 'not json\n' > "$W/garbage.json"
expect "bootstrap not JSON: exit 2" 2 "bootstrap file .*garbage.json refused" "$WK" --bootstrap "$W/garbage.json"
bootstrap "$W/noschema.json" schema_version=DELETE
expect "bootstrap without schema_version: exit 2" 2 "refused: .*schema_version" \
    env NVFLARE_CLIENT_API_BOOTSTRAP="$W/noschema.json" "$WK"
bootstrap "$W/schema2.json" schema_version=2
expect "bootstrap schema_version 2: exit 2" 2 "refused: .*schema_version" "$WK" --bootstrap "$W/schema2.json"
bootstrap "$W/mode.json" 'execution_mode="attach"'
expect "bootstrap execution_mode attach: exit 2" 2 "refused: .*execution_mode" "$WK" --bootstrap "$W/mode.json"
bootstrap "$W/notoken.json" 'launch_token=""'
expect "bootstrap with an empty launch_token: exit 2" 2 "refused: .*launch_token" "$WK" --bootstrap "$W/notoken.json"
bootstrap "$W/nofqcn.json" 'cj_fqcn=""'
expect "bootstrap with an empty cj_fqcn: exit 2" 2 "refused: .*cj_fqcn" "$WK" --bootstrap "$W/nofqcn.json"
bootstrap "$W/badfqcn.json" 'trainer_fqcn="site-1..x"'
expect "bootstrap with an invalid trainer_fqcn: exit 2" 2 "refused: trainer_fqcn is not a valid FQCN" \
    "$WK" --bootstrap "$W/badfqcn.json"
bootstrap "$W/stcp.json" connect_url=stcp://127.0.0.1:1
expect "bootstrap connect_url stcp://: exit 2" 2 "refused: connect_url: .*unix:PATH or tcp://" \
    "$WK" --bootstrap "$W/stcp.json"
bootstrap "$W/ok.json"
expect "CLIENT_API_TYPE other than CELL_API: exit 2" 2 "CLIENT_API_TYPE is 'EX_PROCESS_API', not CELL_API" \
    env CLIENT_API_TYPE=EX_PROCESS_API "$WK" --bootstrap "$W/ok.json"
expect "--bootstrap wins over the environment" 2 "bootstrap file $W/none.json refused" \
    env NVFLARE_CLIENT_API_BOOTSTRAP="$W/ok.json" "$WK" --bootstrap "$W/none.json"

# ---- an unreachable relay ------------------------------------------------------------
s=$(date +%s)
expect "dead unix socket: retried, exit 3 after the connect window" 3 \
    "no session with the relay site-1.J1 at unix:$W/dead.sock within 3 s: .*connect" \
    env CLIENT_API_TYPE=CELL_API "$WK" --bootstrap "$W/ok.json" --connect-window 3
e=$(($(date +%s) - s))
if [ $e -ge 2 ] && [ $e -le 6 ]; then pass "the 3 s window took ${e} s"; else fail "the 3 s window took ${e} s"; fi
PORT=$("$BUILD/tests/e2e/cjpeer" freeport 2>/dev/null || echo 1)
bootstrap "$W/tcp.json" connect_url=tcp://127.0.0.1:$PORT
expect "dead tcp port: exit 3" 3 "no session with the relay .* at tcp://127.0.0.1:$PORT within 2 s" \
    "$WK" --bootstrap "$W/tcp.json" --connect-window 2
bootstrap "$W/localhost.json" connect_url=tcp://localhost:$PORT
expect "tcp://localhost (what NVFlare writes) is accepted" 3 "no session with the relay .* at tcp://localhost:$PORT" \
    "$WK" --bootstrap "$W/localhost.json" --connect-window 1

# ---- the relay's pid, signals --------------------------------------------------------------
sleep 2 & SLEEPER=$!
bootstrap "$W/pid.json" cj_pid=$SLEEPER
s=$(date +%s)
expect "relay pid gone: exit 4" 4 "the relay process $SLEEPER is gone" \
    "$WK" --bootstrap "$W/pid.json" --connect-window 20
e=$(($(date +%s) - s)); SLEEPER=
if [ $e -le 5 ]; then pass "noticed the relay pid gone within ${e} s"; else fail "relay pid gone noticed after ${e} s"; fi
"$WK" --bootstrap "$W/ok.json" --connect-window 20 > "$W/term.out" 2>&1 &
p=$!; sleep 1; kill -TERM $p; wait $p; rc=$?
if [ $rc -eq 1 ] && grep -q "signal SIGTERM received; exiting with status 1" "$W/term.out"; then pass "SIGTERM: exit 1"
else fail "SIGTERM: rc=$rc $(cat "$W/term.out")"; fi
cat "$W/term.out" >> "$W/all.out"

# ---- the default window (30 s, the stock trainer's) -----------------------------------------
wait $BG; BG=
rc=$(cat "$W/slow.rc"); e=$(($(cat "$W/slow.t1") - t0))
if [ "$rc" -eq 3 ] && [ $e -ge 29 ] && [ $e -le 35 ] && grep -q "within 30 s" "$W/slow.out"; then
    pass "default connect window: exit 3 after ${e} s"
else fail "default connect window: rc=$rc after ${e} s: $(cat "$W/slow.out")"; fi
cat "$W/slow.out" >> "$W/all.out"

if grep -q "$TOKEN" "$W/all.out"; then fail "the launch token appears in the output"
else pass "the launch token never appears in the output"; fi
finish
