# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.app_common.job_launcher.client_process_launcher.ClientProcessJobLauncher.

Runs no FLARE client job: it records the job id in ``launched`` (the tests read it) and
returns a handle over a process that exits 0 at once, so poll() gives SUCCESS.
"""

import subprocess
import sys

from nvflare.apis.event_type import EventType
from nvflare.apis.job_launcher_spec import JobHandleSpec, JobLauncherSpec, JobReturnCode, add_launcher


class _ProcessHandle(JobHandleSpec):
    def __init__(self, process):
        self.process = process

    def terminate(self):
        self.process.terminate()

    def poll(self):
        code = self.process.poll()
        if code is None:
            return JobReturnCode.UNKNOWN
        return {0: JobReturnCode.SUCCESS, 9: JobReturnCode.ABORTED}.get(code, JobReturnCode.EXECUTION_ERROR)

    def wait(self):
        self.process.wait()


class ClientProcessJobLauncher(JobLauncherSpec):
    launched = []

    def launch_job(self, job_meta: dict, fl_ctx):
        ClientProcessJobLauncher.launched.append(job_meta.get("job_id"))
        return _ProcessHandle(subprocess.Popen([sys.executable, "-c", "pass"]))

    def handle_event(self, event_type: str, fl_ctx):
        if event_type == EventType.BEFORE_JOB_LAUNCH:
            add_launcher(self, fl_ctx)
