#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# [metrics] listen: the daemon's Prometheus endpoint, scraped by a real Prometheus server.
#   cjrelay-sim (server.J1) <- cjrelayd (site-1, [metrics] listen = 127.0.0.1:0) <- a cjrelay-worker
# (a) port 0: the port the kernel gave is logged and in show info
# (b) after a job ran: GET /metrics is show prometheus byte for byte, with Prometheus's
#     Content-Type, and promtool check metrics accepts it; HEAD too; another path 404,
#     another method 405
# (c) a real Prometheus server scrapes it every second: the target is up and a cjrelay_
#     counter has the job's value; the scrapes write nothing to the info log
# (d) reload with another address: logged as needing a restart, the running endpoint stays
# (e) the single-job form serves its job; an address in use stops the start (exit 2) with
#     the key and the address named
# (f) out of descriptors: a failed accept pauses accepting (a warning a second, no spinning),
#     and the endpoint serves again once connections close
# Needs promtool and prometheus (Debian's prometheus, make deps): missing, they fail the
# suite, or skip with CJ_ALLOW_MISSING_TOOLS=1.
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; S=$BUILD/cjrelay-sim
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
W=$(mktemp -d); PIDS=
cleanup() {
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $PIDS; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
CTL="$C -s $W/status.sock"

# need TOOL WHAT: 0 when TOOL is on the PATH; else WHAT fails (or skips, with CJ_ALLOW_MISSING_TOOLS=1)
need() {
    command -v "$1" >/dev/null && return 0
    if [ "${CJ_ALLOW_MISSING_TOOLS:-0}" = 1 ]; then skip "$2: $1 not installed"
    else fail "$2: $1 not installed (make deps installs Debian's prometheus; CJ_ALLOW_MISSING_TOOLS=1 skips)"; fi
    return 1
}
# pyhttp METHOD URL NAME [HEADER-BYTES]: http without curl (and with an X-Big header of that size)
pyhttp() {
    "$PY" - "$@" "$W/$3" <<'EOF'
import http.client, sys, urllib.parse
method, url, name = sys.argv[1:4]
big, out = (int(sys.argv[4]), sys.argv[5]) if len(sys.argv) > 5 else (0, sys.argv[4])
u = urllib.parse.urlsplit(url)
try:
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    c.putrequest(method, u.path or "/")
    if big:
        c.putheader("X-Big", "x" * big)
    c.endheaders()
    r = c.getresponse()
    body = r.read()
except (OSError, http.client.HTTPException) as e:
    print("none (%s)" % type(e).__name__, end="")
    sys.exit(0)
with open(out + ".h.raw", "w") as f:
    f.write("HTTP/1.1 %d %s\r\n" % (r.status, r.reason) + "".join("%s: %s\r\n" % h for h in r.getheaders()))
with open(out + ".b", "wb") as f:
    f.write(body)
print(r.status, end="")
EOF
}
# http METHOD URL NAME: prints the status code; the headers go to $W/NAME.h (CRs removed), the body to
# $W/NAME.b; with curl when there is one
http() {
    if command -v curl >/dev/null; then
        _hm="-X $1"; [ "$1" = HEAD ] && _hm=-I
        curl -s -m 5 $_hm -D "$W/$3.h.raw" -o "$W/$3.b" -w '%{http_code}' "$2"
    else
        pyhttp "$@"
    fi
    tr -d '\r' < "$W/$3.h.raw" > "$W/$3.h" 2>/dev/null
}
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- (a) the site daemon, its endpoint on a port the kernel picks ------------------------------
relay_ini "$W/site.ini" relay.job_id= relay.job_linger=60 workers.command="$BUILD/cjrelay-worker" \
    workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=2 \
    status.socket="$W/status.sock" log.level=info metrics.listen=127.0.0.1:0
$D -c "$W/site.ini" > "$W/relay.log" 2>&1 & RELAY=$!; PIDS="$PIDS $RELAY"
wait_for 10 test -S "$W/status.sock"
URL=$(sed -n 's|.* info: metrics: listening on \(http://127\.0\.0\.1:[1-9][0-9]*/metrics\)$|\1|p' "$W/relay.log")
check "(a) port 0 became the kernel's port, logged: $URL" [ -n "$URL" ]
check "(a) show info gives the same URL" sh -c "$CTL show info | grep -qx 'metrics: $URL'"
MPORT=${URL#http://127.0.0.1:}; MPORT=${MPORT%/metrics}

# ---- (b) a job through it, then GET /metrics against show prometheus ----------------------------
$S --listen tcp://127.0.0.1:0 --job-id J1 --rounds 2 --model-size 1M --tensors 2 > "$W/sim.out" 2> "$W/sim.log" & SIM=$!
PIDS="$PIDS $SIM"
P=$(sim_port "$W/sim.out")
a=$($CTL job start "{\"job_id\": \"J1\", \"server_url\": \"tcp://127.0.0.1:$P\"}")
check "(b) job start J1: $a" [ "$a" = "OK job J1 started" ]
out=$(timeout 30 $CTL job wait J1 | tr '\n' ' ')
wait_for 10 grep -q '^SIM OK\|^SIM FAIL' "$W/sim.out"
check "(b) the job ran: $out $(tail -1 "$W/sim.out")" sh -c "printf '%s' '$out' | grep -q 'outcome: 0' && grep -q '^SIM OK rounds=2' $W/sim.out"
code=$(http GET "$URL" m1)
$CTL show prometheus > "$W/show.txt"
check "(b) GET /metrics: 200 ($code)" [ "$code" = 200 ]
check "(b) Content-Type: text/plain; version=0.0.4; charset=utf-8" \
    grep -qix 'content-type: text/plain; version=0.0.4; charset=utf-8' "$W/m1.h"
check "(b) the body is show prometheus's, byte for byte" cmp -s "$W/m1.b" "$W/show.txt"
check "(b) ... with the job's counters: $(grep '^cjrelay_tasks_in_total' "$W/m1.b")" \
    grep -qx 'cjrelay_tasks_in_total{job_id="J1"} 2' "$W/m1.b"
check "(b) ... and the job's FLARE generation: $(grep '^cjrelay_job_info' "$W/m1.b")" \
    grep -qx 'cjrelay_job_info{job_id="J1",flare="2.9+"} 1' "$W/m1.b"
if need promtool "(b) promtool check metrics"; then
    check "(b) promtool check metrics accepts it ($(promtool check metrics < "$W/m1.b" 2>&1 | head -2 | tr '\n' ' '))" \
        sh -c "promtool check metrics < $W/m1.b"
fi
code=$(http HEAD "$URL" head)
check "(b) HEAD /metrics: 200 ($code), no body" sh -c "[ $code = 200 ] && ! grep -q '^# HELP' $W/head.b"
code=$(http GET "http://127.0.0.1:$MPORT/" root)
check "(b) GET /: 404 ($code)" [ "$code" = 404 ]
code=$(http GET "http://127.0.0.1:$MPORT/metrics/x" sub)
check "(b) GET /metrics/x: 404 ($code)" [ "$code" = 404 ]
code=$(http POST "$URL" post)
check "(b) POST /metrics: 405 ($code), Allow: GET, HEAD" sh -c "[ $code = 405 ] && grep -qix 'allow: GET, HEAD' $W/post.h"
code=$(http DELETE "$URL" del)
check "(b) DELETE /metrics: 405 ($code)" [ "$code" = 405 ]
code=$(pyhttp GET "$URL" big 20000)
code2=$(pyhttp GET "$URL" small)
check "(b) 20 KB of headers refused ($code), the daemon serves on ($code2, without curl)" \
    sh -c "[ '$code' != 200 ] && [ '$code2' = 200 ] && cmp -s $W/small.b $W/m1.b"

# ---- (c) a real Prometheus server scrapes it ------------------------------------------------------
if need prometheus "(c) a Prometheus server scrapes /metrics"; then
    PP=$(free_port)
    cat > "$W/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: cjrelay
    static_configs:
      - targets: ['127.0.0.1:$MPORT']
EOF
    prometheus --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/tsdb" \
        --web.listen-address="127.0.0.1:$PP" > "$W/prometheus.log" 2>&1 & PROM=$!
    PIDS="$PIDS $PROM"
    "$PY" - "http://127.0.0.1:$PP" > "$W/prom.tap" 2> "$W/prom.err" <<'EOF'
# Polls the server's API (30 s at most): the target's health, then up and a cjrelay_ counter.
import json, sys, time, urllib.parse, urllib.request
api = sys.argv[1] + "/api/v1/"
def get(path):
    try:
        with urllib.request.urlopen(api + path, timeout=2) as r:
            return json.load(r)
    except Exception as e:
        return {"error": str(e)}
def query(q):
    d = get("query?query=" + urllib.parse.quote(q))
    res = d.get("data", {}).get("result", []) if d.get("status") == "success" else []
    return res[0] if res else None
deadline = time.time() + 30
target = up = tasks = None
while time.time() < deadline:
    t = get("targets").get("data", {}).get("activeTargets", [])
    target = next((x for x in t if x.get("labels", {}).get("job") == "cjrelay"), None)
    up = query('up{job="cjrelay"}')
    tasks = query('cjrelay_tasks_in_total{job="cjrelay"}')
    if target and target.get("health") == "up" and up and tasks:
        break
    time.sleep(0.5)
def ok(cond, what):
    print(("ok - " if cond else "not ok - ") + what)
ok(target is not None and target.get("health") == "up",
   "the target is up (%s)" % (target and {k: target.get(k) for k in ("health", "lastError", "scrapeUrl")}))
ok(up is not None and up["value"][1] == "1", "up{job=\"cjrelay\"} is 1 (%s)" % (up and up["value"]))
ok(tasks is not None and tasks["value"][1] == "2" and tasks["metric"].get("job_id") == "J1",
   "cjrelay_tasks_in_total is the job's 2, labelled job_id=J1 beside the scrape's job label (%s)" % tasks)
EOF
    tap_results prometheus $? "$W/prom.tap" "$W/prometheus.log" "the API poller"
    [ -s "$W/prom.err" ] && note "$W/prom.err"
    kill -TERM "$PROM" 2>/dev/null; wait "$PROM" 2>/dev/null
fi
n=$(grep -v ' info: metrics: listening on ' "$W/relay.log" | grep -c ' metrics: ')
check "(c) the scrapes wrote nothing to the info log (lines: $n)" [ "$n" -eq 0 ]
[ "$n" -eq 0 ] || grep -v ' info: metrics: listening on ' "$W/relay.log" | grep ' metrics: ' | note

# ---- (d) reload with another address --------------------------------------------------------------
sed -i 's/^listen = 127.0.0.1:0$/listen = 127.0.0.1:1/' "$W/site.ini"
r=$($CTL reload)
check "(d) reload: $r" [ "$r" = OK ]
check "(d) a changed [metrics] listen is logged as needing a restart" \
    grep -q 'reload: metrics.listen changed but needs a restart; keeping the running value' "$W/relay.log"
code=$(http GET "$URL" m2)
check "(d) the running endpoint serves on ($code)" [ "$code" = 200 ]

# ---- (e) the single-job form; an address in use ----------------------------------------------------
relay_ini "$W/ini.ini" relay.job_id=J2 upstream.url=tcp://127.0.0.1:1 workers.listen="unix:$W/j2.sock" \
    status.socket="$W/j2status.sock" metrics.listen="127.0.0.1:0"
$D -c "$W/ini.ini" > "$W/j2.log" 2>&1 & J2=$!; PIDS="$PIDS $J2"
wait_for 10 test -S "$W/j2status.sock"
U2=$($C -s "$W/j2status.sock" show info | sed -n 's/^metrics: //p')
code=$(http GET "$U2" j2)
check "(e) the single-job form serves its job ($code, $U2)" sh -c "[ $code = 200 ] && grep -q '^cjrelay_tasks_in_total{job_id=\"J2\"} 0$' $W/j2.b"
kill -TERM "$J2"; wait "$J2" 2>/dev/null
relay_ini "$W/busy.ini" relay.job_id=J3 workers.listen="unix:$W/j3.sock" status.socket="$W/j3status.sock" \
    metrics.listen="127.0.0.1:$MPORT"
$D -c "$W/busy.ini" > "$W/busy.log" 2>&1; rc=$?
check "(e) the address in use stops the start: exit $rc, $(grep -o 'cannot start: .*' "$W/busy.log")" \
    sh -c "[ $rc -eq 2 ] && grep -q 'cannot start: \[metrics\] listen = 127.0.0.1:$MPORT: cannot listen on it: Address already in use' $W/busy.log"
check "(e) ... before its job started" sh -c "! grep -q 'started as' $W/busy.log && [ ! -e $W/j3status.sock ]"

# ---- (f) out of descriptors --------------------------------------------------------------------------
relay_ini "$W/fd.ini" relay.job_id= status.socket="$W/fdstatus.sock" metrics.listen="127.0.0.1:0"
(ulimit -n 24; exec $D -c "$W/fd.ini") > "$W/fd.log" 2>&1 & FD=$!; PIDS="$PIDS $FD"
wait_for 10 test -S "$W/fdstatus.sock"
U3=$($C -s "$W/fdstatus.sock" show info | sed -n 's/^metrics: //p')
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
t0=$(ticks "$FD")
# 40 connections held for 2 s against a daemon allowed 24 descriptors
hostport=${U3#http://}; hold_conns "${hostport%/metrics}" 40 2
t1=$(ticks "$FD")
n=$(grep -c 'metrics: accept failed: Too many open files; not accepting for 1 s' "$W/fd.log")
check "(f) out of descriptors: accepting paused, a warning a second ($n in 2 s)" sh -c "[ $n -ge 1 ] && [ $n -le 4 ]"
check "(f) ... no spinning ($((t1 - t0)) ticks of CPU while held)" [ $((t1 - t0)) -lt 50 ]
sleep 1.2   # the pause under way ends
code=$(http GET "$U3" fd)
check "(f) ... and serving again once they closed ($code)" [ "$code" = 200 ]
kill -TERM "$FD"; wait "$FD" 2>/dev/null

kill -TERM "$RELAY"; wait "$RELAY"; rc=$?
check "(a) the daemon drains and exits 0 ($rc)" [ "$rc" -eq 0 ]
PIDS=
finish
