#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make check's runner: every suite, then one closing line "N passed, M failed".
#
# What runs.  The unit tests run twice: built plain and built with ASan+UBSan
# (build/san/).  Each e2e suite runs with the sanitized binaries (CJ_SAN=1,
# CJ_BIN=build/san: LeakSanitizer on, a sanitizer report in any process fails the
# suite; see tests/e2e/lib.sh), except those named in PLAIN_ONLY, which run with
# the plain binaries only, for the reason given there.  The suites named in
# PLAIN_TOO run with the plain binaries as well: they measure what the shipped
# build pays (syscalls, bytes, timing-bound paths), which ASan's own allocator and
# checks would change.  CJ_SAN_SUITES="fl tls ..." limits the sanitized passes to
# those suites (the others then run plain; "none": every suite plain).
#
# How it runs.  Every pass is one entry in a queue, longest first by the costs in
# COST (seconds, as measured on 2 cores; a suite not named there counts 60);
# CHECK_LANES (default 3) lanes take entries from it until it is empty, so the
# suites, which mostly wait on timers and links, overlap without one lane
# finishing long after the others.  Each entry's output is printed whole when it
# ends.  Every suite picks its own free ports and temporary directory, so two
# never meet.  CHECK_LANES=1 runs them one after the other.
cd "$(dirname "$0")/.." || exit 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# Suites with no sanitized pass, and why.
plain_only_why() {
    case $1 in
        test_systemd|test_licence|test_doclines) echo "runs no binary of ours" ;;
        test_deb) echo "checks the man pages and the packages; its daemon only answers show" ;;
        test_site|test_site_release|test_site_release_tcp) echo "runs FLARE's whole site, mostly Python; CJ_SAN_SUITES=site runs it sanitized" ;;
        test_memory) echo "measures the relay's memory, which ASan's allocator would swamp" ;;
        test_sim|test_worker) echo "tests a tool binary that runs sanitized in the other suites; CJ_SAN_SUITES=${1#test_} runs it" ;;
    esac
}
# Suites that also run with the plain binaries (they count what the shipped build does).
PLAIN_TOO=" test_syscalls test_wan test_transport "

# Seconds each pass took on 2 cores (the order of the queue; the first column).
COST="
unit 150
unit-san 200
san-test_wan 95
san-test_faults 90
san-test_fl 85
plain-test_site 85
plain-test_site_release 85
plain-test_site_release_tcp 85
plain-test_memory 80
san-test_spool 80
san-test_jobs 75
san-test_transport 70
plain-test_wan 60
san-test_tls 60
"
cost_of() { c=$(printf '%s\n' "$COST" | awk -v k="$1" '$1 == k { print $2 }'); echo "${c:-60}"; }

san_wanted() {
    [ -n "$(plain_only_why "$1")" ] && return 1
    case " ${CJ_SAN_SUITES:-all} " in *" all "*|*" ${1#test_} "*|*" $1 "*) return 0 ;; esac
    return 1
}

# The queue: "<cost> <entry>", entries unit, unit-san, plain-<suite>, san-<suite>.
queue() {
    echo "unit"; echo "unit-san"
    for s in tests/e2e/test_*.sh; do
        [ -f "$s" ] || continue
        n=$(basename "$s" .sh)
        if san_wanted "$n"; then
            echo "san-$n"
            case $PLAIN_TOO in *" $n "*) echo "plain-$n" ;; esac
        else
            echo "plain-$n"
        fi
    done
}
for e in $(queue); do echo "$(cost_of "$e") $e"; done | sort -k1,1nr -k2 > "$tmp/queue"
: > "$tmp/names"

take() {   # prints the next entry and removes it from the queue; nothing when it is empty
    flock "$tmp/queue.lock" sh -c 'head -n 1 "$0" | cut -d" " -f2; sed -i 1d "$0"' "$tmp/queue"
}

run_entry() {   # run_entry <entry>: one pass; its summary goes to $tmp/<entry>
    e=$1
    flock "$tmp/queue.lock" sh -c 'echo "$1" >> "$0"' "$tmp/names" "$e"
    case $e in
        unit) set -- sh tests/run-unit.sh unit build/tests/test_* ;;
        unit-san) set -- sh tests/run-unit.sh asan+ubsan build/san/tests/test_* ;;
        san-*) set -- env CJ_SAN=1 CJ_BIN=build/san sh tests/e2e/run-one.sh "tests/e2e/${e#san-}.sh" ;;
        plain-*) n=${e#plain-}; why=$(plain_only_why "$n")
                 [ -n "$why" ] && echo "== $n.sh: plain binaries only ($why)"
                 set -- sh tests/e2e/run-one.sh "tests/e2e/$n.sh" ;;
    esac
    SUMMARY_FILE="$tmp/$e" "$@" || echo "$e" >> "$tmp/nonzero"
}

lane() {
    while e=$(take) && [ -n "$e" ]; do
        run_entry "$e" > "$tmp/out.$e" 2>&1
        flock "$tmp/print.lock" cat "$tmp/out.$e"
    done
}

start=$(date +%s)
lanes=${CHECK_LANES:-3}
i=1; pids=
while [ "$i" -le "$lanes" ]; do lane & pids="$pids $!"; i=$((i + 1)); done
wait $pids

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
echo "check took $(( $(date +%s) - start )) s in $lanes lanes"
echo "$total_p passed, $total_f failed"
[ $total_f -eq 0 ]
