#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Access to the status and worker sockets: each is created with its socket_mode and
# the kernel enforces it; of status clients let in, only root and the daemon's uid
# may change things; SO_PEERCRED (pid, uid) is logged for both; [status] socket_group
# lets a group's members read; an unknown [status] admin_group is refused.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { skip "needs root to act as another uid"; finish; }
command -v setpriv >/dev/null || { skip "setpriv missing"; finish; }
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; P=$BUILD/tests/e2e/cjpeer
# A directory another uid can traverse, holding copies of the binaries it runs.
W=$(mktemp -d /tmp/cjrelay-access.XXXXXX); chmod 755 "$W"; PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
cp "$C" "$W/cjrelayctl"; chmod 755 "$W/cjrelayctl"
cp "$P" "$W/cjpeer"; chmod 755 "$W/cjpeer"
AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"

start() { # start STATUS_MODE [WORKERS_MODE [STATUS_GROUP]]
    relay_ini "$W/r.ini" workers.listen="unix:$W/workers.sock" workers.socket_mode="${2:-0660}" \
        status.socket="$W/status.sock" status.socket_mode="$1" status.socket_group="${3:-}"
    $D -c "$W/r.ini" > "$W/d.log" 2>&1 & PID=$!
    for i in $(seq 50); do [ -S "$W/status.sock" ] && break; sleep 0.1; done
}
stop() { kill -TERM "$PID"; wait "$PID"; PID=; }
# answered FILE: cjpeer's ping got an answer through the relay.  There is no upstream
# here, so the relay itself answers: a RETURN with comm_error (the link and the HELLO
# went through; that is what is tested).
answered() { grep -q '^OK ping\|RETURN from site-1.J1: comm_error' "$1"; }

start 0600 0600
check "status socket created with mode 0600" [ "$(stat -c %a "$W/status.sock")" = 600 ]
check "worker socket created with mode 0600" [ "$(stat -c %a "$W/workers.sock")" = 600 ]
$AS_NOBODY "$W/cjpeer" --timeout 5 "unix:$W/workers.sock" site-1.J1.w9 ping > "$W/wout" 2>&1; rc=$?
check "worker socket 0600: another uid is refused by the kernel ($rc)" sh -c "[ $rc -ne 0 ] && grep -q 'Permission denied' $W/wout"
check "worker socket 0600: the refused uid never reached the relay" sh -c "! grep -q 'uid 65534' $W/d.log"
"$P" --timeout 5 "unix:$W/workers.sock" site-1.J1.w1 ping > "$W/wout" 2>&1
check "worker socket 0600: root's worker is served (the relay answers its ping)" answered "$W/wout"
check "worker link logged with SO_PEERCRED pid and uid" grep -q "site-1.J1.w1 (unix peer pid [0-9]* uid 0)" "$W/d.log"
$AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" show info > "$W/out" 2>&1; rc=$?
check "mode 0600: another uid is refused by the kernel (exit 2)" sh -c "[ $rc -eq 2 ] && grep -q 'Permission denied' $W/out"
check "mode 0600: root gets in" $C -s "$W/status.sock" show info
check "a read-only query leaves no line at info: a poller keeps the log quiet" sh -c "! grep -q 'info: status: ' $W/d.log"
$C -s "$W/status.sock" pause > /dev/null; $C -s "$W/status.sock" resume > /dev/null
check "a change is logged with the SO_PEERCRED pid and uid" grep -q "info: status: pid [0-9]* uid 0 (admin): pause" "$W/d.log"
stop

start 0666 0666
check "status socket created with mode 0666" [ "$(stat -c %a "$W/status.sock")" = 666 ]
$AS_NOBODY "$W/cjpeer" --timeout 5 "unix:$W/workers.sock" site-1.J1.w2 ping > "$W/wout" 2>&1
check "worker socket 0666: another uid's worker is served" answered "$W/wout"
check "worker link logged with the other uid" grep -q "site-1.J1.w2 (unix peer pid [0-9]* uid 65534)" "$W/d.log"
check "mode 0666: another uid may read" $AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" show info
$AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" pause > "$W/out" 2>&1; rc=$?
check "another uid may not pause (ERR 403)" sh -c "[ $rc -eq 1 ] && grep -q '^ERR 403' $W/out"
$AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" shutdown now > "$W/out" 2>&1
check "another uid may not shut the daemon down" kill -0 "$PID"
check "a read-only client's refused change logged with its uid" grep -q "status: pid [0-9]* uid 65534: pause: ERR 403" "$W/d.log"
check "root may pause" $C -s "$W/status.sock" pause
stop

# socket_group: the group's members read through socket_mode's group bits, and change nothing
# (admin_group, whose members change things too: test_fdpass.sh)
start 0660 0660 65534
check "socket_group 65534: the status socket's group" [ "$(stat -c %g "$W/status.sock")" = 65534 ]
check "socket_group: a member of the group reads show info" sh -c "$AS_NOBODY $W/cjrelayctl -s $W/status.sock show info | grep -q '^fqcn: site-1.J1'"
$AS_NOBODY "$W/cjrelayctl" -s "$W/status.sock" pause > "$W/out" 2>&1; rc=$?
check "socket_group: ... but may not pause (ERR 403)" sh -c "[ $rc -eq 1 ] && grep -q '^ERR 403' $W/out"
setpriv --reuid=65534 --regid=100 --clear-groups "$W/cjrelayctl" -s "$W/status.sock" show info > "$W/out" 2>&1; rc=$?
check "socket_group: another group is kept out by the kernel (exit 2)" sh -c "[ $rc -eq 2 ] && grep -q 'Permission denied' $W/out"
stop
relay_ini "$W/bad.ini" status.socket="$W/status.sock" status.socket_group=cjtest-no-such-group
$D -c "$W/bad.ini" --check-config > "$W/out" 2>&1; rc=$?
check "socket_group: an unknown group is a config error with its line ($(head -1 "$W/out"))" sh -c "[ $rc -eq 1 ] && grep -q \"bad.ini:[0-9]*: status.socket_group: no group 'cjtest-no-such-group'\" $W/out"
relay_ini "$W/bad.ini" status.socket="$W/status.sock" status.admin_group=cjtest-no-such-group
$D -c "$W/bad.ini" --check-config > "$W/out" 2>&1; rc=$?
check "admin_group: an unknown group is a config error with its line ($(head -1 "$W/out"))" sh -c "[ $rc -eq 1 ] && grep -q \"bad.ini:[0-9]*: status.admin_group: no group 'cjtest-no-such-group'\" $W/out"
$D -c "$W/bad.ini" > "$W/out" 2>&1; rc=$?
check "admin_group: ... and the daemon does not start with it (exit 1)" sh -c "[ $rc -eq 1 ] && grep -q 'no group' $W/out"
finish
