#!/bin/sh
# make check's runner: every suite, then one closing line "N passed, M failed".
# The e2e suites run twice: with build/ (plain) and with build/san/ (ASan+UBSan,
# LeakSanitizer on: a sanitizer report in any process fails the suite; see
# tests/e2e/lib.sh for CJ_BIN / CJ_SAN).  CJ_SAN_SUITES="fl tls ..." limits the
# sanitized pass to those suites ("none" skips it); default "all": every suite
# but test_systemd (runs no binary of ours), test_deb (the man pages and the
# packages) and test_sim / test_worker (they
# test the simulator and the reference worker, which run sanitized inside the
# fl, spool, faults and hostile suites anyway): make check stays within its
# 10 minutes on 2 cores.
cd "$(dirname "$0")/.." || exit 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
total_p=0; total_f=0; status=0
run() {   # run <summary-name> <command...>
    name=$1; shift
    SUMMARY_FILE="$tmp/$name" "$@" || status=1
    count "$name"
}
count() { # count <summary-name>: adds a finished suite's summary to the totals
    name=$1
    if [ -s "$tmp/$name" ]; then
        read -r p f < "$tmp/$name"
    else
        p=0; f=1; echo "$name: produced no summary"
    fi
    total_p=$((total_p + p)); total_f=$((total_f + f))
}
# test_worker spends nearly all its time waiting (the worker's default 30 s connect
# window has to run out): it runs beside the unit tests, which mostly wait on timers
# too, and its output is shown after theirs.
beside=tests/e2e/test_worker.sh; beside_name=e2e-$(basename "$beside" .sh)
SUMMARY_FILE="$tmp/$beside_name" sh tests/e2e/run-one.sh "$beside" > "$tmp/beside.out" 2>&1 &
beside_pid=$!
run unit      sh tests/run-unit.sh unit build/tests/test_*
run unit-san  sh tests/run-unit.sh asan+ubsan build/san/tests/test_*
wait $beside_pid || status=1
cat "$tmp/beside.out"
count "$beside_name"
for s in tests/e2e/test_*.sh; do
    [ -f "$s" ] || continue
    [ "$s" = "$beside" ] && continue   # ran beside the unit tests
    run "e2e-$(basename "$s" .sh)" sh tests/e2e/run-one.sh "$s"
done

# Sanitized pass.  A suite whose memory checks (VmHWM / RSS) do not yet skip
# under CJ_SAN=1 (lib.sh's check_mem, or a test of $CJ_SAN) would fail on ASan's
# own memory: it is left out, with a line saying so, until it does.
mem_suites="test_transport"
for s in tests/e2e/test_*.sh; do
    [ -f "$s" ] || continue
    n=$(basename "$s" .sh)
    case " ${CJ_SAN_SUITES:-all} " in
        *" all "*|*" ${n#test_} "*|*" $n "*) ;;
        *) continue ;;
    esac
    case $n in
        test_systemd) [ "${CJ_SAN_SUITES:-all}" = all ] && { echo "== $n.sh under ASan+UBSan: left out (runs no binary of ours)"; continue; } ;;
        test_deb) [ "${CJ_SAN_SUITES:-all}" = all ] && { echo "== $n.sh under ASan+UBSan: left out (checks the man pages and the packages; its daemon only answers show)"; continue; } ;;
        test_sim|test_worker) [ "${CJ_SAN_SUITES:-all}" = all ] && { echo "== $n.sh under ASan+UBSan: left out (tests a tool binary that runs sanitized in the other suites; CJ_SAN_SUITES=${n#test_} runs it)"; continue; } ;;
    esac
    case " $mem_suites " in
        *" $n "*) if ! grep -q 'CJ_SAN\|check_mem' "$s"; then
                      echo "== $n.sh under ASan+UBSan: left out (its VmHWM checks do not skip under CJ_SAN=1 yet)"
                      continue
                  fi ;;
    esac
    run "e2e-san-$n" env CJ_SAN=1 CJ_BIN=build/san sh tests/e2e/run-one.sh "$s"
done
echo
echo "$total_p passed, $total_f failed"
[ $status -eq 0 ] && [ $total_f -eq 0 ]
