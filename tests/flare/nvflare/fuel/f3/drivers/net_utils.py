# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.drivers.net_utils (MAX_FRAME_SIZE and parse_url)."""

from urllib.parse import parse_qsl, urlparse

from nvflare.fuel.f3.drivers.driver_params import DriverParams

MAX_FRAME_SIZE = 2 * 1024 * 1024 * 1024 - 2 * 1024 * 1024


def parse_url(url: str) -> dict:
    """The URL's parts as FLARE names them: netloc split at ':' into host and port
    (host "0" is the empty host), path, params, query (and its keys), fragment."""
    if not url:
        return {}
    u = urlparse(url)
    params = {DriverParams.URL.value: url, DriverParams.SCHEME.value: u.scheme}
    host, _, port = u.netloc.partition(":")
    params[DriverParams.HOST.value] = "" if host == "0" else host
    if port:
        params[DriverParams.PORT.value] = port
    params[DriverParams.PATH.value] = u.path
    params[DriverParams.PARAMS.value] = u.params
    params[DriverParams.QUERY.value] = u.query
    params[DriverParams.FRAG.value] = u.fragment
    params.update(dict(parse_qsl(u.query)))
    return params
