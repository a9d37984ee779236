#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The man pages and the Debian packages:
# (a) the generated pages list every config key, status command, show target, stats field,
#     exit status and job outcome, checked against the generator's table dump and the binaries' own output
#     (cjrelayctl --help, show config and show stats of a running daemon), and render cleanly;
# (b) make deb's packages (rebuilt when a source is newer than them): contents, maintainer
#     scripts, the sysusers entry creating the service user, the units, lintian, and
#     systemd-analyze verify on the unpacked units;
#     python3-cjrelay-flare: the launcher for Debian's python3, its comm_drivers/ folder as
#     plain files; make install (PREFIX /usr/local and /usr): the launcher where /usr/bin/python3
#     finds it;
# (c) the packages installed (dpkg -i) on this machine: the service user made, and the demo
#     (the packaged simulator, daemon and worker) runs a round with the daemon as that user;
#     the launcher imports with /usr/bin/python3 and is byte-compiled; purged again at the
#     end.  Skipped when cjrelay is already installed here (not ours to replace) or the suite
#     does not run as root;
# (d) the launcher's documented installs into a venv, offline (in a network namespace of its
#     own when the machine allows, else with no index): the wheel (make wheel) into a plain
#     venv, the source with --no-build-isolation --no-index into a --system-site-packages one.
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd; C=$BUILD/cjrelayctl; G=$ROOT/build/mangen; M=$ROOT/build/man
W=$(mktemp -d); PID=
PY=/usr/bin/python3
# the launcher imports FLARE: its stand-in (tests/flare) takes FLARE's place in the import checks
STANDIN=$ROOT/tests/flare
INSTALLED=
cleanup() {
    [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
    [ -n "${SIM:-}" ] && kill -9 "$SIM" 2>/dev/null
    [ -n "$INSTALLED" ] && dpkg --purge python3-cjrelay-flare cjrelay-tools cjrelay > /dev/null 2>&1
    rm -rf "$W"
}
trap cleanup EXIT

# ---- (a) the man pages ------------------------------------------------------------
[ -x "$G" ] || { fail "build/mangen is missing (make all builds it)"; finish; }
for p in man5/cjrelay.ini.5 man8/cjrelayd.8 man8/cjrelayctl.8; do
    [ -s "$M/$p" ] || { fail "build/man/$p is missing (make all builds it)"; finish; }
done

# page_items PAGE SECTION: the .B names under .TP in one .SH section of a page, roff escapes
# undone; a .SS [name] subsection prefixes its name ("relay.site").
page_items() {
    awk -v want="$2" '
        /^\.SH / { sec = substr($0, 5); sub_ = ""; next }
        sec != want { next }
        /^\.SS \[/ { sub_ = substr($0, 6); gsub(/[][]/, "", sub_); next }
        /^\.TP/ { tp = 1; next }
        tp && /^\.B / { s = substr($0, 4); gsub(/\\-/, "-", s); print (sub_ != "" ? sub_ "." : "") s }
        { tp = 0 }' "$1"
}
# same_set NAME EXPECTED ACTUAL: every line of each file is in the other
same_set() {
    sort -u "$2" > "$2.s"; sort -u "$3" > "$3.s"
    if cmp -s "$2.s" "$3.s" && [ -s "$2.s" ]; then pass "$1 ($(wc -l < "$2.s"))"
    else fail "$1: missing: $(comm -23 "$2.s" "$3.s" | tr '\n' ' ') extra: $(comm -13 "$2.s" "$3.s" | tr '\n' ' ')"; fi
}

"$G" list keys > "$W/keys"
page_items "$M/man5/cjrelay.ini.5" KEYS > "$W/page-keys"
same_set "cjrelay.ini(5) lists every config key of the table" "$W/keys" "$W/page-keys"

"$G" list commands > "$W/cmds"
# a command's usage line ("job stop <job_id> [reason]") starts with its name
page_items "$M/man8/cjrelayctl.8" COMMANDS | while read -r line; do
    while read -r c; do case "$line" in "$c"|"$c "*) echo "$c" ;; esac; done < "$W/cmds"
done > "$W/page-cmds"
same_set "cjrelayctl(8) lists every status command of the table" "$W/cmds" "$W/page-cmds"
# cjrelayctl --help: "  NAME ARGS  help" lines, two-word names included
$C --help | awk '/^  [a-z]/' > "$W/help"
while read -r c; do grep -q "^  $c\( \|$\)" "$W/help" && echo "$c"; done < "$W/cmds" > "$W/help-cmds"
same_set "cjrelayctl --help and the page name the same commands" "$W/cmds" "$W/help-cmds"

"$G" list shows > "$W/shows"
# the show targets follow the commands, in the same .SH COMMANDS section
page_items "$M/man8/cjrelayctl.8" COMMANDS | grep -vxF -f "$W/cmds" | grep -v ' ' > "$W/page-shows"
same_set "cjrelayctl(8) lists every show target" "$W/shows" "$W/page-shows"

"$G" list stats > "$W/stats"
page_items "$M/man8/cjrelayd.8" STATISTICS > "$W/page-stats"
same_set "cjrelayd(8) lists every stats field of the registry" "$W/stats" "$W/page-stats"

"$G" list exit | awk '$1 == "cjrelayd" {print $2}' > "$W/exit-d"
page_items "$M/man8/cjrelayd.8" "EXIT STATUS" > "$W/page-exit-d"
same_set "cjrelayd(8) lists every exit status" "$W/exit-d" "$W/page-exit-d"
"$G" list exit | awk '$1 == "cjrelayctl" {print $2}' > "$W/exit-c"
page_items "$M/man8/cjrelayctl.8" "EXIT STATUS" > "$W/page-exit-c"
same_set "cjrelayctl(8) lists every exit status" "$W/exit-c" "$W/page-exit-c"
"$G" list exit | awk '$1 == "job" {print $2}' > "$W/exit-j"
page_items "$M/man8/cjrelayctl.8" "JOB OUTCOMES" > "$W/page-exit-j"
same_set "cjrelayctl(8) lists every job outcome" "$W/exit-j" "$W/page-exit-j"

# The running daemon's own view: show config's keys and (spool mode: every section)
# show stats' fields must all be in the pages.
mkdir -p "$W/spool"
relay_ini "$W/r.ini" relay.mode=spool relay.spool_dir="$W/spool" relay.spool_allow_tmpfs=true \
    upstream.url=tcp://127.0.0.1:1 workers.listen="unix:$W/w.sock" status.socket="$W/s.sock"
$D -c "$W/r.ini" 2> "$W/d.log" & PID=$!
if wait_for 10 $C -s "$W/s.sock" show info; then
    $C -s "$W/s.sock" show config | awk 'NR > 1 {print $1}' > "$W/d-keys"
    same_set "show config's keys are the page's" "$W/page-keys" "$W/d-keys"
    $C -s "$W/s.sock" show stats | awk -F: '/^[a-z_]+: / {print $1}' > "$W/d-stats"
    same_set "show stats' fields are the page's" "$W/page-stats" "$W/d-stats"
else
    fail "the daemon did not answer on its status socket"; note "$W/d.log"
fi
kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=

# Each page renders without a warning from man/groff.
for p in man5/cjrelay.ini.5 man8/cjrelayd.8 man8/cjrelayctl.8; do
    if command -v man >/dev/null; then
        msg=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$M/$p" 2>&1 >/dev/null)
        if [ -z "$msg" ]; then pass "$p renders without warnings"; else fail "$p: $msg"; fi
    else skip "$p rendering (man is not installed)"; fi
done

# ---- (b) the packages -------------------------------------------------------------
need() { # need TOOL PACKAGE: 0 when TOOL is there or could be installed
    command -v "$1" >/dev/null && return 0
    [ "$(id -u)" = 0 ] || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1
    command -v "$1" >/dev/null
}
if ! need dpkg-buildpackage dpkg-dev || ! need dh debhelper; then
    skip "the packages (dpkg-buildpackage or debhelper missing and not installable)"; finish
fi
DEB=$ROOT/build/deb
changes=$(ls "$DEB"/cjrelay_*.changes 2>/dev/null | head -n 1)
stale=yes
if [ -n "$changes" ]; then
    stale=$(cd "$ROOT" && find lib cmd doc/man debian systemd conf Makefile README.md doc/interface.md integrations/flare \
                -newer "$changes" -type f 2>/dev/null | head -n 1)
fi
if [ -n "$stale" ]; then
    if make -s -C "$ROOT" deb JOBS=2 > "$W/deb.log" 2>&1; then pass "make deb builds the packages"
    else fail "make deb"; tail -n 40 "$W/deb.log" | note; finish; fi
else
    pass "make deb's packages are newer than every source (reused)"
fi
debf=$(ls "$DEB"/cjrelay_*.deb | head -n 1); tools=$(ls "$DEB"/cjrelay-tools_*.deb | head -n 1)
changes=$(ls "$DEB"/cjrelay_*.changes | head -n 1)
flare=$(ls "$DEB"/python3-cjrelay-flare_*_all.deb 2>/dev/null | head -n 1)
[ -n "$flare" ] || { fail "make deb built no python3-cjrelay-flare_*_all.deb"; finish; }

dpkg-deb -c "$debf" | awk '{print $6}' | sed 's|^\./||' > "$W/c-main"
dpkg-deb -c "$tools" | awk '{print $6}' | sed 's|^\./||' > "$W/c-tools"
for f in usr/bin/cjrelayd usr/bin/cjrelayctl lib/systemd/system/cjrelay.service \
         lib/systemd/system/cjrelay@.service usr/lib/sysusers.d/cjrelay.conf usr/lib/tmpfiles.d/cjrelay.conf \
         usr/share/man/man8/cjrelayd.8.gz usr/share/man/man8/cjrelayctl.8.gz usr/share/man/man5/cjrelay.ini.5.gz \
         usr/share/doc/cjrelay/examples/cjrelay.ini usr/share/doc/cjrelay/copyright etc/cjrelay/ \
         usr/share/doc/cjrelay/examples/lab-tcp.ini usr/share/doc/cjrelay/examples/site-mtls.ini \
         usr/share/doc/cjrelay/examples/spool.ini usr/share/doc/cjrelay/examples/stock-trainer-tcp.ini \
         usr/share/doc/cjrelay/examples/worker-accounts.conf.example usr/share/doc/cjrelay/examples/gpu.conf.example; do
    grep -qxF "$f" "$W/c-main" || echo "$f"
done > "$W/absent"
if [ -s "$W/absent" ]; then fail "cjrelay lacks: $(tr '\n' ' ' < "$W/absent")"; else pass "cjrelay holds the daemon, ctl, units, sysusers/tmpfiles, man pages, examples and drop-ins"; fi
check "cjrelay holds no test tool" sh -c "! grep -q 'cjrelay-sim\|cjrelay-worker' '$W/c-main'"
check "cjrelay-tools holds the simulator and the worker in /usr/lib/cjrelay" \
    sh -c "grep -qx usr/lib/cjrelay/cjrelay-sim '$W/c-tools' && grep -qx usr/lib/cjrelay/cjrelay-worker '$W/c-tools'"
check "cjrelay-tools puts nothing on the PATH" sh -c "! grep -q '^usr/bin/.\|^usr/sbin/.' '$W/c-tools'"

# python3-cjrelay-flare: every module of the source in Debian's dist-packages, comm_drivers/ a
# plain folder (FLARE imports each file in it as a top-level module: no __init__.py)
dpkg-deb -c "$flare" | awk '{print $6}' | sed 's|^\./||' > "$W/c-flare"
FD=usr/lib/python3/dist-packages/cjrelay_flare
(cd "$ROOT/integrations/flare" && find cjrelay_flare -name '*.py') > "$W/src-py"
sed -n 's|^usr/lib/python3/dist-packages/\(cjrelay_flare/.*\.py\)$|\1|p' "$W/c-flare" > "$W/deb-py"
same_set "python3-cjrelay-flare holds every module of the source in /usr/lib/python3/dist-packages" "$W/src-py" "$W/deb-py"
check "python3-cjrelay-flare: comm_drivers/ holds uds_driver.py and no __init__.py" \
    sh -c "grep -qx '$FD/comm_drivers/uds_driver.py' '$W/c-flare' && ! grep -q '$FD/comm_drivers/__init__' '$W/c-flare'"
check "python3-cjrelay-flare: its .dist-info, README and copyright; no bytecode (py3compile makes it at install)" \
    sh -c "grep -q '^usr/lib/python3/dist-packages/cjrelay_flare-.*\.dist-info/METADATA$' '$W/c-flare' && grep -qx usr/share/doc/python3-cjrelay-flare/README.md.gz '$W/c-flare' && grep -qx usr/share/doc/python3-cjrelay-flare/copyright '$W/c-flare' && ! grep -q '__pycache__\|\.pyc$' '$W/c-flare'"
check "python3-cjrelay-flare: Architecture all, Section python, Depends on python3" \
    sh -c "[ \"\$(dpkg-deb -f '$flare' Architecture)\" = all ] && [ \"\$(dpkg-deb -f '$flare' Section)\" = python ] && dpkg-deb -f '$flare' Depends | grep -q python3"
pyver=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/integrations/flare/pyproject.toml")
check "python3-cjrelay-flare's version $(dpkg-deb -f "$flare" Version) is pyproject.toml's ($pyver)" \
    sh -c "[ \"\$(dpkg-deb -f '$flare' Version)\" = '$pyver' ] && grep -q '^usr/lib/python3/dist-packages/cjrelay_flare-$pyver\.dist-info/' '$W/c-flare'"
check "the launcher is in python3-cjrelay-flare only" sh -c "! grep -q cjrelay_flare '$W/c-main' '$W/c-tools'"
mkdir -p "$W/xf"; dpkg-deb -x "$flare" "$W/xf"
check "the packages' copyright file is debian/copyright (Apache-2.0)" \
    sh -c "cmp -s '$ROOT/debian/copyright' '$W/xf/usr/share/doc/python3-cjrelay-flare/copyright' && dpkg-deb --fsys-tarfile '$debf' | tar -xOf - ./usr/share/doc/cjrelay/copyright | cmp -s - '$ROOT/debian/copyright'"
# imports_from DIR: $PY imports cjrelay_flare from DIR/cjrelay_flare (FLARE's stand-in on the path)
imports_from() {
    env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$STANDIN${2:+:$2}" $PY -c \
        "import cjrelay_flare; assert cjrelay_flare.__file__ == '$1/cjrelay_flare/__init__.py', cjrelay_flare.__file__"
}
if [ -x "$PY" ]; then
    check "the unpacked package's cjrelay_flare imports with $PY" \
        imports_from "$W/xf/usr/lib/python3/dist-packages" "$W/xf/usr/lib/python3/dist-packages"
fi

mkdir -p "$W/x" "$W/ctl"
dpkg-deb -x "$debf" "$W/x"; dpkg-deb -e "$debf" "$W/ctl"
for p in man8/cjrelayd.8 man8/cjrelayctl.8 man5/cjrelay.ini.5; do
    check "the package's $p is the generated page" sh -c "zcat '$W/x/usr/share/man/$p.gz' | cmp -s - '$M/$p'"
done
check "postinst creates the user (systemd-sysusers) before its directories (systemd-tmpfiles)" \
    sh -c "awk '/systemd-sysusers/ {u = NR} /systemd-tmpfiles/ {t = NR} END {exit !(u && t && u < t)}' '$W/ctl/postinst'"
# dh_installsystemd --no-enable: enable only what the admin had enabled before (debian-installed)
check "postinst does not enable the service (it needs a site's configuration)" \
    grep -q "deb-systemd-helper debian-installed 'cjrelay.service'" "$W/ctl/postinst"
check "Depends names a sysusers provider" sh -c "dpkg-deb -f '$debf' Depends | grep -q 'systemd-sysusers'"
check "the sysusers entry makes the cjrelay user and group" \
    sh -c "grep -q '^u cjrelay ' '$W/x/usr/lib/sysusers.d/cjrelay.conf' && grep -q '^g cjrelay ' '$W/x/usr/lib/sysusers.d/cjrelay.conf'"
if command -v systemd-sysusers >/dev/null; then
    mkdir -p "$W/root/etc"
    systemd-sysusers --root="$W/root" "$W/x/usr/lib/sysusers.d/cjrelay.conf" > "$W/su.log" 2>&1
    check "systemd-sysusers creates the system user cjrelay from it" \
        sh -c "awk -F: '\$1 == \"cjrelay\" && \$3 < 1000 && \$7 ~ /nologin/' '$W/root/etc/passwd' | grep -q ."
else skip "systemd-sysusers run (not installed)"; fi

U=$W/x/lib/systemd/system
check "both units run as User=cjrelay" sh -c "grep -qx User=cjrelay '$U/cjrelay.service' && grep -qx User=cjrelay '$U/cjrelay@.service'"
check "both units point at the man pages" sh -c "grep -q '^Documentation=man:cjrelayd(8)' '$U/cjrelay.service' && grep -q '^Documentation=man:cjrelayd(8)' '$U/cjrelay@.service'"
check "the units run /usr/bin/cjrelayd" sh -c "grep -q '^ExecStart=/usr/bin/cjrelayd ' '$U/cjrelay.service' && ! grep -q /usr/local '$U/cjrelay@.service'"
check "stopping cjrelay.service keeps the instances' /run/cjrelay/JOB" \
    sh -c "grep -qx RuntimeDirectoryPreserve=yes '$U/cjrelay.service' && grep -qx 'RuntimeDirectory=cjrelay/%i' '$U/cjrelay@.service' && ! grep -q '^RuntimeDirectoryPreserve' '$U/cjrelay@.service'"
check "the units keep their hardening" sh -c "for u in '$U'/*.service; do grep -qx ProtectSystem=strict \"\$u\" && grep -qx NoNewPrivileges=yes \"\$u\" && grep -qx CapabilityBoundingSet= \"\$u\" || exit 1; done"

if command -v systemd-analyze >/dev/null; then
    for u in cjrelay.service cjrelay@.service; do
        out=$W/$(echo "$u" | sed 's/@/@demo/')
        sed "s|/usr/bin/cjrelayd|$W/x/usr/bin/cjrelayd|g" "$U/$u" > "$out"
        if msg=$(MANPATH="$W/x/usr/share/man:" systemd-analyze verify "$out" 2>&1) && [ -z "$msg" ]; then
            pass "systemd-analyze verify the package's $u"
        else fail "systemd-analyze verify the package's $u: $msg"; fi
    done
else skip "systemd-analyze verify (systemd-analyze is not installed)"; fi

if [ -n "$stale" ] && grep -q "^	lintian --fail-on error,warning" "$ROOT/Makefile"; then
    pass "lintian: no error or warning (make deb above ran it with --fail-on error,warning)"
elif need lintian lintian; then
    if lintian --fail-on error,warning "$changes" > "$W/lintian" 2>&1; then pass "lintian: no error or warning"
    else fail "lintian"; note "$W/lintian"; fi
else skip "lintian (not installed and not installable)"; fi

# ---- make install: the daemon and ctl on the PATH, the test tools beside, not on it ----
if make -s -C "$ROOT" install DESTDIR="$W/inst" PREFIX=/usr/local > "$W/install.log" 2>&1; then
    check "make install: bin/ holds cjrelayd and cjrelayctl only ($(ls "$W/inst/usr/local/bin" | tr '\n' ' '))" \
        sh -c "[ \"\$(ls $W/inst/usr/local/bin | tr '\n' ' ')\" = 'cjrelayctl cjrelayd ' ]"
    check "make install: the simulator and the worker in lib/cjrelay" \
        sh -c "[ -x $W/inst/usr/local/lib/cjrelay/cjrelay-sim ] && [ -x $W/inst/usr/local/lib/cjrelay/cjrelay-worker ]"
    check "make install: the example files, the units and the man pages" \
        sh -c "ls $W/inst/usr/local/share/cjrelay/examples/lab-tcp.ini && ls $W/inst/usr/local/share/man/man8/cjrelayd.8 && find $W/inst -name cjrelay.service | grep -q ." 
else
    fail "make install DESTDIR=…"; tail -20 "$W/install.log" | note
fi
# the launcher: make install puts it in a directory /usr/bin/python3 searches, for PREFIX /usr/local
# (Debian: /usr/local/lib/python3.X/dist-packages) and /usr (/usr/lib/python3/dist-packages)
# launcher_dir INST: where under INST make install put cjrelay_flare (without INST)
launcher_dir() { (cd "$1" && find . -path '*/cjrelay_flare/__init__.py' | sed 's|^\.||; s|/cjrelay_flare/__init__.py$||'); }
if [ -x "$PY" ]; then
    make -s -C "$ROOT" install DESTDIR="$W/inst2" PREFIX=/usr > "$W/install2.log" 2>&1 || { fail "make install PREFIX=/usr"; note "$W/install2.log"; }
    for inst in "$W/inst:/usr/local" "$W/inst2:/usr"; do
        i=${inst%%:*}; pfx=${inst#*:}; d=$(launcher_dir "$i")
        check "make install PREFIX=$pfx: cjrelay_flare in ${d:-nowhere}, on $PY's sys.path" \
            $PY -c "import sys; sys.exit('$d' == '' or '$d' not in sys.path)"
        check "make install PREFIX=$pfx: comm_drivers/uds_driver.py without __init__.py, the .dist-info, no bytecode in a DESTDIR" \
            sh -c "[ -f '$i$d/cjrelay_flare/comm_drivers/uds_driver.py' ] && [ ! -e '$i$d/cjrelay_flare/comm_drivers/__init__.py' ] && ls -d '$i$d'/cjrelay_flare-*.dist-info && ! find '$i$d' -name '*.pyc' | grep -q ."
        check "make install PREFIX=$pfx: the installed cjrelay_flare imports with $PY" imports_from "$i$d" "$i$d"
    done
    # installed with no DESTDIR: byte-compiled; a directory off the interpreter's path is named
    make -s -C "$ROOT" install-flare PREFIX="$W/opt" > "$W/install3.log" 2>&1
    d=$(launcher_dir "$W/opt")
    check "make install-flare PREFIX=DIR: byte-compiled, and DIR's directory named as off $PY's path" \
        sh -c "[ -n '$d' ] && find '$W/opt' -name 'uds_driver.*.pyc' | grep -q . && grep -q 'install-flare: $W/opt.* is not on $PY.s path' '$W/install3.log'"
else skip "the launcher's make install ($PY missing)"; fi
# --help says in short what the page says: every option, the signals, the exit statuses, the pages
$D --help > "$W/dhelp" 2>&1
check "cjrelayd --help: options, signals, exit statuses and the man pages" \
    sh -c "grep -q -- '--check-config' $W/dhelp && grep -q -- '--config' $W/dhelp && grep -q -- '--version' $W/dhelp && grep -q '^signals:' $W/dhelp && grep -q '^  1  configuration error' $W/dhelp && grep -q 'cjrelayd(8)' $W/dhelp"

# ---- (c) installed, the demo as the service user ---------------------------------------
if [ "$(id -u)" != 0 ]; then
    skip "(c) installing the packages needs root"
elif dpkg -s cjrelay > /dev/null 2>&1; then
    skip "(c) cjrelay is already installed on this machine: not replaced"
else
    INSTALLED=1
    if dpkg -i "$debf" "$tools" "$flare" > "$W/dpkg.log" 2>&1; then pass "(c) dpkg -i installs cjrelay, cjrelay-tools and python3-cjrelay-flare"
    else fail "(c) dpkg -i"; tail -20 "$W/dpkg.log" | note; fi
    check "(c) the service user cjrelay exists: $(id cjrelay 2>&1)" id cjrelay
    chmod 755 "$W"; mkdir -p "$W/demo"; chown cjrelay:cjrelay "$W/demo"
    /usr/lib/cjrelay/cjrelay-sim --listen tcp://127.0.0.1:0 --job-id J1 --rounds 2 --model-size 8M --tensors 2 \
        > "$W/sim.out" 2> "$W/sim.err" & SIM=$!
    port=$(sim_port "$W/sim.out")
    relay_ini "$W/demo/demo.ini" upstream.url="tcp://127.0.0.1:$port" workers.listen="unix:$W/demo/w.sock" \
        workers.command="/bin/sh -c 'id -un > $W/demo/worker.user; exec /usr/lib/cjrelay/cjrelay-worker'" \
        status.socket="$W/demo/status.sock"
    setpriv --reuid=cjrelay --regid=cjrelay --init-groups /usr/bin/cjrelayd -c "$W/demo/demo.ini" > "$W/demo.log" 2>&1 & PID=$!
    wait_for 10 test -S "$W/demo/status.sock"
    check "(c) the installed daemon runs as cjrelay: $(ps -o user= -p "$PID" 2>/dev/null)" \
        sh -c "[ \"\$(ps -o user= -p $PID)\" = cjrelay ]"
    wait_for 60 sh -c "! kill -0 $SIM 2>/dev/null"
    check "(c) the demo's rounds verified through the installed daemon: $(tail -1 "$W/sim.out")" \
        grep -q '^SIM OK rounds=2' "$W/sim.out"
    check "(c) its worker ran as $(cat "$W/demo/worker.user" 2>/dev/null) too" sh -c "[ \"\$(cat $W/demo/worker.user)\" = cjrelay ]"
    kill -TERM "$PID" 2>/dev/null; wait_for 10 sh -c "! kill -0 $PID 2>/dev/null"; PID=
    check "(c) python3 -c 'import cjrelay_flare' with $PY: /$FD" imports_from "/usr/lib/python3/dist-packages"
    check "(c) its comm_drivers/: the uds driver, no __init__.py; FLARE's driver search registers it for uds" \
        env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$STANDIN" $PY -c "
import os
from nvflare.fuel.f3.drivers.driver_manager import DriverManager
d = '/$FD/comm_drivers'
assert os.path.isfile(d + '/uds_driver.py') and not os.path.exists(d + '/__init__.py')
m = DriverManager(); m.search_folder(d, None)
assert m.find_driver_class('uds').__name__ == 'CJRelayUdsDriver'"
    check "(c) py3compile byte-compiled it at install" sh -c "ls /$FD/__pycache__/launcher.*.pyc"
    if dpkg --purge python3-cjrelay-flare cjrelay-tools cjrelay > "$W/purge.log" 2>&1 && ! dpkg -s cjrelay > /dev/null 2>&1; then
        INSTALLED=; pass "(c) dpkg --purge removes the three"
    else fail "(c) dpkg --purge"; tail -20 "$W/purge.log" | note; fi
    check "(c) nothing of the launcher is left, its bytecode neither" \
        sh -c "[ ! -e /$FD ] && ! ls -d /usr/lib/python3/dist-packages/cjrelay_flare-* 2>/dev/null"
fi

# ---- (d) the launcher into a venv, as integrations/flare/README.md "Install" says -------------
# offline CMD...: CMD in a network namespace of its own (no route anywhere) when this machine
# lets us make one, else as it is (the commands name no index anyway)
if unshare -n true 2>/dev/null; then offline() { unshare -n "$@"; }; how="no network"
else offline() { "$@"; }; how="no index"; fi
# venv_imports VENV: VENV's python imports cjrelay_flare from VENV's own lib/, comm_drivers/ beside
venv_imports() {
    env PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$STANDIN" "$1/bin/python" -c "
import os, sys, cjrelay_flare
d = os.path.dirname(cjrelay_flare.__file__)
assert d.startswith(sys.prefix + '/lib/'), d
assert os.path.isfile(d + '/comm_drivers/uds_driver.py') and not os.path.exists(d + '/comm_drivers/__init__.py')"
}
PIPENV="env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_DISABLE_PIP_VERSION_CHECK=1"
if [ ! -x "$PY" ] || ! $PY -c 'import venv, ensurepip' 2>/dev/null; then
    skip "(d) the venv installs: $PY or its venv module (python3-venv) missing"
else
    if offline make -s -C "$ROOT" wheel > "$W/wheel.log" 2>&1 && $PY -m venv "$W/venv" > "$W/venv.log" 2>&1 &&
       whl=$(ls "$ROOT"/build/python/cjrelay_flare-*-py3-none-any.whl) &&
       offline $PIPENV "$W/venv/bin/pip" install -q --no-index "$whl" > "$W/pip1.log" 2>&1; then
        pass "(d) make wheel; a plain venv's pip install --no-index build/python/$(basename "$whl") ($how)"
        check "(d) ... cjrelay_flare imports in that venv, comm_drivers/ with it" venv_imports "$W/venv"
        $PIPENV "$W/venv/bin/pip" uninstall -q -y cjrelay-flare > "$W/pip1u.log" 2>&1
        check "(d) ... and pip uninstall cjrelay-flare removes it" \
            sh -c "! ls -d '$W'/venv/lib/python3*/site-packages/cjrelay_flare* 2>/dev/null"
    else
        fail "(d) make wheel, then a plain venv's pip install --no-index of the wheel ($how)"
        cat "$W/wheel.log" "$W/venv.log" "$W/pip1.log" 2>/dev/null | tail -20 | note
    fi
    cp -r "$ROOT/integrations/flare" "$W/src"   # pip builds in the source folder: a copy keeps the tree clean
    if $PY -m venv --system-site-packages "$W/svenv" > "$W/venv2.log" 2>&1 &&
       offline $PIPENV "$W/svenv/bin/pip" install -q --no-build-isolation --no-index "$W/src" > "$W/pip2.log" 2>&1; then
        pass "(d) a --system-site-packages venv's pip install --no-build-isolation --no-index ./integrations/flare ($how)"
        check "(d) ... cjrelay_flare imports in that venv, comm_drivers/ with it" venv_imports "$W/svenv"
    else
        fail "(d) a --system-site-packages venv's pip install --no-build-isolation --no-index ./integrations/flare ($how)"
        cat "$W/venv2.log" "$W/pip2.log" 2>/dev/null | tail -20 | note
    fi
fi
finish
