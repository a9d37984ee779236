#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# systemd-analyze verify on both units, with ExecStart pointed at the built binary; their
# sandbox's exposure score; the shipped GPU, worker-accounts and FLARE-workspace drop-ins applied
# to the unit; the FLARE-workspace one makes the workspace writable and nothing else.
. "$(dirname "$0")/lib.sh"
command -v systemd-analyze >/dev/null || { skip "systemd-analyze not installed"; finish; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
# Documentation= names the man pages: verify checks them, in the built ones.
export MANPATH="$ROOT/build/man:"
for u in cjrelay.service cjrelay@.service; do
    out=$d/$(echo "$u" | sed 's/@/@demo/')
    sed "s|/usr/local/bin/cjrelayd|$BUILD/cjrelayd|g" "$ROOT/systemd/$u" > "$out"
    if msg=$(systemd-analyze verify "$out" 2>&1) && [ -z "$msg" ]; then pass "verify $u"
    else fail "verify $u: $msg"; fi
    # the sandbox's score, offline (systemd-analyze security lists each setting it weighs)
    if score=$(systemd-analyze security --offline=true "$out" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p') && [ -n "$score" ]; then
        check "$u: systemd-analyze security exposure $score (<= 3.0)" awk -v s="$score" 'BEGIN {exit !(s <= 3.0)}'
    else
        skip "$u: systemd-analyze security --offline not supported here"
    fi
done
# a configuration error (exit 1) is not restarted: the unit would loop every RestartSec
for u in cjrelay.service cjrelay@.service; do
    check "$u: Restart=on-failure but not after exit 1 (RestartPreventExitStatus=1)" \
        sh -c "grep -qx 'Restart=on-failure' $ROOT/systemd/$u && grep -qx 'RestartPreventExitStatus=1' $ROOT/systemd/$u"
    # systemd weighs RestartPreventExitStatus= against the main process only: a failing
    # ExecStartPre (a --check-config) would be restarted every RestartSec after all
    check "$u: no ExecStartPre (its failure would be restarted regardless)" sh -c "! grep -q '^ExecStartPre=' $ROOT/systemd/$u"
done
# the shipped GPU drop-in, applied as a site would: the unit still verifies
mkdir -p "$d/cjrelay.service.d"
cp "$ROOT/systemd/gpu.conf.example" "$d/cjrelay.service.d/gpu.conf"
if msg=$(systemd-analyze verify "$d/cjrelay.service" 2>&1) && [ -z "$msg" ]; then pass "verify cjrelay.service with the GPU drop-in"
else fail "verify cjrelay.service with the GPU drop-in: $msg"; fi
# the shipped worker-accounts drop-in beside it: still verifies; its exposure is reported
cp "$ROOT/systemd/worker-accounts.conf.example" "$d/cjrelay.service.d/worker-accounts.conf"
if msg=$(systemd-analyze verify "$d/cjrelay.service" 2>&1) && [ -z "$msg" ]; then pass "verify cjrelay.service with the worker-accounts drop-in"
else fail "verify cjrelay.service with the worker-accounts drop-in: $msg"; fi
# the shipped FLARE-workspace drop-in: still verifies; it adds one writable path, the workspace,
# and changes nothing else of the sandbox
cp "$ROOT/systemd/flare-workspace.conf.example" "$d/cjrelay.service.d/flare-workspace.conf"
if msg=$(systemd-analyze verify "$d/cjrelay.service" 2>&1) && [ -z "$msg" ]; then pass "verify cjrelay.service with the FLARE-workspace drop-in"
else fail "verify cjrelay.service with the FLARE-workspace drop-in: $msg"; fi
settings=$(grep -v '^#' "$ROOT/systemd/flare-workspace.conf.example" | grep .)
check "the FLARE-workspace drop-in sets ReadWritePaths= to the workspace and nothing else: $(echo $settings)" \
    [ "$settings" = "$(printf '[Service]\nReadWritePaths=/srv/flare/workspace')" ]
check "... and is shipped with the package's examples" grep -qx 'systemd/flare-workspace.conf.example' "$ROOT/debian/cjrelay.examples"
if score=$(cd "$d" && systemd-analyze security --offline=true cjrelay.service 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p') && [ -n "$score" ]; then
    check "cjrelay.service with the three drop-ins: exposure $score (<= 3.0)" awk -v s="$score" 'BEGIN {exit !(s <= 3.0)}'
else
    skip "systemd-analyze security --offline not supported here"
fi
printf '[Service]\nDeviceAllow=char-no-such-thing rw\nNoSuchSetting=1\n' > "$d/cjrelay.service.d/zz-bad.conf"
if msg=$(systemd-analyze verify "$d/cjrelay.service" 2>&1) && [ -z "$msg" ]; then fail "verify reads the drop-in directory (a bad drop-in went unnoticed)"
else pass "verify reads the drop-in directory (a bad drop-in is reported: $(echo "$msg" | head -1))"; fi
finish
