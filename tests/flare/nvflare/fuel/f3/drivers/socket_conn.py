# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.drivers.socket_conn (SocketConnection, ConnectionHandler).

The framing FLARE's stream drivers share: each SFM frame is sent whole, and read back by its
16-byte prefix, whose first 4 bytes (big-endian) are the whole frame's length."""

import socket
import struct
from socketserver import BaseRequestHandler

from nvflare.fuel.f3.comm_error import CommError
from nvflare.fuel.f3.connection import BytesAlike, Connection
from nvflare.fuel.f3.drivers.driver import ConnectorInfo
from nvflare.fuel.f3.drivers.driver_params import DriverParams
from nvflare.fuel.f3.drivers.net_utils import MAX_FRAME_SIZE

PREFIX_LEN = 16


class SocketConnection(Connection):
    def __init__(self, sock, connector: ConnectorInfo, secure: bool = False):
        super().__init__(connector)
        self.sock = sock
        self.secure = secure
        self.closing = False
        if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn_props = {DriverParams.PEER_ADDR.value: f"{sock.getpeername()}:{sock.fileno()}",
                           DriverParams.LOCAL_ADDR.value: f"{sock.getsockname()}:{sock.fileno()}"}

    def get_conn_properties(self) -> dict:
        return self.conn_props

    def close(self):
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def send_frame(self, frame: BytesAlike):
        try:
            self.sock.sendall(frame)
        except OSError as ex:
            raise CommError(CommError.CLOSED, f"{self.name}: {ex}")

    def read_loop(self):
        try:
            while not self.closing:
                self.process_frame(self.read_frame())
        except (CommError, OSError):
            pass

    def read_frame(self) -> BytesAlike:
        prefix = self._read(PREFIX_LEN)
        (length,) = struct.unpack(">I", prefix[:4])
        if length < PREFIX_LEN or length > MAX_FRAME_SIZE:
            raise CommError(CommError.BAD_DATA, f"frame length {length}")
        return prefix + self._read(length - PREFIX_LEN)

    def _read(self, n: int) -> bytearray:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise CommError(CommError.CLOSED, f"{self.name} closed by peer")
            buf += chunk
        return buf


class ConnectionHandler(BaseRequestHandler):
    def handle(self):
        connection = SocketConnection(self.request, self.server.connector, self.server.ssl_context)
        driver = self.server.driver
        driver.add_connection(connection)
        connection.read_loop()
        driver.close_connection(connection)
