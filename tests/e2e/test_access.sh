#!/bin/sh
# Access to the status socket: the kernel enforces socket_mode; of those let in,
# only root and the daemon's uid may change things; SO_PEERCRED is logged.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { skip "needs root to act as another uid"; finish; }
command -v setpriv >/dev/null || { skip "setpriv missing"; finish; }
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl
# A directory another uid can traverse, holding copies of the binaries it runs.
W=$(mktemp -d /tmp/cjrelay-access.XXXXXX); chmod 755 "$W"; PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
cp "$C" "$W/cjrelayctl"; chmod 755 "$W/cjrelayctl"
AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"

start() { # start MODE
    cat > "$W/r.ini" <<EOF2
[relay]
site = site-1
job_id = J1
[workers]
listen = unix:$W/workers.sock
[status]
socket = $W/status.sock
socket_mode = $1
EOF2
    $D -c "$W/r.ini" > "$W/d.log" 2>&1 & PID=$!
    for i in $(seq 50); do [ -S "$W/status.sock" ] && break; sleep 0.1; done
}
stop() { kill -TERM "$PID"; wait "$PID"; PID=; }

start 0600
$AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" show info > "$W/out" 2>&1; rc=$?
check "mode 0600: another uid is refused by the kernel (exit 2)" sh -c "[ $rc -eq 2 ] && grep -q 'Permission denied' $W/out"
check "mode 0600: root gets in" $C -s "$W/status.sock" show info
check "SO_PEERCRED pid and uid logged" grep -q "status: client connected pid [0-9]* uid 0 (admin)" "$W/d.log"
stop

start 0666
check "mode 0666: another uid may read" $AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" show info
$AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" pause > "$W/out" 2>&1; rc=$?
check "another uid may not pause (ERR 403)" sh -c "[ $rc -eq 1 ] && grep -q '^ERR 403' $W/out"
$AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" shutdown now > "$W/out" 2>&1
check "another uid may not shut the daemon down" kill -0 "$PID"
check "read-only client logged with its uid" grep -q "uid 65534 (read-only)" "$W/d.log"
check "root may pause" $C -s "$W/status.sock" pause
stop
finish
