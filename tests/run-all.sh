#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make check's runner: every suite, then one closing line "N passed, M failed".
# The e2e suites run twice: with build/ (plain) and with build/san/ (ASan+UBSan,
# LeakSanitizer on: a sanitizer report in any process fails the suite; see
# tests/e2e/lib.sh for CJ_BIN / CJ_SAN).  CJ_SAN_SUITES="fl tls ..." limits the
# sanitized pass to those suites ("none" skips it); default "all": every suite
# but test_systemd and test_licence (run no binary of ours), test_deb (the man pages and the
# packages), test_site (FLARE's whole site: its time is FLARE's Python, one
# pass of it is enough) and test_sim / test_worker (they test the simulator
# and the reference worker, which run sanitized inside the fl, spool, faults
# and hostile suites anyway).
#
# The two passes run side by side, as two lanes: the plain lane (unit tests,
# then the plain e2e suites) prints as it goes; the sanitized lane (the unit
# tests under ASan+UBSan, the sanitized suites, then the plain pass of the
# suites that have no sanitized one) is kept in a file and printed when both
# are done.  Every suite picks its own free ports and
# temporary directory, so two never meet; most of their time is spent waiting
# on timers and links, which is why two lanes keep make check within its 15
# minutes on 2 cores.  CHECK_LANES=1 runs them one after the other.
cd "$(dirname "$0")/.." || exit 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
: > "$tmp/names"

run() {   # run <summary-name> <command...>: one suite; its summary goes to $tmp/<name>
    name=$1; shift
    echo "$name" >> "$tmp/names"
    SUMMARY_FILE="$tmp/$name" "$@" || echo "$name" >> "$tmp/nonzero"
}

san_left_out() { # san_left_out <suite name>: prints why a suite skips the sanitized pass, if it does
    case " ${CJ_SAN_SUITES:-all} " in
        *" all "*|*" ${1#test_} "*|*" $1 "*) ;;
        *) echo "not in CJ_SAN_SUITES"; return ;;
    esac
    [ "${CJ_SAN_SUITES:-all}" = all ] || return
    case $1 in
        test_systemd|test_licence|test_doclines) echo "runs no binary of ours" ;;
        test_deb) echo "checks the man pages and the packages; its daemon only answers show" ;;
        test_site) echo "runs FLARE's whole site, mostly Python; CJ_SAN_SUITES=site runs it sanitized" ;;
        test_sim|test_worker) echo "tests a tool binary that runs sanitized in the other suites; CJ_SAN_SUITES=${1#test_} runs it" ;;
    esac
}

# A suite with no sanitized pass (san_left_out) runs its plain pass in the
# sanitized lane, but for those named here, which run in the plain lane: the
# split keeps the two lanes about as long.
PLAIN_SIDE=" test_site test_licence test_doclines test_sim "
on_plain_side() { case $PLAIN_SIDE in *" $1 "*) return 0 ;; esac; return 1; }

plain_lane() {
    run unit sh tests/run-unit.sh unit build/tests/test_*
    for s in tests/e2e/test_*.sh; do
        [ -f "$s" ] || continue
        n=$(basename "$s" .sh)
        case $(san_left_out "$n") in ""|"not in CJ_SAN_SUITES") ;; *) on_plain_side "$n" || continue ;; esac
        run "e2e-$n" sh tests/e2e/run-one.sh "$s"
    done
}

san_lane() {
    run unit-san sh tests/run-unit.sh asan+ubsan build/san/tests/test_*
    for s in tests/e2e/test_*.sh; do
        [ -f "$s" ] || continue
        n=$(basename "$s" .sh)
        why=$(san_left_out "$n")
        case $why in
            "") run "e2e-san-$n" env CJ_SAN=1 CJ_BIN=build/san sh tests/e2e/run-one.sh "$s" ;;
            "not in CJ_SAN_SUITES") ;;
            *) if on_plain_side "$n"; then
                   echo "== $n.sh under ASan+UBSan: left out ($why); its plain pass runs in the plain lane"
               else
                   echo "== $n.sh under ASan+UBSan: left out ($why); its plain pass runs here"
                   run "e2e-$n" sh tests/e2e/run-one.sh "$s"
               fi ;;
        esac
    done
    echo "== sanitized lane done after $(( $(date +%s) - start )) s"
}

start=$(date +%s)
if [ "${CHECK_LANES:-2}" = 1 ]; then
    plain_lane; san_lane
else
    # Both lanes append their suites' names to one file (short O_APPEND writes).
    san_lane > "$tmp/san.out" 2>&1 &
    san_pid=$!
    plain_lane
    echo "== plain lane done after $(( $(date +%s) - start )) s; the sanitized lane:"
    wait $san_pid
    cat "$tmp/san.out"
fi

total_p=0; total_f=0
for name in $(sort -u "$tmp/names"); do
    if [ -s "$tmp/$name" ]; then
        read -r p f < "$tmp/$name"
    else
        p=0; f=1; echo "$name: produced no summary"
    fi
    if [ "$f" -eq 0 ] && grep -qx "$name" "$tmp/nonzero" 2>/dev/null; then
        f=1; echo "$name: exited non-zero with no failed check"
    fi
    total_p=$((total_p + p)); total_f=$((total_f + f))
done
echo
echo "check took $(( $(date +%s) - start )) s"
echo "$total_p passed, $total_f failed"
[ $total_f -eq 0 ]
