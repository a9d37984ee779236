#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs one e2e test script with a time limit; its summary goes to $SUMMARY_FILE.
# With CJ_SAN=1 (binaries from build/san, see lib.sh) any sanitizer report a
# process wrote during the script fails the suite and is printed here.
t=$1
name=$(basename "$t" .sh)
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${CJ_SAN:-0}" = 1 ]; then
    echo "== $name.sh (ASan+UBSan binaries in ${CJ_BIN:-build/san})"
    CJ_SAN_LOG=$root/build/san/e2e-logs/$name
    rm -rf "$CJ_SAN_LOG"; mkdir -p "$CJ_SAN_LOG"
    export CJ_SAN_LOG
else
    echo "== $name.sh"
fi
start=$(date +%s)
timeout --kill-after=10 "${E2E_TIMEOUT:-300}" sh "$t"
rc=$?
echo "$name: took $(( $(date +%s) - start )) s"
[ $rc -eq 124 ] && echo "$name: timed out after ${E2E_TIMEOUT:-300}s"
if [ "${CJ_SAN:-0}" = 1 ]; then
    reports=$(find "$CJ_SAN_LOG" -type f -size +0c 2>/dev/null | sort)
    if [ -n "$reports" ]; then
        n=0
        for f in $reports; do
            n=$((n + 1))
            echo "---- sanitizer report $n: $f"
            head -n 120 "$f"
        done
        echo "not ok - $name: $n sanitizer report(s) (ASan/UBSan/LSan), see above and $CJ_SAN_LOG"
        if [ -n "$SUMMARY_FILE" ]; then
            p=0; f=0
            [ -s "$SUMMARY_FILE" ] && read -r p f < "$SUMMARY_FILE"
            echo "$p $((f + 1))" > "$SUMMARY_FILE"
        fi
        rc=1
    fi
fi
exit $rc
