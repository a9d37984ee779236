#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs cmocka test binaries, shows their output, and prints one summary line
#   <label>: N passed, M failed
# Exit status 1 when any test failed or a binary crashed.
# The binaries run UNIT_JOBS (default 4) at a time: most of their time is spent
# waiting on timers (timeouts, back-off, heartbeats), not on the CPU, so they
# overlap well.  Each one's output is kept apart and shown in the given order.
label=$1; shift
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
n=0
for t in "$@"; do
    case $t in *.d) continue ;; esac   # the compiler's dependency files sit beside the binaries
    n=$((n + 1))
    printf '%s %s\n' "$n" "$t"
done > "$tmp/list"
# sh -c's $0 is the output directory, $1 the index, $2 the binary.
xargs -P "${UNIT_JOBS:-4}" -L 1 sh -c '"$2" > "$0/$1.out" 2>&1; echo $? > "$0/$1.rc"' "$tmp" < "$tmp/list"

passed=0; failed=0; crashed=""
while read -r i t; do
    out=$(cat "$tmp/$i.out" 2>/dev/null); rc=$(cat "$tmp/$i.rc" 2>/dev/null || echo 127)
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then crashed="$crashed $(basename "$t")"; failed=$((failed + 1)); fi
done < "$tmp/list"
[ -n "$crashed" ] && echo "$label: crashed or exited non-zero:$crashed"
echo "$label: $passed passed, $failed failed"
echo "$passed $failed" > "${SUMMARY_FILE:-/dev/null}"
[ "$failed" -eq 0 ]
