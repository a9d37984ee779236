# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.drivers.driver (the Driver spec and ConnMonitor)."""

from abc import ABC, abstractmethod
from typing import Any, Dict, List

from nvflare.fuel.f3.connection import Connection, ConnState
from nvflare.fuel.f3.drivers.connector_info import ConnectorInfo  # noqa: F401


class ConnMonitor(ABC):
    @abstractmethod
    def state_change(self, connection: Connection):
        pass


class Driver(ABC):
    def __init__(self):
        self.state = ConnState.IDLE
        self.conn_monitor = None

    def get_name(self) -> str:
        return type(self).__name__

    @staticmethod
    @abstractmethod
    def supported_transports() -> List[str]:
        pass

    @staticmethod
    @abstractmethod
    def capabilities() -> Dict[str, Any]:
        pass

    @abstractmethod
    def listen(self, connector: ConnectorInfo):
        pass

    @abstractmethod
    def connect(self, connector: ConnectorInfo):
        pass

    @staticmethod
    @abstractmethod
    def get_urls(scheme: str, resources: dict) -> (str, str):
        pass

    @abstractmethod
    def shutdown(self):
        pass

    def register_conn_monitor(self, monitor: ConnMonitor):
        self.conn_monitor = monitor
