# SPDX-License-Identifier: Apache-2.0
# lib.sh — shared by the shell end-to-end tests (sourced).  Each test prints
# "ok - name" / "not ok - name" and ends with finish, which writes the counts.
#
# Which binaries a test runs: every test finds cjrelayd, cjrelayctl, cjrelay-sim,
# cjrelay-worker and the helpers (tests/e2e/cjpeer, cjtest) under $BUILD, which
# is $CJ_BIN:
#   CJ_BIN   directory holding the binaries (absolute or relative to the source
#            root); default build/, or build/san/ when CJ_SAN=1.
#   CJ_SAN   1 when the binaries are the ASan+UBSan build (`make san`): checks
#            that mean nothing under ASan (RSS / VmHWM figures: shadow memory and
#            the allocator's quarantine) must skip then, e.g.
#              if [ "$CJ_SAN" = 1 ]; then skip "peak RSS (ASan build)"; else check ...; fi
#            or use check_mem below, which does exactly that.
#   CJ_ASAN_OPTIONS  extra ASAN_OPTIONS appended to (so overriding) the defaults below.
#   CJ_SAN_LOG  where sanitizer reports go (ASAN_OPTIONS/UBSAN_OPTIONS log_path);
#            run-one.sh sets it and fails the suite when a report appears there.
# Run one suite sanitized by hand: make san && CJ_SAN=1 sh tests/e2e/run-one.sh tests/e2e/test_fl.sh
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CJ_SAN=${CJ_SAN:-0}
if [ "$CJ_SAN" = 1 ]; then CJ_BIN=${CJ_BIN:-$ROOT/build/san}; else CJ_BIN=${CJ_BIN:-$ROOT/build}; fi
case $CJ_BIN in /*) ;; *) CJ_BIN=$ROOT/$CJ_BIN ;; esac
BUILD=$CJ_BIN
export CJ_BIN CJ_SAN
if [ "$CJ_SAN" = 1 ]; then
    CJ_SAN_LOG=${CJ_SAN_LOG:-$ROOT/build/san/e2e-logs/$(basename "$0" .sh)}
    mkdir -p "$CJ_SAN_LOG"
    export CJ_SAN_LOG
    # abort_on_error: a report kills the process (the test sees it die) and lands
    # in CJ_SAN_LOG (run-one.sh fails the suite on it).  A small quarantine keeps
    # the daemons' memory close to what it is without ASan.
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:disable_coredump=1:quarantine_size_mb=16:log_path=$CJ_SAN_LOG/asan${CJ_ASAN_OPTIONS:+:$CJ_ASAN_OPTIONS}"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$CJ_SAN_LOG/ubsan"
    [ -f "$ROOT/tests/e2e/lsan.supp" ] && export LSAN_OPTIONS="suppressions=$ROOT/tests/e2e/lsan.supp"
fi
_p=0; _f=0
pass() { _p=$((_p + 1)); echo "ok - $*"; }
fail() { _f=$((_f + 1)); echo "not ok - $*"; }
skip() { echo "skip - $*"; }
# tap_results LABEL RC TAPFILE LOG WHAT: the "ok - ", "not ok - " and "skip - " lines a helper
# program (Python) printed to TAPFILE, as this suite's checks labelled (LABEL); its exit status RC
# other than 0 fails too, with the end of its LOG
tap_results() {
    while IFS= read -r _tl; do
        case $_tl in
            "ok - "*) pass "($1) ${_tl#ok - }" ;;
            "not ok - "*) fail "($1) ${_tl#not ok - }" ;;
            "skip - "*) skip "($1) ${_tl#skip - }" ;;
        esac
    done < "$3"
    [ "$2" -eq 0 ] || { fail "($1) $5 exited $2"; note "$4" | tail -20; }
}
check() { # check "name" command...
    name=$1; shift
    if "$@" >/dev/null; then pass "$name"; else fail "$name"; fi
}
check_mem() { # check_mem "name" command...: a memory-figure check, skipped under CJ_SAN=1
    if [ "$CJ_SAN" = 1 ]; then skip "$1 (memory figures mean nothing under ASan)"; else check "$@"; fi
}
. "$ROOT/tests/e2e/wait.sh"   # wait_for SECS CMD...
note() { sed 's/^/# /' "$@"; }   # note [FILE]: a file (or stdin) as TAP comments
kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }   # kb PID FIELD: /proc/PID/status in KiB
finish() {
    echo "$(basename "$0" .sh): $_p passed, $_f failed"
    echo "$_p $_f" > "${SUMMARY_FILE:-/dev/null}"
    [ $_f -eq 0 ]; exit $?
}
# relay_ini FILE [SECTION.KEY=VALUE ...]: writes a relay config to FILE: [relay] site = site-1,
# job_id = J1, then each SECTION.KEY=VALUE in its section (sections and keys in the order first
# given). A later pair replaces the value of an earlier one with the same key, so a suite
# overrides the defaults; an empty VALUE leaves the key out.
relay_ini() {
    _ri=$1; shift
    for _kv in relay.site=site-1 relay.job_id=J1 upstream.project_name=example_project "$@"; do printf '%s\n' "$_kv"; done | awk '
        { d = index($0, "."); e = index($0, "=")
          s = substr($0, 1, d - 1); k = substr($0, d + 1, e - d - 1); v = substr($0, e + 1)
          if (!(s in seen)) { seen[s] = 1; sec[++ns] = s }
          if (!((s, k) in val)) key[s, ++nk[s]] = k
          val[s, k] = v }
        END { for (a = 1; a <= ns; a++) {
                  s = sec[a]; h = 0
                  for (b = 1; b <= nk[s]; b++) {
                      v = val[s, key[s, b]]; if (v == "") continue
                      if (!h++) print "[" s "]"
                      print key[s, b] " = " v
                  }
              } }' > "$_ri"
}
sim_port() { # sim_port OUT: waits (10 s) for the simulator's "SIM READY" line in OUT, prints its port
    wait_for 10 grep -q '^SIM READY' "$1" && awk '/^SIM READY/ {print $3}' "$1"
}
# hold_conns TARGET N SECS: opens up to N connections to TARGET (unix:PATH or HOST:PORT),
# stopping at the first refused one, holds them SECS seconds, closes them (python3)
hold_conns() {
    python3 - "$1" "$2" "$3" <<'EOF'
import socket, sys, time
target, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
held = []
for _ in range(n):
    if target.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX)
        addr = target[5:]
    else:
        host, port = target.rsplit(":", 1)
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        addr = (host.strip("[]"), int(port))
    s.settimeout(0.5)
    try:
        s.connect(addr)
        held.append(s)
    except OSError:
        s.close()
        break
time.sleep(secs)
for s in held:
    s.close()
EOF
}
