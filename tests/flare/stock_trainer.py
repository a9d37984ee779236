# SPDX-License-Identifier: Apache-2.0
"""A stock FLARE trainer's start, up to its link to the job's cell, with FLARE's stand-in; then
the reference worker runs the job.

A trainer built on FLARE's Client API (``flare.init()``) reads its bootstrap file
(``NVFLARE_CLIENT_API_BOOTSTRAP``), makes its cell with the bootstrap's ``connect_url`` as its
parent URL, and links to it through the comm driver of that URL's scheme: one of FLARE's own
(tcp, stcp, grpc, grpcs, http, https) or one found on ``NVFLARE_COMM_DRIVER_PATH``. This script
does the same checks, in FLARE's words:

* the parent URL must have a scheme and a netloc, else FLARE's cell raises
  ``ValueError: <fqcn>: invalid Parent URL '<url>'`` (``unix:/path`` has no netloc);
* a driver must exist for the scheme;
* the link must come up (over the uds driver, through FLARE's SocketConnection).

It writes its environment to ``PREFIX.env`` and what it did to ``PREFIX.link``, and on success
execs WORKER (cjrelay's reference worker, which reads the same bootstrap file and runs the job).
On failure it prints the error on stderr and exits 1, as FLARE's trainer dies.

  stock_trainer.py PREFIX WORKER
"""

import json
import os
import queue
import socket
import sys
import threading
from urllib.parse import urlparse

from nvflare.fuel.f3.connection import ConnState
from nvflare.fuel.f3.drivers.connector_info import ConnectorInfo
from nvflare.fuel.f3.drivers.driver import ConnMonitor
from nvflare.fuel.f3.drivers.driver_manager import DriverManager
from nvflare.fuel.f3.drivers.net_utils import parse_url
from nvflare.fuel.utils.constants import Mode

FLARE_SCHEMES = ("tcp", "stcp", "grpc", "grpcs", "http", "https")


class _Monitor(ConnMonitor):
    def __init__(self):
        self.up = queue.Queue()

    def state_change(self, connection):
        if connection.state == ConnState.CONNECTED:
            self.up.put(connection)


def die(record: str, text: str):
    with open(record, "w") as f:
        f.write(text + "\n")
    print(text, file=sys.stderr, flush=True)
    sys.exit(1)


def link(boot: dict, record: str) -> str:
    """Up to the link to the parent, as FLARE's cell and connector get there."""
    url = boot.get("connect_url", "")
    parsed = urlparse(url)
    if not parsed.scheme or not parsed.netloc:
        die(record, f"ValueError: {boot.get('trainer_fqcn')}: invalid Parent URL '{url}'")
    if parsed.scheme in FLARE_SCHEMES:
        if parsed.scheme != "tcp":
            die(record, f"the stand-in links over tcp only, not {parsed.scheme}")
        with socket.create_connection((parsed.hostname, parsed.port), timeout=5):
            return f"tcp {parsed.hostname}:{parsed.port}"
    mgr = DriverManager()
    for folder in os.environ.get("NVFLARE_COMM_DRIVER_PATH", "").split(os.pathsep):
        if folder:
            mgr.search_folder(folder, None)
    cls = mgr.find_driver_class(url)
    if cls is None:
        die(record, f"CommError: no driver for scheme {parsed.scheme} (NVFLARE_COMM_DRIVER_PATH "
                    f"{os.environ.get('NVFLARE_COMM_DRIVER_PATH', '')!r})")
    driver, monitor = cls(), _Monitor()
    driver.register_conn_monitor(monitor)
    info = ConnectorInfo("trainer", driver, parse_url(url), Mode.ACTIVE, 0, 0, False, threading.Event())
    threading.Thread(target=driver.connect, args=(info,), daemon=True).start()
    try:
        monitor.up.get(timeout=5)
    except queue.Empty:
        die(record, f"CommError: cannot connect to {url}")
    driver.shutdown()
    return f"{parsed.scheme} {cls.__name__}"


def main(argv) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    prefix, worker = argv[1], argv[2]
    with open(prefix + ".env", "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in sorted(os.environ.items()))
    with open(os.environ["NVFLARE_CLIENT_API_BOOTSTRAP"]) as f:
        boot = json.load(f)
    how = link(boot, prefix + ".link")
    with open(prefix + ".link", "w") as f:
        f.write(f"linked {how}\n")
    sys.stdout.flush()
    os.execv(worker, [worker])
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
