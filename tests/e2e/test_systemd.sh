#!/bin/sh
# systemd-analyze verify on both units, with ExecStart pointed at the built binary.
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
done
finish
