#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make bench-flare: what a real FLARE site pays for one job, stock against cjrelayd, in one run.
# tests/e2e/test_site.sh with SITE_STOCK=1 SITE_BENCH=SIZE: FLARE's own POC site (server, client
# parent), the external-process job with a SIZE float32 model run first with FLARE's stock
# launcher (its client job, and in 2.8.x the client parent's cell carrying the trainer's bytes),
# then with the launcher handing it to cjrelayd; tests/site/sampler.py samples every process of
# the site but the trainer (CPU user + system, peak RSS) over each job.
#   FLARE_TREE   2.8.1 (default), 2.7.2 or main
#   SIZE         512M (default) or e.g. 1G
# Prints the "# BENCH stock ..." and "# BENCH cjrelayd ..." lines (doc/performance.md has them).
cd "$(dirname "$0")/.." || exit 2
out=$(mktemp); trap 'rm -f "$out"' EXIT
FLARE_TREE=${FLARE_TREE:-2.8.1} SITE_STOCK=1 SITE_BENCH=${SIZE:-512M} SITE_BENCH_OUT=$out E2E_TIMEOUT=1800 \
    sh tests/e2e/run-one.sh tests/e2e/test_site.sh > "$out.log" 2>&1
rc=$?
grep -E "^not ok" "$out.log"
cat "$out"
if [ $rc -ne 0 ]; then mkdir -p build; cp "$out.log" build/bench-flare.log; echo "# failed (rc $rc): build/bench-flare.log"; fi
rm -f "$out.log"
exit $rc
