# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.drivers.driver_params (the parameter and capability names)."""

from enum import Enum


class DriverParams(str, Enum):
    URL = "url"
    SCHEME = "scheme"
    HOST = "host"
    PORT = "port"
    PATH = "path"
    PARAMS = "params"
    FRAG = "frag"
    QUERY = "query"
    SECURE = "secure"
    SOCKET = "socket"
    LOCAL_ADDR = "local_addr"
    PEER_ADDR = "peer_addr"
    PEER_CN = "peer_cn"


class DriverCap(str, Enum):
    SEND_HEARTBEAT = "send_heartbeat"
    SUPPORT_SSL = "support_ssl"
