# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.drivers.base_driver.BaseDriver (the connections table; each
change of a connection's state goes to the registered ConnMonitor)."""

import threading
from abc import ABC

from nvflare.fuel.f3.comm_error import CommError
from nvflare.fuel.f3.connection import Connection, ConnState
from nvflare.fuel.f3.drivers.driver import Driver


class BaseDriver(Driver, ABC):
    def __init__(self):
        super().__init__()
        self.connections = {}
        self.connector = None
        self.conn_lock = threading.Lock()

    def add_connection(self, conn: Connection):
        with self.conn_lock:
            self.connections[conn.name] = conn
        conn.state = ConnState.CONNECTED
        self._notify_monitor(conn)

    def close_connection(self, conn: Connection):
        conn.state = ConnState.CLOSED
        self._notify_monitor(conn)
        with self.conn_lock:
            self.connections.pop(conn.name, None)

    def close_all(self):
        with self.conn_lock:
            conns = list(self.connections.values())
        for conn in conns:
            conn.close()

    def _notify_monitor(self, conn: Connection):
        if not self.conn_monitor:
            raise CommError(CommError.ERROR, f"no connection monitor registered for {self.get_name()}")
        self.conn_monitor.state_change(conn)
