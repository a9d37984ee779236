# SPDX-License-Identifier: Apache-2.0
"""cjrelay_flare: hands a FLARE site's client jobs to the cjrelayd site daemon.

The client parent (CP) loads ``CJRelayJobLauncher`` from ``local/resources.json`` as its one
job launcher, on FLARE 2.7.2, 2.8.x and the development tree. Jobs whose client app runs its
trainer in an external process (the development tree's ``ClientAPIExecutor`` in
``external_process`` mode; 2.7.2/2.8.x's ``ClientAPILauncherExecutor`` with a
``SubprocessLauncher`` and ``CellPipe``) go to cjrelayd (``job start`` on its status socket);
every other job goes to FLARE's stock ``ClientProcessJobLauncher`` unchanged.
"""

from .handle import CJRelayJobHandle
from .launcher import CJRelayJobLauncher

__all__ = ["CJRelayJobLauncher", "CJRelayJobHandle"]
