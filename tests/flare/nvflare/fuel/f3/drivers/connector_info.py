# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.drivers.connector_info.ConnectorInfo (a connector's fields)."""

from dataclasses import dataclass
from threading import Event

from nvflare.fuel.utils.constants import Mode


@dataclass
class ConnectorInfo:
    handle: str
    driver: "Driver"  # noqa: F821
    params: dict
    mode: Mode
    total_conns: int
    curr_conns: int
    started: bool
    stopped: Event

    def __str__(self):
        return f"[{self.handle} {self.mode.name} {self.params.get('url', '')}]"
