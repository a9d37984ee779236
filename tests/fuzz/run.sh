#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs each libFuzzer target for $1 seconds with its seed corpus
# (tests/fuzz/corpus/<target>/ seeded from tests/vectors by seed.sh).
secs=$1; shift
cd "$(dirname "$0")/../.." || exit 2
sh tests/fuzz/seed.sh
fail=0
for t in "$@"; do
    name=$(basename "$t")
    corpus=build/fuzz/corpus/$name
    mkdir -p "$corpus" build/fuzz/artifacts
    echo "fuzz: $name for ${secs}s"
    "$t" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix=build/fuzz/artifacts/"$name"- \
        "$corpus" tests/fuzz/seeds/"$name" > build/fuzz/"$name".log 2>&1
    rc=$?
    tail -n 12 build/fuzz/"$name".log | grep -E 'stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY' 
    if [ $rc -ne 0 ]; then echo "fuzz: $name FAILED (see build/fuzz/$name.log)"; fail=1; else echo "fuzz: $name clean"; fi
done
exit $fail
