#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A job's TLS files handed over as open files: the site daemon runs as a service account
# (uid 4242, as the packaged unit runs it as cjrelay) that cannot read the startup kit's key
# (0600, owned by the FLARE account, uid 4244 here); the client parent, which can, opens the
# kit's files and passes them with `job start` (cjrelayctl --pass, SCM_RIGHTS on the status
# socket):
# (a) the same job naming the key by its path is refused: the daemon cannot read it
# (b) with tls_fds the job connects over mutual TLS (the simulator requires the client
#     certificate) and its round verifies; show config job names the files fd:<path>; no
#     descriptor of the kit's files is left open in the daemon
# (c) refused lines leak nothing: open files with a command that takes none, with a
#     malformed description, too few or one too many for what tls_fds names, a character
#     device, a key that does not match, more than three on one line, from a read-only
#     client, with a line never finished: each is answered (or the client dropped) and the
#     daemon's descriptor count is the same afterwards
# (d) the client parent as the FLARE account itself (not root): a member of [status]
#     admin_group (4243) may start the job with the kit's files; without the group it is
#     read-only (ERR 403)
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { skip "needs root to start the daemon as another uid"; finish; }
command -v setpriv >/dev/null || { skip "setpriv missing"; finish; }
command -v openssl >/dev/null || { skip "openssl missing"; finish; }
SVC=4242; FLARE=4244; ADMINS=4243
W=$(mktemp -d /tmp/cjrelay-fdpass.XXXXXX); chmod 755 "$W"; PID=; SIM=
cleanup() {
    for p in $PID $SIM; do kill -9 "$p" 2>/dev/null; done
    pkill -KILL -f "$W/" 2>/dev/null
    [ -n "$KEEP" ] && echo "# kept $W" || rm -rf "$W"
}
trap cleanup EXIT
for b in cjrelayd cjrelayctl cjrelay-worker; do cp "$BUILD/$b" "$W/$b"; chmod 755 "$W/$b"; done
D=$W/cjrelayd; C=$W/cjrelayctl; S=$BUILD/cjrelay-sim
[ -n "${CJ_SAN_LOG:-}" ] && chmod 1777 "$CJ_SAN_LOG"
# The kit as provisioning leaves it: certificates readable, the key owner-only (root's here).
K=$W/kit
sh "$ROOT/tests/unit/tls_certs.sh" "$K" || { fail "tls_certs.sh could not make the certificates"; finish; }
chmod 755 "$K"; chmod 644 "$K"/*.pem "$K"/*.crt; chmod 600 "$K"/*.key; chown "$FLARE:$FLARE" "$K"/*.key
mkdir -p "$W/run" && chown "$SVC:$SVC" "$W/run"
ctl() { $C -s "$W/run/status.sock" "$@"; }
nfd() { ls "/proc/$PID/fd" 2>/dev/null | wc -l; }

relay_ini "$W/site.ini" relay.job_id= relay.max_jobs=4 workers.command="$W/cjrelay-worker" \
    workers.heartbeat_interval=1 workers.heartbeat_timeout=5 workers.shutdown_grace=1 \
    status.socket="$W/run/status.sock" status.socket_mode=0666 status.admin_group=$ADMINS log.level=info
setpriv --reuid=$SVC --regid=$SVC --clear-groups "$D" -c "$W/site.ini" > "$W/relay.log" 2>&1 & PID=$!
wait_for 10 test -S "$W/run/status.sock"
check "the daemon runs as uid $SVC" sh -c "grep -q '^Uid:[[:space:]]*$SVC[[:space:]]' /proc/$PID/status"
check "... which cannot read the kit's key" sh -c "! setpriv --reuid=$SVC --regid=$SVC --clear-groups cat $K/client.key 2>/dev/null"

$S --listen "stcp://127.0.0.1:0" --tls-dir "$K" --job-id JF --rounds 1 --model-size 4M --tensors 2 \
    > "$W/sim.out" 2> "$W/sim.err" & SIM=$!
PORT=$(sim_port "$W/sim.out") || { fail "the simulator did not start"; note "$W/sim.err"; finish; }
job() { # job ID TLS: a description over stcp with mutual TLS; TLS is its TLS keys
    printf '{"job_id": "%s", "server_url": "stcp://127.0.0.1:%s", "connection_security": "mtls", %s, "worker": {"argv": ["%s"]}}' \
        "$1" "$PORT" "$2" "$W/cjrelay-worker"
}
FDS='"tls_fds": {"ca_file": 0, "cert_file": 1, "key_file": 2}'
PASS="--pass $K/rootCA.pem --pass $K/client.crt --pass $K/client.key"

# (a) by path: the service account cannot open the key
r=$(ctl job start "$(job JP "\"ca_file\": \"$K/rootCA.pem\", \"cert_file\": \"$K/client.crt\", \"key_file\": \"$K/client.key\"")")
check "(a) job start naming the key by its path: $r" \
    sh -c "[ \"\$1\" = \"ERR 400 key_file: cannot read $K/client.key: Permission denied\" ]" - "$r"

# (c) refused lines leak no descriptor
before=$(nfd)
refused() { # refused NAME PATTERN ANSWER
    check "(c) $1: $3" sh -c "printf '%s\n' \"\$1\" | grep -q \"\$2\"" - "$3" "$2"
}
refused "open files with a command that takes none" "^ERR 400 open files came with 'show', which takes none" \
    "$(ctl --pass "$K/rootCA.pem" show info)"
refused "a malformed description" "^ERR 400 description: " "$(ctl $PASS job start '{"job_id": "JX",')"
refused "tls_fds names a file not passed" "^ERR 400 tls_fds.key_file: open file 2 was not passed (the line brought 2)" \
    "$(ctl --pass "$K/rootCA.pem" --pass "$K/client.crt" job start "$(job JX "$FDS")")"
refused "a file passed that tls_fds does not name" \
    "^ERR 400 tls_fds: open file 2 came with the line and the description does not name it" \
    "$(ctl $PASS job start "$(job JX '"tls_fds": {"ca_file": 0, "cert_file": 1}, "key_file": "/nonexistent.key"')")"
refused "a path and a descriptor for one file" "^ERR 400 tls_fds.key_file: key_file is given as a path too" \
    "$(ctl $PASS job start "$(job JX "$FDS, \"key_file\": \"$K/client.key\"")")"
refused "a character device" "^ERR 400 tls_fds.key_file: fd:/dev/null is a character device, not a regular file" \
    "$(ctl --pass "$K/rootCA.pem" --pass "$K/client.crt" --pass /dev/null job start "$(job JX "$FDS")")"
refused "a key that does not match the certificate" \
    "^ERR 400 key_file: the key in fd:$K/server.key does not match the certificate in fd:$K/client.crt" \
    "$(ctl --pass "$K/rootCA.pem" --pass "$K/client.crt" --pass "$K/server.key" job start "$(job JX "$FDS")")"
refused "a read-only client" "^ERR 403 " \
    "$(setpriv --reuid=65534 --regid=65534 --clear-groups $C -s "$W/run/status.sock" --pass "$K/rootCA.pem" --pass "$K/client.crt" job start "$(job JX '"tls_fds": {"ca_file": 0, "cert_file": 1}')")"
# four files on one line, then a line never finished (its client goes away)
python3 - "$W/run/status.sock" "$K/rootCA.pem" > "$W/raw.out" 2>&1 <<'EOF'
import os, socket, sys
path, f = sys.argv[1], sys.argv[2]
fds = [os.open(f, os.O_RDONLY) for _ in range(4)]
with socket.socket(socket.AF_UNIX) as s:
    s.settimeout(10)
    s.connect(path)
    socket.send_fds(s, [b'job start {"job_id": "JX"}\n'], fds)
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    print("four:", data.decode().strip())
with socket.socket(socket.AF_UNIX) as s:
    s.connect(path)
    socket.send_fds(s, [b'job start {"job_id": "JY", "tls_fds": {"ca_file": 0}'], fds[:1])
print("unfinished: sent")
EOF
refused "four open files on one line (the connection closed after the answer)" \
    "^four: ERR 400 more than 3 open files with one command$" "$(grep "^four:" "$W/raw.out")"
wait_for 5 sh -c "[ \$(ls /proc/$PID/fd | wc -l) -le $before ]"
after=$(nfd)
check "(c) the daemon's open descriptors: $before before the refused lines, $after after" [ "$after" -eq "$before" ]
check "(c) none of them is a kit file" sh -c "! ls -l /proc/$PID/fd | grep -q '$K/'"

# (b) by descriptor: the job connects over mutual TLS
r=$(ctl $PASS job start "$(job JF "$FDS")")
check "(b) job start JF with its TLS files as open files: $r" [ "$r" = "OK job JF started" ]
check "(b) show config job JF names the key fd:<its path>" \
    sh -c "ctl() { $C -s $W/run/status.sock \"\$@\"; }; ctl show config job JF | grep -q '^upstream.key_file  *fd:$K/client.key '"
check "(b) ... and the certificate and CA the same way" \
    sh -c "$C -s $W/run/status.sock show config job JF | grep -q '^upstream.cert_file  *fd:$K/client.crt ' && $C -s $W/run/status.sock show config job JF | grep -q '^upstream.ca_file  *fd:$K/rootCA.pem '"
check "(b) the daemon keeps no descriptor of the kit's files" sh -c "! ls -l /proc/$PID/fd | grep -q '$K/'"
wait_for 60 sh -c "grep -q '^SIM OK\|^SIM FAIL' $W/sim.out"
check "(b) JF's round verified through the relay over mutual TLS: $(tail -1 "$W/sim.out")" grep -q '^SIM OK rounds=1' "$W/sim.out"
check "(b) the link was TLS with the server's certificate" grep -q "TLS established: .*peer CN=server" "$W/relay.log"
check "(b) the log says the job's TLS files came as open files" grep -q "job JF started: .*tls_fds ca_file,cert_file,key_file" "$W/relay.log"

# (d) the FLARE account as the client parent
$S --listen "stcp://127.0.0.1:0" --tls-dir "$K" --job-id JG --rounds 1 --model-size 4M --tensors 2 \
    > "$W/simg.out" 2> "$W/simg.err" & SIM="$SIM $!"
PORT=$(sim_port "$W/simg.out") || fail "the second simulator did not start"
AS_FLARE="setpriv --reuid=$FLARE --regid=$FLARE --clear-groups"
r=$($AS_FLARE $C -s "$W/run/status.sock" $PASS job start "$(job JG "$FDS")")
check "(d) the FLARE account outside admin_group may not start a job: $r" sh -c "printf '%s' \"\$1\" | grep -q '^ERR 403 '" - "$r"
r=$(setpriv --reuid=$FLARE --regid=$FLARE --groups=$ADMINS $C -s "$W/run/status.sock" $PASS job start "$(job JG "$FDS")")
check "(d) the FLARE account in admin_group starts JG with the kit's files: $r" [ "$r" = "OK job JG started" ]
wait_for 60 sh -c "grep -q '^SIM OK\|^SIM FAIL' $W/simg.out"
check "(d) JG's round verified over mutual TLS: $(tail -1 "$W/simg.out")" grep -q '^SIM OK rounds=1' "$W/simg.out"
check "(d) the log names the admin peer's uid" grep -q "status: pid [0-9]* uid $FLARE (admin): job start" "$W/relay.log"

kill -TERM "$PID" 2>/dev/null; wait_for 10 sh -c "! kill -0 $PID 2>/dev/null"; PID=
if [ "$_f" -gt 0 ]; then note "$W/relay.log" | tail -30; note "$W/sim.err" | tail -10; fi
finish
