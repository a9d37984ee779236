#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make interop: FLARE's own POC site (tests/e2e/test_site.sh: FLARE's server and client parent,
# the launcher as the README sets it up, jobs through FLARE's admin API) served by cjrelayd, once
# per FLARE tree x scheme x connection security:
#   INTEROP_TREES     2.8.1 2.7.2 main (../shared/flare/<tree>)
#   INTEROP_SCHEMES   tcp http grpc (the project's StaticFileBuilder scheme)
#   INTEROP_SECURITY  clear mtls (the server's connection_security)
# Each run's output is in build/interop/<tree>-<scheme>-<security>.log; the last lines are the
# matrix, one row per run: passed, failed, seconds.
cd "$(dirname "$0")/.." || exit 2
mkdir -p build/interop
rc=0; rows=
for t in ${INTEROP_TREES:-2.8.1 2.7.2 main}; do
    for s in ${INTEROP_SCHEMES:-tcp http grpc}; do
        for c in ${INTEROP_SECURITY:-clear mtls}; do
            log=build/interop/$t-$s-$c.log
            start=$(date +%s)
            FLARE_TREE=$t SITE_SCHEME=$s SITE_SECURITY=$c E2E_TIMEOUT=600 \
                sh tests/e2e/run-one.sh tests/e2e/test_site.sh > "$log" 2>&1 || rc=1
            res=$(sed -n 's/^test_site: \([0-9]*\) passed, \([0-9]*\) failed$/\1 passed, \2 failed/p' "$log" | tail -1)
            row=$(printf '%-6s %-5s %-6s %-22s %4d s' "$t" "$s" "$c" "${res:-no summary}" $(( $(date +%s) - start )))
            echo "$row"; grep '^not ok' "$log" | sed 's/^/    /'
            rows="$rows$row
"
        done
    done
done
echo
echo "FLARE  scheme security result                  time"
printf '%s' "$rows"
exit $rc
