# SPDX-License-Identifier: Apache-2.0
"""A FLARE comm driver for ``uds://``: SFM frames over Unix-domain stream sockets.

FLARE loads it from the folder ``NVFLARE_COMM_DRIVER_PATH`` names (this file's folder,
``cjrelay_flare/comm_drivers``): ``DriverManager.search_folder`` imports every ``*.py`` under
that folder as a top-level module and registers each concrete ``Driver`` subclass whose
constructor takes no argument, for the schemes of its ``supported_transports()``. So this
module imports only FLARE and the standard library (never ``cjrelay_flare`` itself), and the
folder holds nothing but drivers.

The frames are exactly those of ``tcp``: FLARE's own ``SocketConnection`` reads and writes
them, and this driver only opens the socket. A URL names an absolute socket path, its
leading slash optional: ``uds://run/cjrelay/j.sock`` and ``uds:///run/cjrelay/j.sock`` are
both ``/run/cjrelay/j.sock`` (cjrelayd writes the first, since FLARE's cells refuse a
``parent_url`` without a netloc). ``?`` and ``#`` end the path, as in any URL.

Both directions are offered, since FLARE's ``Driver`` requires both: ``connect()`` (what a
trainer does to reach cjrelayd's worker socket) and ``listen()`` (a socket file created with
the process's umask, removed at shutdown; an existing one is replaced only if nothing
accepts on it). No TLS: the socket file's mode and the peer's uid guard a Unix socket.
"""

import logging
import os
import socket
import stat
import tempfile
import uuid
from socketserver import ThreadingUnixStreamServer
from typing import Any, Dict, List

from nvflare.fuel.f3.comm_error import CommError
from nvflare.fuel.f3.drivers.base_driver import BaseDriver
from nvflare.fuel.f3.drivers.driver import ConnectorInfo
from nvflare.fuel.f3.drivers.driver_params import DriverCap, DriverParams
from nvflare.fuel.f3.drivers.socket_conn import ConnectionHandler, SocketConnection

log = logging.getLogger(__name__)

SCHEME = "uds"


def uds_socket_path(params: dict) -> str:
    """The socket path a connector's params name (its URL, else host and path)."""
    url = params.get(DriverParams.URL.value) or ""
    prefix = SCHEME + "://"
    if url.lower().startswith(prefix):
        rest = url[len(prefix):]
    else:
        rest = (params.get(DriverParams.HOST.value) or "") + (params.get(DriverParams.PATH.value) or "")
    for end in "?#":
        rest = rest.split(end, 1)[0]
    rest = rest.lstrip("/")
    if not rest:
        raise CommError(CommError.BAD_CONFIG, f"no socket path in {url or params!r}")
    return "/" + rest


def uds_url(path: str) -> str:
    """The URL of an absolute socket path, with the netloc FLARE's cells want."""
    return f"{SCHEME}://{path.lstrip('/')}"


def _remove_stale_socket(path: str):
    """Unlinks path if it is a socket nobody accepts on; refuses anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise CommError(CommError.BAD_CONFIG, f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)
        return
    finally:
        probe.close()
    raise CommError(CommError.BAD_CONFIG, f"{path}: another process listens on it")


class _UdsStreamServer(ThreadingUnixStreamServer):
    """Accepts into FLARE's ConnectionHandler, which reads server.driver,
    server.connector and server.ssl_context."""

    daemon_threads = True

    def __init__(self, driver: "CJRelayUdsDriver", connector: ConnectorInfo, path: str):
        self.driver = driver
        self.connector = connector
        self.ssl_context = None
        self.path = path
        _remove_stale_socket(path)
        super().__init__(path, ConnectionHandler)


class CJRelayUdsDriver(BaseDriver):
    """``uds://PATH``: FLARE's SFM framing over an AF_UNIX stream socket."""

    def __init__(self):
        super().__init__()
        self.server = None

    @staticmethod
    def supported_transports() -> List[str]:
        return [SCHEME]

    @staticmethod
    def capabilities() -> Dict[str, Any]:
        return {DriverCap.SEND_HEARTBEAT.value: True, DriverCap.SUPPORT_SSL.value: False}

    def listen(self, connector: ConnectorInfo):
        self.connector = connector
        path = uds_socket_path(connector.params)
        self.server = _UdsStreamServer(self, connector, path)
        log.debug(f"listening on {uds_url(path)}")
        self.server.serve_forever()

    def connect(self, connector: ConnectorInfo):
        self.connector = connector
        path = uds_socket_path(connector.params)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as ex:
            sock.close()
            raise CommError(CommError.ERROR, f"cannot connect to {uds_url(path)}: {ex}")
        connection = SocketConnection(sock, connector, False)
        self.add_connection(connection)
        connection.read_loop()
        self.close_connection(connection)

    def shutdown(self):
        self.close_all()
        server, self.server = self.server, None
        if server:
            server.shutdown()
            server.server_close()
            try:
                os.unlink(server.path)
            except FileNotFoundError:
                pass

    @staticmethod
    def get_urls(scheme: str, resources: dict) -> (str, str):
        """One URL for both ends: the resources' ``socket`` path, else a new one in the temp dir."""
        path = (resources or {}).get(DriverParams.SOCKET.value)
        if not path:
            path = os.path.join(tempfile.gettempdir(), f"nvflare-{uuid.uuid4().hex[:12]}.sock")
        url = uds_url(os.path.abspath(path))
        return url, url
