# SPDX-License-Identifier: Apache-2.0
"""A trainer's link to cjrelayd over cjrelay_flare's uds driver, with FLARE's stand-in.

The driver is found as FLARE finds it (DriverManager.search_folder on each folder of
NVFLARE_COMM_DRIVER_PATH, then the class for the URL's scheme), and its connections carry
SFM frames through FLARE's SocketConnection. Prints TAP lines ("ok - ..." / "not ok - ...").

  uds_peer.py relay URL HELLO_FILE  connect to cjrelayd's worker socket, send the HELLO frame
                                    in HELLO_FILE, expect READY; then PING, expect PONG
  uds_peer.py refused URL HELLO_FILE  the same HELLO, but the relay closes the link unanswered
  uds_peer.py loop DIR              listen() on DIR/loop.sock and connect() to it: frames both ways
"""

import os
import queue
import struct
import sys
import threading
import time
from urllib.parse import urlparse

from nvflare.fuel.f3.comm_error import CommError
from nvflare.fuel.f3.connection import ConnState, FrameReceiver
from nvflare.fuel.f3.drivers.connector_info import ConnectorInfo
from nvflare.fuel.f3.drivers.driver import ConnMonitor
from nvflare.fuel.f3.drivers.driver_manager import DriverManager
from nvflare.fuel.f3.drivers.net_utils import parse_url
from nvflare.fuel.utils.constants import Mode

HELLO, READY, PING, PONG = 4, 5, 6, 7
failures = 0


def tap(ok: bool, what: str):
    global failures
    failures += not ok
    print(("ok - " if ok else "not ok - ") + what, flush=True)


def frame(ftype: int, payload: bytes, seq: int) -> bytes:
    """An SFM frame with no header block: the 16-byte prefix, then the payload."""
    return struct.pack(">IHBBHHHH", 16 + len(payload), 0, ftype, 0, 0, 0, 1 if ftype in (HELLO, READY) else 17, seq) + payload


class Events(ConnMonitor, FrameReceiver):
    """Connections as the driver reports them, and the frames they carry."""

    def __init__(self):
        self.conns = queue.Queue()
        self.frames = queue.Queue()
        self.closed = threading.Event()

    def state_change(self, connection):
        if connection.state == ConnState.CONNECTED:
            connection.register_frame_receiver(self)
            self.conns.put(connection)
        elif connection.state == ConnState.CLOSED:
            self.closed.set()

    def process_frame(self, frame_bytes):
        self.frames.put(bytes(frame_bytes))


def load_driver(url: str):
    mgr = DriverManager()
    for folder in os.environ.get("NVFLARE_COMM_DRIVER_PATH", "").split(os.pathsep):
        if folder:
            mgr.search_folder(folder, None)
    cls = mgr.find_driver_class(url)
    tap(cls is not None and cls.__name__ == "CJRelayUdsDriver",
        f"NVFLARE_COMM_DRIVER_PATH yields the driver for {urlparse(url).scheme}:// ({cls and cls.__name__})")
    return cls


def start(cls, url: str, mode: Mode, events: Events):
    driver = cls()
    driver.register_conn_monitor(events)
    info = ConnectorInfo("h-" + mode.value, driver, parse_url(url), mode, 0, 0, False, threading.Event())
    errors = queue.Queue()

    def run():
        try:
            (driver.connect if mode == Mode.ACTIVE else driver.listen)(info)
        except Exception as ex:  # what FLARE's connector thread would log
            errors.put(ex)

    threading.Thread(target=run, daemon=True).start()
    return driver, errors


def frame_type(f: bytes) -> int:
    return f[6] if len(f) >= 16 else -1


def relay(url: str, hello_file: str, expect_refused: bool) -> None:
    parsed = urlparse(url)
    tap(bool(parsed.scheme and parsed.netloc), f"{url} has the scheme and netloc FLARE's cells require of a parent_url")
    cls = load_driver(url)
    if not cls:
        return
    ev = Events()
    driver, errors = start(cls, url, Mode.ACTIVE, ev)
    try:
        conn = ev.conns.get(timeout=5)
    except queue.Empty:
        tap(False, f"connected to {url} ({errors.get() if not errors.empty() else 'no connection'})")
        return
    tap(True, f"connected to {url} over AF_UNIX ({conn.get_conn_properties().get('peer_addr')})")
    with open(hello_file, "rb") as f:
        hello = f.read()
    try:
        conn.send_frame(hello)
    except CommError as ex:  # a refused peer may find the link closed already
        if not expect_refused:
            tap(False, f"HELLO sent ({ex})")
            return
    if expect_refused:
        tap(ev.closed.wait(5) and ev.frames.empty(), "the relay closed the link without answering the HELLO")
        driver.shutdown()
        return
    try:
        got = ev.frames.get(timeout=5)
    except queue.Empty:
        got = b""
    tap(frame_type(got) == READY and b"site-1.J1" in got, f"READY from the relay (type {frame_type(got)}, {len(got)} bytes)")
    conn.send_frame(frame(PING, b"\xc0", 2))
    try:
        got = ev.frames.get(timeout=5)
    except queue.Empty:
        got = b""
    tap(frame_type(got) == PONG and len(got) == 17, f"PONG to a PING (type {frame_type(got)}, {len(got)} bytes)")
    driver.shutdown()
    tap(ev.closed.wait(5), "shutdown() closes the connection")


def loop(folder: str) -> None:
    path = os.path.join(folder, "loop.sock")
    url = "uds:///" + path.lstrip("/")
    cls = load_driver(url)
    if not cls:
        return
    curl, lurl = cls.get_urls("uds", {"socket": path})
    tap(curl == lurl == "uds://" + path.lstrip("/"), f"get_urls names the socket: {curl}")
    server_ev, client_ev = Events(), Events()
    server, _ = start(cls, url, Mode.PASSIVE, server_ev)
    deadline = time.time() + 5
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)
    client, errors = start(cls, curl, Mode.ACTIVE, client_ev)
    try:
        cconn, sconn = client_ev.conns.get(timeout=5), server_ev.conns.get(timeout=5)
    except queue.Empty:
        tap(False, f"listen() accepted connect() ({errors.get() if not errors.empty() else 'timeout'})")
        return
    hello = frame(HELLO, b"\x81\xa4fqcn\xa1a", 1)
    cconn.send_frame(hello)
    got = server_ev.frames.get(timeout=5)
    sconn.send_frame(frame(READY, b"\x81\xa4fqcn\xa1b", 1))
    back = client_ev.frames.get(timeout=5)
    tap(got == hello and frame_type(back) == READY, "listen() and connect(): whole frames both ways")
    client.shutdown()
    server.shutdown()
    tap(not os.path.exists(path), "shutdown() removes the listener's socket file")
    _, errors = start(cls, url, Mode.ACTIVE, Events())
    try:
        err = errors.get(timeout=5)
    except queue.Empty:
        err = None
    tap(err is not None and "cannot connect" in str(err), f"connect() to a missing socket fails with CommError ({err})")


def main(argv) -> int:
    if len(argv) == 4 and argv[1] in ("relay", "refused"):
        relay(argv[2], argv[3], argv[1] == "refused")
    elif len(argv) == 3 and argv[1] == "loop":
        loop(argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
