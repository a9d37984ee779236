# SPDX-License-Identifier: Apache-2.0
"""cjrelay_flare: hands a FLARE site's client jobs to the cjrelayd site daemon.

The client parent (CP) loads ``CJRelayJobLauncher`` from ``local/resources.json`` as its one
job launcher. Jobs whose client app runs ``ClientAPIExecutor`` in ``external_process`` mode go
to cjrelayd (``job start`` on its status socket); every other job goes to FLARE's stock
``ClientProcessJobLauncher`` unchanged.
"""

from .handle import CJRelayJobHandle
from .launcher import CJRelayJobLauncher

__all__ = ["CJRelayJobLauncher", "CJRelayJobHandle"]
