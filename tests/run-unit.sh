#!/bin/sh
# Runs cmocka test binaries, shows their output, and prints one summary line
#   <label>: N passed, M failed
# Exit status 1 when any test failed or a binary crashed.
label=$1; shift
passed=0; failed=0; crashed=""
for t in "$@"; do
    case $t in *.d) continue ;; esac   # the compiler's dependency files sit beside the binaries
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
    passed=$((passed + p)); failed=$((failed + f))
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then crashed="$crashed $(basename "$t")"; failed=$((failed + 1)); fi
done
[ -n "$crashed" ] && echo "$label: crashed or exited non-zero:$crashed"
echo "$label: $passed passed, $failed failed"
echo "$passed $failed" > "${SUMMARY_FILE:-/dev/null}"
[ "$failed" -eq 0 ]
