#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cjrelay-sim serving several jobs at once and playing the site's client parent
# (--parent: the cell <site>, doc/protocol/site.md §3), driven by stand-in sites
# (`cjrelay-sim --drive ... --drive-parent ...`), one per job:
#   (a) usage: --abort-job without --parent, a job given twice, --drive with two
#       jobs, a bad J@R, a --parent that is not tcp://: exit 2
#   (b) three jobs through one simulator at once: each job's rounds verified
#       (ROUND lines tagged job=Jn, SIM DONE per job, SIM OK jobs=3, exit 0);
#       notify_job_status STARTED and STOPPED from each job recorded (the
#       --job-status-log lines and SIM JOB_STATUS); show_stats sent to each job
#       once after its STARTED and answered (SIM SHOW_STATS ... rc=ok keys=...)
#   (c) --abort-job J2@2: client_command/abort reaches site-1.J2 only, after its
#       round 2 task went out; J2 answers with STOPPED and ends as aborted, J1
#       runs all its rounds; --abort-task J1@2 reaches J1 only; SIM OK jobs=2
#   (d) routing at the parent: a request for a cell nobody has gets a RETURN
#       (comm_error) from the parent, one for <site> itself process_exception,
#       one for server.<job> sent up through the parent is answered by the
#       server cell, one for a sibling child is forwarded to it and its answer
#       back
#   (e) an abort for a job not connected to the parent cannot be sent: that job
#       fails while the other verifies: SIM FAIL job=J2 ..., SIM FAIL jobs=2
#       failed=J2, exit 1
. "$(dirname "$0")/lib.sh"
S=$BUILD/cjrelay-sim; P=$BUILD/tests/e2e/cjpeer
W=$(mktemp -d); SIM=; DRV=
cleanup() {
    for p in $SIM $DRV; do kill -9 "$p" 2>/dev/null; done
    if [ -n "$KEEP" ]; then echo "# kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

A="--model-size 1M --tensors 2"

# start_sim NAME ARGS...: sim with a parent on free ports; sets SIM, PORT, PPORT.
start_sim() {
    _n=$1; shift
    $S --listen tcp://127.0.0.1:0 --parent tcp://127.0.0.1:0 --job-status-log "$W/$_n.status" "$@" \
        > "$W/$_n.sim" 2> "$W/$_n.simerr" & SIM=$!
    PORT=$(sim_port "$W/$_n.sim") || { note "$W/$_n.simerr"; fail "$_n: sim starts"; finish; }
    PPORT=$(awk '/^SIM PARENT/ {print $3}' "$W/$_n.sim")
}
# drives NAME JOB... -- ARGS: one stand-in site per job, in parallel, waited for.
drives() {
    _n=$1; shift; _jobs=
    while [ "$1" != -- ]; do _jobs="$_jobs $1"; shift; done; shift
    DRV=
    for j in $_jobs; do
        timeout 120 $S --drive "tcp://127.0.0.1:$PORT" --drive-parent "tcp://127.0.0.1:$PPORT" --job-id "$j" "$@" \
            > "$W/$_n.$j.drive" 2> "$W/$_n.$j.driveerr" & DRV="$DRV $!"
    done
    for p in $DRV; do wait "$p"; done
    DRV=
}
# sim_exit SECS: waits for the sim to exit by itself; SRC = its exit status (124: still running).
sim_exit() {
    _i=0
    while kill -0 "$SIM" 2>/dev/null && [ $_i -lt $(($1 * 10)) ]; do sleep 0.1; _i=$((_i + 1)); done
    if kill -0 "$SIM" 2>/dev/null; then kill -9 "$SIM"; wait "$SIM" 2>/dev/null; SRC=124
    else wait "$SIM"; SRC=$?; fi
    SIM=
}

# ---- (a) usage --------------------------------------------------------------------
usage() { # usage NAME ARGS...: the sim must refuse them with exit 2
    _n=$1; shift
    $S "$@" > /dev/null 2>&1
    check "(a) $_n: exit 2" [ $? -eq 2 ]
}
usage "--abort-job without --parent" --listen tcp://127.0.0.1:0 --job-id J1 --abort-job J1@1
usage "a job given twice" --listen tcp://127.0.0.1:0 --job-id J1,J2 --job-id J1
usage "--drive with two jobs" --drive tcp://127.0.0.1:1 --job-id J1,J2
usage "--abort-job J1 (no @R)" --listen tcp://127.0.0.1:0 --parent tcp://127.0.0.1:0 --job-id J1 --abort-job J1
usage "--abort-job for a job not served" --listen tcp://127.0.0.1:0 --parent tcp://127.0.0.1:0 --job-id J1 --abort-job J3@1
usage "--parent stcp://" --listen tcp://127.0.0.1:0 --parent stcp://127.0.0.1:0 --job-id J1

# ---- (b) three jobs at once ----------------------------------------------------------
start_sim three --job-id J1,J2,J3 --rounds 2 $A
check "(b) SIM PARENT with the parent's port ($PPORT)" [ "${PPORT:-0}" -gt 0 ]
drives three J1 J2 J3 -- --rounds 2 $A
sim_exit 10
f=$W/three.sim
for j in J1 J2 J3; do
    check "(b) $j: driver ends on __end_run__" grep -q '^DRIVE END rounds=2$' "$W/three.$j.drive"
    check "(b) $j: 2 rounds verified, each downloaded and sent back by site-1.$j" \
        [ "$(grep -c "^ROUND [12] job=$j task=.* served_to=site-1.$j result_from=site-1.$j verified " "$f")" -eq 2 ]
    check "(b) $j: SIM DONE job=$j rounds=2" grep -q "^SIM DONE job=$j rounds=2\$" "$f"
    check "(b) $j: STARTED then STOPPED in the status log, from site-1.$j" \
        sh -c "[ \"\$(grep '^$j ' '$W/three.status' | tr '\n' ' ')\" = '$j 2 site-1.$j $j 3 site-1.$j ' ]"
    check "(b) $j: SIM JOB_STATUS 2 and 3" \
        sh -c "grep -q '^SIM JOB_STATUS $j 2 from=site-1.$j\$' '$f' && grep -q '^SIM JOB_STATUS $j 3 from=site-1.$j\$' '$f'"
    check "(b) $j: the notices were answered ok" \
        sh -c "grep -q '^DRIVE NOTIFIED 2 rc=ok' '$W/three.$j.drive' && grep -q '^DRIVE NOTIFIED 3 rc=ok' '$W/three.$j.drive'"
    check "(b) $j: show_stats sent once, answered" \
        sh -c "[ \$(grep -c '^SIM SHOW_STATS $j ' '$f') -eq 1 ] && grep -q '^SIM SHOW_STATS $j rc=ok keys=cell,rounds_done,status\$' '$f'"
done
check "(b) no round of one job went to another job's site" \
    sh -c "! grep -E '^TASK [0-9]+ job=(J[0-9]) .* to=site-1\.' '$f' | grep -vE 'job=(J[0-9]) .*to=site-1\.\1 '"
check "(b) SIM OK jobs=3 the last SIM line, exit 0 ($SRC)" sh -c "[ \"\$(grep '^SIM ' '$f' | tail -1)\" = 'SIM OK jobs=3' ] && [ $SRC -eq 0 ]"

# ---- (c) abort one job of two -----------------------------------------------------------
start_sim abort --job-id J1,J2 --rounds 3 $A --abort-job J2@2 --abort-task J1@2
drives abort J1 J2 -- --rounds 3 $A
sim_exit 15
f=$W/abort.sim; d1=$W/abort.J1.drive; d2=$W/abort.J2.drive
check "(c) SIM ABORT J2 after its round 2 task went out" \
    sh -c "grep -q '^SIM ABORT J2 round=2 to=site-1.J2\$' '$f' && [ \$(grep -n '^TASK 2 job=J2 ' '$f' | cut -d: -f1) -lt \$(grep -n '^SIM ABORT J2 ' '$f' | cut -d: -f1) ]"
check "(c) J2's site got the abort in round 2, sent STOPPED, ended" \
    sh -c "grep -q '^DRIVE ABORT from=site-1 round=2\$' '$d2' && grep -q '^DRIVE NOTIFIED 3 rc=ok' '$d2' && grep -q '^DRIVE END aborted rounds=1\$' '$d2'"
check "(c) J2 ends as aborted at its STOPPED" grep -q '^SIM ABORTED job=J2 round=2: STOPPED from site-1.J2 ' "$f"
check "(c) J2's status log: STARTED, STOPPED" \
    sh -c "[ \"\$(grep '^J2 ' '$W/abort.status' | tr '\n' ' ')\" = 'J2 2 site-1.J2 J2 3 site-1.J2 ' ]"
check "(c) J1 never got an abort" sh -c "! grep -q '^DRIVE ABORT ' '$d1'"
check "(c) abort_task went to J1 only" \
    sh -c "grep -q '^SIM ABORT_TASK J1 round=2 to=site-1.J1\$' '$f' && grep -q '^DRIVE ABORT_TASK from=site-1 round=2\$' '$d1' && ! grep -q ABORT_TASK '$d2'"
check "(c) J1 ran its 3 rounds: SIM DONE job=J1 rounds=3" \
    sh -c "grep -q '^SIM DONE job=J1 rounds=3\$' '$f' && grep -q '^DRIVE END rounds=3\$' '$d1'"
check "(c) SIM OK jobs=2 the last SIM line, exit 0 ($SRC)" sh -c "[ \"\$(grep '^SIM ' '$f' | tail -1)\" = 'SIM OK jobs=2' ] && [ $SRC -eq 0 ]"

# ---- (d) routing at the parent --------------------------------------------------------------
start_sim route --job-id J1 --rounds 1000 --wait-time 0.1 --model-size 8 --tensors 2
timeout 120 $S --drive "tcp://127.0.0.1:$PORT" --drive-parent "tcp://127.0.0.1:$PPORT" --job-id J1 --rounds 1000 \
    --model-size 8 --tensors 2 > "$W/route.J1.drive" 2>&1 & DRV=$!
wait_for 10 grep -q '^DRIVE NOTIFIED 2 rc=ok' "$W/route.J1.drive"
check "(d) J1 is connected to the parent and STARTED" grep -q '^DRIVE NOTIFIED 2 rc=ok' "$W/route.J1.drive"
$P --timeout 10 --server site-1.J7 "tcp://127.0.0.1:$PPORT" site-1.J9 ping > "$W/r1.out" 2>&1
check "(d) a request for an unknown cell: RETURN from the parent ($(head -1 "$W/r1.out"))" \
    grep -q 'RETURN from site-1: comm_error' "$W/r1.out"
$P --timeout 10 --server site-1 "tcp://127.0.0.1:$PPORT" site-1.J9 ping > "$W/r2.out" 2>&1
check "(d) a request for <site> it has no callback for: process_exception ($(head -1 "$W/r2.out"))" \
    grep -q 'rc=process_exception' "$W/r2.out"
$P --timeout 10 --server server.J1 "tcp://127.0.0.1:$PPORT" site-1.J9 ping > "$W/r3.out" 2>&1
check "(d) a request for server.J1 through the parent is answered by the server cell" grep -q '^OK ping' "$W/r3.out"
$P --timeout 10 --server site-1.J1 "tcp://127.0.0.1:$PPORT" site-1.J9 ping > "$W/r4.out" 2>&1
check "(d) a request for the sibling site-1.J1 is forwarded to it and its answer back" \
    sh -c "grep -q 'rc=process_exception' '$W/r4.out' && grep -q '^DRIVE REQUEST task/ping from=site-1.J9 via parent: no callback\$' '$W/route.J1.drive'"
kill -TERM "$SIM"; sim_exit 10
check "(d) SIGTERM mid-run: SIM FAIL, exit 1 ($SRC)" \
    sh -c "grep -q '^SIM FAIL stopped by signal 15 after' '$W/route.sim' && [ $SRC -eq 1 ]"
wait "$DRV"; DRV=

# ---- (e) an abort never acknowledged ---------------------------------------------------------
start_sim noack --job-id J1,J2 --rounds 2 $A --abort-job J2@1
timeout 60 $S --drive "tcp://127.0.0.1:$PORT" --job-id J2 --rounds 2 $A > "$W/noack.J2.drive" 2>&1 & DRV=$!
timeout 60 $S --drive "tcp://127.0.0.1:$PORT" --drive-parent "tcp://127.0.0.1:$PPORT" --job-id J1 --rounds 2 $A \
    > "$W/noack.J1.drive" 2>&1
sim_exit 20
kill "$DRV" 2>/dev/null; wait "$DRV" 2>/dev/null; DRV=
f=$W/noack.sim
check "(e) J2 has no child link at the parent: the abort is not sent, J2 fails" \
    grep -q '^SIM FAIL job=J2 abort at round 1: site-1.J2 not connected to the parent$' "$f"
check "(e) J1 verifies anyway" grep -q '^SIM DONE job=J1 rounds=2$' "$f"
check "(e) SIM FAIL jobs=2 failed=J2, exit 1 ($SRC)" sh -c "[ \"\$(grep '^SIM ' '$f' | tail -1)\" = 'SIM FAIL jobs=2 failed=J2' ] && [ $SRC -eq 1 ]"

finish
