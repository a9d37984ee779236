#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cjrelay-sim on its own, without cjrelayd: the FL server is driven by
# `cjrelay-sim --drive`, a stand-in site playing relay and worker in one cell that
# speaks the same protocol (sync, poll, download, +1.0 result, task check, submit).
#   (a) --help documents every flag; --self-test (items byte-identical to
#       lib/payload/items.c); usage errors exit 2
#   (b) transport behaviour kept: SIM READY, echo, blob and ping through cjpeer
#   (c) FL rounds, safetensors and numpy: ROUND lines, RESULT lines, SIM OK, exit 0,
#       the download log names the downloader of every task ref, bytes = model
#   (d) a failed result is issued again; beyond --max-failures: SIM FAIL
#   (e) a corrupted result element: SIM FAIL naming the element, exit 1
#   (f) --isolate: the relay cell may download, a deeper cell is refused
#       (invalid_request, REFUSED line); --task-timeout then fails the round
#   (g) --inline tasks; --prebuild
#   (h) the sim's own memory stays near two items for a 256 MiB model
#   (i) without a relay it keeps waiting; SIGTERM: exit 0 when idle, 1 (SIM FAIL) mid-run
#   (j) download_service__source_failure (doc/protocol/download.md §2, §6.1 step 1): a notice from a
#       sibling of the source (not its FQCN parent) is refused (invalid_request with
#       cn__error, REFUSED line) and fails nothing; the parent's notice is accepted (ok,
#       SOURCE_FAILURE line) and fails the active result download at once with its
#       reason (well before --fetch-timeout); the same (source, ref) in the next result
#       fails before its first pull; the third attempt verifies
. "$(dirname "$0")/lib.sh"
S=$BUILD/cjrelay-sim; P=$BUILD/tests/e2e/cjpeer
W=$(mktemp -d); SIM=; DRV=
cleanup() {
    for p in $SIM $DRV; do kill -9 "$p" 2>/dev/null; done
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

count() { grep -c "$1" "$2"; }   # count PATTERN FILE

# start_sim NAME ARGS...: sim on a free port, output $W/NAME.sim; sets SIM and PORT.
start_sim() {
    _n=$1; shift
    $S --listen tcp://127.0.0.1:0 --job-id J1 "$@" > "$W/$_n.sim" 2> "$W/$_n.simerr" & SIM=$!
    PORT=$(sim_port "$W/$_n.sim") || { note "$W/$_n.simerr"; fail "$_n: sim starts"; finish; }
}
# drive NAME ARGS...: the stand-in site against the sim (foreground); DRC = its exit status.
drive() {
    _n=$1; shift
    timeout 120 $S --drive "tcp://127.0.0.1:$PORT" --job-id J1 "$@" > "$W/$_n.drive" 2> "$W/$_n.driveerr"
    DRC=$?
}
# sim_exit: waits up to 10 s for the sim to exit by itself; SRC = its exit status (124: still running).
sim_exit() {
    _i=0
    while kill -0 "$SIM" 2>/dev/null && [ $_i -lt 100 ]; do sleep 0.1; _i=$((_i + 1)); done
    if kill -0 "$SIM" 2>/dev/null; then kill -9 "$SIM"; wait "$SIM" 2>/dev/null; SRC=124
    else wait "$SIM"; SRC=$?; fi
    SIM=
}

# ---- (a) command line -------------------------------------------------------------
$S --help > "$W/help" 2>&1
check "(a) --help exits 0" [ $? -eq 0 ]
missing=
for f in $(sed -n 's/.*{"\([a-z-]*\)", *[a-z_]*_argument.*/\1/p' "$ROOT/cmd/cjrelay-sim/opts.c"); do
    grep -q -- "--$f" "$W/help" || missing="$missing $f"
done
check "(a) --help documents every flag${missing:+ (missing:$missing)}" [ -z "$missing" ]
check "(a) --help shows the output lines" grep -q 'ROUND r task=<id> tensors=N bytes=B served_to=' "$W/help"
$S --self-test > "$W/selftest" 2>&1
check "(a) --self-test: $(cat "$W/selftest")" grep -q '^SELF-TEST OK' "$W/selftest"
$S --listen tcp://127.0.0.1:0 > /dev/null 2>&1
check "(a) no --job-id: exit 2" [ $? -eq 2 ]
$S --listen tcp://127.0.0.1:0 --job-id J1 --model-size 3 > /dev/null 2>&1
check "(a) a model below 4 bytes per tensor: exit 2" [ $? -eq 2 ]
$S --listen tcp://127.0.0.1:0 --job-id J1 --format onnx > /dev/null 2>&1
check "(a) --format onnx: exit 2" [ $? -eq 2 ]

# ---- (b) transport behaviour ------------------------------------------------------
start_sim transport --rounds 1 --model-size 1M
check "(b) SIM READY with the real port ($PORT)" [ "$PORT" -gt 0 ]
$P --timeout 20 "tcp://127.0.0.1:$PORT" site-1.J1.w echo 300000 > "$W/echo.out" 2>> "$W/peer.err"
check "(b) test/echo answered: $(cat "$W/echo.out")" grep -q '^OK echo 300000' "$W/echo.out"
$P --timeout 20 "tcp://127.0.0.1:$PORT" site-1.J1.w blob 8M > "$W/blob.out" 2>> "$W/peer.err"
check "(b) test/blob answered: $(cut -c1-60 "$W/blob.out")" grep -q '^OK blob 8388608' "$W/blob.out"
$P --timeout 20 "tcp://127.0.0.1:$PORT" site-1.J1.w ping > "$W/ping.out" 2>> "$W/peer.err"
check "(b) task/ping answered" grep -q '^OK ping' "$W/ping.out"
sleep 1
check "(i) no relay, no task: the sim keeps waiting" kill -0 "$SIM"
kill -TERM "$SIM"; sim_exit
check "(i) SIGTERM with no run under way: exit 0 ($SRC)" [ "$SRC" -eq 0 ]

# ---- (c) FL rounds ---------------------------------------------------------------
for fmt in safetensors numpy; do
    A="--rounds 3 --model-size 6M --tensors 3 --format $fmt"
    start_sim "fl-$fmt" $A --download-log "$W/fl-$fmt.dl"
    drive "fl-$fmt" $A
    sim_exit
    f=$W/fl-$fmt.sim
    check "(c) $fmt: driver ends on __end_run__ ($DRC)" grep -q '^DRIVE END rounds=3' "$W/fl-$fmt.drive"
    check "(c) $fmt: sim exits 0 by itself after __end_run__ ($SRC)" [ "$SRC" -eq 0 ]
    check "(c) $fmt: SIM OK rounds=3" grep -q '^SIM OK rounds=3$' "$f"
    check "(c) $fmt: 3 verified ROUND lines" [ "$(grep -c '^ROUND [123] task=[0-9a-f-]* tensors=3 bytes=[0-9]* served_to=site-1.J1 result_from=site-1.J1 verified secs=[0-9.]* MiB/s=[0-9.]*$' "$f")" -eq 3 ]
    check "(c) $fmt: 3 RESULT lines naming where the result came from" [ "$(grep -c '^RESULT [123] .* from=site-1.J1 items=3 ' "$f")" -eq 3 ]
    bytes=$(awk '/^TASK 1 / {sub("bytes=", "", $7); print $7}' "$f")
    check "(c) $fmt: download log: 3 task refs, each by site-1.J1, $bytes bytes, ok" \
        [ "$(awk -v b="$bytes" '$2 == "site-1.J1" && $3 == b && $4 == "ok"' "$W/fl-$fmt.dl" | wc -l)" -eq 3 ]
    check "(c) $fmt: every ref in the log was one of the tasks" \
        sh -c "for r in \$(awk '{print \$1}' '$W/fl-$fmt.dl'); do grep -q \"^TASK .* ref=\$r \" '$f' || exit 1; done"
    dot=$(awk '/^DRIVE GOT 1 / {print $NF}' "$W/fl-$fmt.drive")
    check "(c) $fmt: the task's refs are $([ $fmt = numpy ] && echo 'DOT 3' || echo 'DOT 6') ($dot)" \
        [ "$dot" = "dot=$([ $fmt = numpy ] && echo 3 || echo 6)" ]
done

# ---- (d) failed results -----------------------------------------------------------
A="--rounds 3 --model-size 1M --tensors 2"
start_sim fail1 $A --max-failures 1
drive fail1 $A --drive-fail 2
sim_exit
check "(d) a failed round 2 is logged" grep -q '^ROUND 2 task=.* FAILED result __rc__ EXECUTION_EXCEPTION from site-1.J1' "$W/fail1.sim"
check "(d) ... and issued again as a new task" [ "$(grep -c '^TASK 2 ' "$W/fail1.sim")" -eq 2 ]
check "(d) ... then every round verifies: SIM OK, exit 0 ($SRC)" sh -c "grep -q '^SIM OK rounds=3' '$W/fail1.sim' && [ $SRC -eq 0 ]"
start_sim fail0 $A --max-failures 0
drive fail0 $A --drive-fail 1
sim_exit
check "(d) beyond --max-failures: SIM FAIL, exit 1 ($SRC)" \
    sh -c "grep -q '^SIM FAIL round 1: result __rc__ EXECUTION_EXCEPTION' '$W/fail0.sim' && [ $SRC -eq 1 ]"

# ---- (e) a wrong element ------------------------------------------------------------
start_sim corrupt $A
drive corrupt $A --drive-corrupt 2
sim_exit
check "(e) a corrupted result: SIM FAIL naming tensor and element, exit 1 ($SRC)" \
    sh -c "grep -q '^SIM FAIL round 2 task=.*layer0.weight.*element 999 is 2002.99902, want 2001.99902' '$W/corrupt.sim' && [ $SRC -eq 1 ]"
check "(e) round 1 had verified" grep -q '^ROUND 1 .* verified' "$W/corrupt.sim"

# ---- (f) --isolate ------------------------------------------------------------------
A="--rounds 2 --model-size 1M --tensors 2"
start_sim iso-ok $A --isolate
drive iso-ok $A
sim_exit
check "(f) --isolate: the relay cell site-1.J1 downloads, SIM OK ($SRC)" \
    sh -c "grep -q '^SIM OK rounds=2' '$W/iso-ok.sim' && ! grep -q REFUSED '$W/iso-ok.sim'"
start_sim iso-bad $A --isolate --task-timeout 2 --max-failures 0
drive iso-bad $A --drive-as site-1.J1.trainer
check "(f) --isolate: a worker cell's pull is answered invalid_request" \
    grep -q '^DRIVE FAIL round 1: task download failed: .*invalid_request' "$W/iso-bad.drive"
check "(f) ... and the sim prints REFUSED" grep -q '^REFUSED download from=site-1.J1.trainer ref=' "$W/iso-bad.sim"
sim_exit
check "(f) --task-timeout: the round fails, SIM FAIL, exit 1 ($SRC)" \
    sh -c "grep -q '^ROUND 1 task=.* FAILED no result after 2.0 s' '$W/iso-bad.sim' && [ $SRC -eq 1 ]"

# ---- (g) --inline ---------------------------------------------------------------------
for fmt in safetensors numpy; do
    A="--rounds 2 --model-size 2M --tensors 2 --format $fmt"
    start_sim "inline-$fmt" $A --inline
    drive "inline-$fmt" $A
    sim_exit
    check "(g) --inline $fmt: tensors in the task, SIM OK ($SRC)" \
        sh -c "grep -q '^SIM OK rounds=2' '$W/inline-$fmt.sim' && grep -q '^TASK 1 .* ref=inline ' '$W/inline-$fmt.sim' && grep -q '^DRIVE GOT 1 .* inline' '$W/inline-$fmt.drive'"
done

# --prebuild: the same items, built before the task goes out
A="--rounds 2 --model-size 8M --tensors 2 --format numpy"
start_sim prebuild $A --prebuild
drive prebuild $A
sim_exit
check "(g) --prebuild: items built ahead, every round verified, SIM OK ($SRC)" \
    sh -c "grep -q '^SIM OK rounds=2' '$W/prebuild.sim' && [ $SRC -eq 0 ]"

# ---- (h) memory ----------------------------------------------------------------------
A="--rounds 1 --model-size 256M --tensors 8"
start_sim mem $A
drive mem $A
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$SIM/status" 2>/dev/null)
sim_exit
check "(h) 256 MiB model verified" grep -q '^SIM OK rounds=1' "$W/mem.sim"
check "(h) sim VmHWM $((${hwm:-0} / 1024)) MiB < 160 MiB (items of 32 MiB are built on demand)" \
    [ "${hwm:-999999}" -lt $((160 * 1024)) ]

# ---- (i) a signal mid-run ------------------------------------------------------------
A="--rounds 2 --model-size 1M --tensors 2"
start_sim sig $A --isolate
drive sig $A --drive-as site-1.J1.x
kill -TERM "$SIM"; sim_exit
check "(i) SIGTERM during a run: SIM FAIL, exit 1 ($SRC)" \
    sh -c "grep -q '^SIM FAIL stopped by signal 15 after 0 of 2 rounds' '$W/sig.sim' && [ $SRC -eq 1 ]"

# ---- (j) source-failure notices --------------------------------------------------------
A="--rounds 3 --model-size 1M --tensors 2"
start_sim sf $A --max-failures 2 --fetch-timeout 30
t0=$(date +%s)
drive sf $A --drive-source-failure 2
dt=$(($(date +%s) - t0))
sim_exit
f=$W/sf.sim; g=$W/sf.drive
line() { grep -n "$1" "$f" | head -1 | cut -d: -f1; }   # line PATTERN: first line number in the sim's output
check "(j) the sibling's notice is refused: invalid_request naming the origin" \
    grep -q '^DRIVE NOTICE 2 from=site-1.J1.sf_sibling source=site-1.J1.sf_trainer rc=invalid_request error=origin site-1.J1.sf_sibling is not the parent of source site-1.J1.sf_trainer$' "$g"
check "(j) ... and the sim prints REFUSED" \
    grep -q '^REFUSED source_failure from=site-1.J1.sf_sibling source=site-1.J1.sf_trainer: origin site-1.J1.sf_sibling is not the parent' "$f"
check "(j) the parent's notice is answered ok" \
    grep -q '^DRIVE NOTICE 2 from=site-1.J1 source=site-1.J1.sf_trainer rc=ok error=-$' "$g"
check "(j) ... SOURCE_FAILURE line with the reason" \
    grep -q '^SOURCE_FAILURE from=site-1.J1 source=site-1.J1.sf_trainer refs=1 reason=sf_trainer killed by the drive (test)$' "$f"
ref=$(awk '/^DRIVE SF 2 attempt=1 / {sub("ref=", "", $6); print $6}' "$g")
check "(j) the active download of ref $ref fails with the notice's reason" \
    grep -q "^ROUND 2 task=.* FAILED downloading result ref $ref from site-1.J1.sf_trainer failed: sf_trainer killed by the drive (test) (source_failure notice from site-1.J1)\$" "$f"
r=$(line REFUSED); a=$(line '^SOURCE_FAILURE'); x=$(line '^ROUND 2 .* FAILED')
check "(j) ... only after the parent's notice, not the sibling's (lines $r < $a < $x)" \
    sh -c "[ ${r:-0} -gt 0 ] && [ ${a:-0} -gt ${r:-0} ] && [ ${x:-0} -gt ${a:-0} ]"
check "(j) ... at once: the whole run took $dt s (--fetch-timeout 30)" [ "$dt" -lt 15 ]
check "(j) ... the server had pulled once, no retry" \
    [ "$(grep -c '^DRIVE DROPPED sm__DATA download_service__download for site-1.J1.sf_trainer round=2 attempt=1$' "$g")" -eq 1 ]
check "(j) the tombstoned ref in the next result fails before its first pull" \
    grep -q "^ROUND 2 task=.* FAILED downloading result ref $ref from site-1.J1.sf_trainer failed: sf_trainer killed by the drive (test) (tombstoned by a source_failure notice; no request sent)\$" "$f"
check "(j) ... nothing was sent to the dead source for it" [ "$(grep -c 'attempt=2$' "$g")" -eq 0 ]
n=$(grep -c '^DRIVE SUBMITTED 2 .* rc=process_exception$' "$g")
check "(j) both failed attempts answered process_exception ($n), the third verified" \
    sh -c "[ $n -eq 2 ] && grep -q '^ROUND 2 .* verified' '$f'"
check "(j) SIM OK rounds=3, exit 0 ($SRC); DRIVE END ($DRC)" \
    sh -c "grep -q '^SIM OK rounds=3\$' '$f' && [ $SRC -eq 0 ] && grep -q '^DRIVE END rounds=3' '$g'"

finish
