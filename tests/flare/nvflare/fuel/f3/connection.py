# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.connection (ConnState, FrameReceiver, the abstract Connection)."""

import itertools
from abc import ABC, abstractmethod
from enum import Enum
from typing import Union

from nvflare.fuel.f3.drivers.connector_info import ConnectorInfo, Mode  # noqa: F401

BytesAlike = Union[bytes, bytearray, memoryview, list]
_names = itertools.count(1)


class ConnState(Enum):
    IDLE = 1
    CONNECTED = 2
    CLOSED = 3


class FrameReceiver(ABC):
    @abstractmethod
    def process_frame(self, frame: BytesAlike):
        pass


class Connection(ABC):
    def __init__(self, connector: ConnectorInfo):
        self.name = "CN%05d" % next(_names)
        self.state = ConnState.IDLE
        self.frame_receiver = None
        self.connector = connector

    @abstractmethod
    def get_conn_properties(self) -> dict:
        pass

    @abstractmethod
    def close(self):
        pass

    @abstractmethod
    def send_frame(self, frame: BytesAlike):
        pass

    def register_frame_receiver(self, receiver: FrameReceiver):
        self.frame_receiver = receiver

    def process_frame(self, frame: BytesAlike):
        if self.frame_receiver:
            self.frame_receiver.process_frame(frame)

    def __str__(self):
        return f"[{self.name} {self.connector.params.get('url', '')}]"
