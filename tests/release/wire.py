# SPDX-License-Identifier: Apache-2.0
"""wire.py — cjrelay's release wire against FLARE's own cells (run by tests/e2e/test_release_wire.sh).

FLARE's code comes from NVFLARE_SRC (a FLARE source tree on sys.path, e.g. ../shared/flare/2.8.1): a
root cell `server` listening on loopback TCP and the job cell `server.J1` under it, as a FLARE server
runs them, with test handlers on `server.J1` (test/echo: the request's bytes back; test/pull: pull the
ref named in the body with FLARE's download_object, then answer "bytes=<n>"), a FLARE download
transaction to pull from, and observers that only record (FLARE's ACK handler and download handler
wrapped; its log). cjwire (tests/e2e/cjwire.c, the library's stream and download code) is the other
end, as the cell site-1.J1.w1. Prints TAP lines ("ok - ...", "not ok - ...").
"""
import argparse
import logging
import os
import subprocess
import sys
import threading
import time

MiB = 1 << 20
BIG = 24 * MiB   # over FLARE <= 2.8's 16 MiB window: the receiver must ACK on the way

_results = []


def check(ok, name, detail=""):
    _results.append(bool(ok))
    print(("ok - " if ok else "not ok - ") + name + (f" ({detail})" if detail and not ok else ""), flush=True)


class LogTap(logging.Handler):
    """Keeps FLARE's log lines that matter here."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        try:
            self.lines.append(record.getMessage())
        except Exception:
            pass

    def count(self, text):
        return sum(1 for line in self.lines if text in line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cjwire", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--version", required=True)
    args = ap.parse_args()

    tap = LogTap()
    logging.getLogger().addHandler(tap)
    logging.getLogger().setLevel(logging.DEBUG)
    for h in logging.getLogger().handlers:
        if h is not tap:
            h.setLevel(logging.WARNING)

    import nvflare
    from nvflare.fuel.f3.cellnet.cell import Cell
    from nvflare.fuel.f3.cellnet.defs import MessageHeaderKey, ReturnCode
    from nvflare.fuel.f3.cellnet.utils import make_reply, new_cell_message
    from nvflare.fuel.f3.streaming import byte_streamer, download_service
    from nvflare.fuel.f3.streaming.cacheable import CacheableObject, ItemConsumer
    from nvflare.fuel.f3.streaming.stream_const import StreamHeaderKey

    print(f"# FLARE {args.version} from {os.path.dirname(nvflare.__file__)}", flush=True)

    # observers: they record, then call FLARE's own code
    acks = []   # (sid, offset, has sm__sq, error)
    orig_ack = byte_streamer.ByteStreamer._ack_handler

    def ack_tap(message):
        acks.append((message.get_header(StreamHeaderKey.STREAM_ID), message.get_header(StreamHeaderKey.OFFSET),
                     message.get_header(StreamHeaderKey.SEQUENCE) is not None,
                     message.get_header(StreamHeaderKey.ERROR_MSG)))
        return orig_ack(message)

    byte_streamer.ByteStreamer._ack_handler = staticmethod(ack_tap)
    pulls = []   # payload keys of every download_service request
    orig_dl = download_service.DownloadService._handle_download.__func__

    def dl_tap(cls, request):
        pulls.append(sorted(request.payload.keys()) if isinstance(request.payload, dict) else ["?"])
        return orig_dl(cls, request)

    download_service.DownloadService._handle_download = classmethod(dl_tap)

    url = f"tcp://127.0.0.1:{args.port}"
    root = Cell(fqcn="server", root_url=url, secure=False, credentials={}, create_internal_listener=True)
    root.start()
    job = Cell(fqcn="server.J1", root_url=url, secure=False, credentials={}, create_internal_listener=False,
               parent_url=root.get_internal_listener_url())
    job.start()

    def echo(request):
        return new_cell_message({}, request.payload)

    class Blob(CacheableObject):
        def __init__(self, n):
            self.n = n
            super().__init__(n, 2 * MiB)

        def get_item_count(self):
            return (self.n + MiB - 1) // MiB

        def produce_item(self, index):
            k = min(MiB, self.n - index * MiB)
            return bytes([index & 0xFF]) * k

    class Count(ItemConsumer):
        def __init__(self):
            super().__init__()
            self.bytes = 0
            self.error = None

        def consume_items(self, items, result):
            self.bytes += sum(len(i) for i in items)
            return result

        def download_failed(self, ref_id, reason):
            self.error = reason

    served = {}

    def pull(request):
        ref = bytes(request.payload).decode()
        origin = request.get_header(MessageHeaderKey.ORIGIN)
        c = Count()
        t0 = time.time()
        download_service.download_object(origin, ref, 30.0, job, c)
        served["secs"] = time.time() - t0
        served["error"] = c.error
        return new_cell_message({}, f"bytes={c.bytes} error={c.error}".encode())

    job.register_request_cb(channel="test", topic="echo", cb=echo)
    job.register_request_cb(channel="test", topic="pull", cb=pull)
    done = threading.Event()
    tx_status = []
    tx = download_service.DownloadService.new_transaction(
        cell=job, timeout=30.0, num_receivers=1, transaction_done_cb=lambda tid, status, objs, **kw: (tx_status.append(status), done.set()))
    ref = download_service.DownloadService.add_object(tx, Blob(BIG + 12345))

    def run(*argv, wire28=True, timeout=60):
        opts = [a for a in argv if a.startswith("--")] and list(argv[:2]) or []
        rest = list(argv[len(opts):])
        cmd = [args.cjwire, "--timeout", "40"] + (["--wire28"] if wire28 else []) + opts + [url, "site-1.J1.w1", *rest]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out = (p.stdout.strip().splitlines() or [""])[-1]
        return p.returncode == 0 and out.startswith("OK"), out + (" | " + p.stderr.strip()[-300:] if p.stderr.strip() else ""), time.time() - t0

    time.sleep(0.5)
    # (a) 24 MiB each way: FLARE's receiver ACKs our sender without sm__sq; our receiver ACKs FLARE's
    # 16 MiB-window sender every <= 4 MiB, each with an integer sm__os
    ok, out, _ = run("echo", str(BIG))
    check(ok, "echo: 24 MiB to FLARE's job cell and 24 MiB back, identical", out)
    ours = [a for a in acks if a[3] is None]
    by_sid = {}
    for sid, off, _, _ in ours:
        by_sid.setdefault(sid, []).append(off)
    offs = max(by_sid.values(), key=len) if by_sid else []
    gaps = [b - a for a, b in zip([0] + offs, offs)]
    check(offs and offs[-1] == BIG and all(isinstance(o, int) for o in offs) and max(gaps) <= 4 * MiB,
          "our receiver ACKed FLARE's 24 MiB reply every <= 4 MiB, integer sm__os", f"offsets {offs}")

    # (b) a body FLARE cannot decode: its error notice (sm__ACK, sm__em, no sm__ri) fails our request at once
    ok, out, _ = run("bad", str(3 * MiB))
    check(ok, "bad body: FLARE's error on sm__ACK fails the request with comm_error at once", out)
    errs = [a for a in acks if a[3]]
    check(not errs, "no error notice from us reached FLARE's sender side")

    # (c) pull FLARE's ref: no confirm, no cancel; FLARE's transaction finishes
    n0 = len(pulls)
    ok, out, _ = run("pull", ref, str(BIG + 12345))
    check(ok, "pull: a FLARE ref of 24 MiB + 12345 bytes", out)
    mine = pulls[n0:]
    check(mine and all("confirm" not in k and "cancel" not in k for k in mine),
          f"no confirm or cancel among our {len(mine)} download requests", str(mine))
    done.wait(10)   # FLARE's monitor settles the transaction every 5 s
    check(tx_status == [download_service.TransactionDoneStatus.FINISHED],
          "FLARE's transaction finished with our one receiver", str(tx_status))

    # (d) FLARE's download_object pulls a ref of ours
    ok, out, _ = run("serve", str(BIG + 1))
    check(ok, "serve: FLARE's download_object pulls 24 MiB + 1 byte from our producer", out)

    # (e) what FLARE logged: with --wire28 no sm__ERROR ever reached it ("no callback"); a receiver error
    # of the development wire does (the negative control: an unknown-handler stream from FLARE to us)
    check(tap.count("no callback for request (sm__ERROR") == 0, "FLARE logged no sm__ERROR without a handler")

    # FLARE streams 24 MiB as a request to a topic we have no handler for: our receiver error on
    # sm__ACK stops its sender (blocked on its 16 MiB window) and fails the request at once; on the
    # 2.8 wire it goes on sm__ACK only, on the development wire also on sm__ERROR, which FLARE logs as
    # an error (the negative control)
    def unknown_from_flare(wire28):
        holder = {}
        before = tap.count("no callback for request (sm__ERROR")
        t = threading.Thread(target=lambda: holder.update(r=run("--linger", "2", "serve", "1", wire28=wire28)))
        t.start()
        time.sleep(0.5)
        t0 = time.time()
        reply = job.send_request(channel="nope", topic="nope", target="site-1.J1.w1",
                                 request=new_cell_message({}, b"x" * BIG), timeout=10.0)
        dt = time.time() - t0
        t.join()
        time.sleep(0.2)
        return reply.get_header(MessageHeaderKey.RETURN_CODE), dt, tap.count("no callback for request (sm__ERROR") - before

    rc, dt, logged = unknown_from_flare(True)
    check(rc != ReturnCode.OK and dt < 5 and logged == 0,
          "2.8 wire: FLARE's request to a topic we lack fails at once, no sm__ERROR logged by FLARE",
          f"rc={rc} {dt:.2f} s, {logged} lines")
    rc, dt, logged = unknown_from_flare(False)
    check(rc != ReturnCode.OK and dt < 5 and logged >= 1,
          "development wire (control): the same also sends sm__ERROR, which FLARE logs as an error",
          f"rc={rc} {dt:.2f} s, {logged} lines")

    # (f) the job's train.notify_job_status payload to its CP (lib/fl/cpmsg.c), decoded by FLARE's FOBS
    # as the CP's cell does, and read as its NotifyJobStatusProcessor reads it
    from nvflare.fuel.f3.cellnet.utils import decode_payload
    from nvflare.fuel.f3.message import Message as CellMessage
    from nvflare.private.admin_defs import Message as AdminMessage
    from nvflare.private.defs import RequestHeader, TrainingTopic

    for status in (2, 3):
        hexbody = subprocess.run([args.cjwire, "cpbody", "J1", str(status)], capture_output=True, text=True).stdout.strip()
        m = CellMessage({MessageHeaderKey.PAYLOAD_ENCODING: "fobs"}, bytes.fromhex(hexbody))
        decode_payload(m)
        req = m.payload
        check(isinstance(req, AdminMessage) and req.topic == TrainingTopic.NOTIFY_JOB_STATUS and req.body == ""
              and req.get_header(RequestHeader.JOB_ID) == "J1" and req.get_header(RequestHeader.JOB_STATUS) == status,
              f"notify_job_status {status}: FLARE decodes an admin_defs.Message with job_id and job_status",
              repr(getattr(req, "__dict__", req)))

    print(f"# pulls {len(pulls)}, acks {len(acks)}", flush=True)
    root.stop()
    job.stop()
    return 0 if all(_results) else 1


if __name__ == "__main__":
    try:
        rc = main()
    except Exception:
        import traceback

        traceback.print_exc()
        print("not ok - the harness failed (traceback on stderr)", flush=True)
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)   # FLARE's cell threads are not daemons: never wait for them
