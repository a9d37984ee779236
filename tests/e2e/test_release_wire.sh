#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The release wire (doc/protocol/streaming.md §11, doc/protocol/download.md §10) against FLARE's own
# cells: tests/release/wire.py runs a stock FLARE root cell `server` and job cell `server.J1` of each
# release tree ($FLARE_DIR/2.8.1 and 2.7.2, FLARE_DIR default ../shared/flare) on loopback TCP; cjwire (the
# library's stream and download code, cj_stream_set_wire CJ_STREAM_WIRE_2_8) is site-1.J1.w1:
# (a) 24 MiB each way through test/echo: FLARE's ACKs without sm__sq move our sender; ours ACK its
#     16 MiB-window sender every <= 4 MiB
# (b) a body FLARE's handler cannot decode: its error notice (sm__ACK, sm__id, no sm__ri, after the
#     stream completed) fails our request with comm_error at once
# (c) we pull a FLARE ref (download_service): no confirm, no cancel, its transaction finishes
# (d) FLARE's download_object pulls a ref from our producer
# (e) FLARE's request to a topic we lack fails at once on our sm__ACK error, and FLARE logs no
#     sm__ERROR without a handler; the development wire (control) sends one, which FLARE logs
# (f) a job's train.notify_job_status payload (STARTED, STOPPED) decodes with FLARE's FOBS into the
#     admin_defs.Message the CP reads (job_id, job_status)
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
if [ ! -x "$PY" ]; then skip "all: $PY missing (tests/deps.sh installs python3)"; finish; fi
export PYTHONDONTWRITEBYTECODE=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for v in 2.8.1 2.7.2; do
    FL=${FLARE_DIR:-$ROOT/../shared/flare}/$v
    if [ ! -d "$FL/nvflare" ]; then skip "$v: no FLARE tree at $FL"; continue; fi
    PORT=$($BUILD/tests/e2e/cjpeer freeport)
    PYTHONPATH=$FL timeout 120 $PY "$ROOT/tests/release/wire.py" --cjwire "$BUILD/tests/e2e/cjwire" --port "$PORT" \
        --version "$v" > "$W/$v.tap" 2> "$W/$v.log"
    tap_results "$v" $? "$W/$v.tap" "$W/$v.log" "tests/release/wire.py"
done
finish
