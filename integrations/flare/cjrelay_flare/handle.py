# SPDX-License-Identifier: Apache-2.0
"""The JobHandleSpec of a job cjrelayd runs: poll, wait and terminate over the status socket.

``poll()`` reads ``show jobs json``; ``wait()`` sends ``job wait`` (answered at the job's
end, without a time bound); ``terminate()`` sends ``job stop``. The outcome cjrelayd gives is
already a JobReturnCode (0, 1, 9, 104, ...). A daemon that cannot be asked any more, or
that no longer knows the job, gives INFRASTRUCTURE_ERROR (104): the CP then fails the job.
"""

import logging
import threading
import time

from nvflare.apis.job_launcher_spec import JobHandleSpec, JobReturnCode

from .status import DaemonRefused, DaemonUnavailable, StatusClient

_KNOWN_CODES = {int(getattr(JobReturnCode, n)) for n in dir(JobReturnCode) if n.isupper()}


def return_code(outcome) -> int:
    """cjrelayd's outcome as a JobReturnCode; anything unknown is EXECUTION_ERROR."""
    try:
        code = int(outcome)
    except (TypeError, ValueError):
        return JobReturnCode.UNKNOWN
    return code if code in _KNOWN_CODES else JobReturnCode.EXECUTION_ERROR


class CJRelayJobHandle(JobHandleSpec):
    """One job started with ``job start``; ``client`` is the launcher's StatusClient."""

    def __init__(self, job_id: str, client: StatusClient, logger=None, wait_retry: float = 1.0):
        super().__init__()
        self.job_id = job_id
        self.client = client
        self.logger = logger or logging.getLogger(self.__class__.__name__)
        self.wait_retry = wait_retry
        self._lock = threading.Lock()
        self._code = None  # set once the job's end is known
        self.reason = ""

    def _ended(self, code, reason):
        with self._lock:
            if self._code is None:
                self._code = code
                self.reason = reason
                log = self.logger.info if code == JobReturnCode.SUCCESS else self.logger.error
                log(f"cjrelay job {self.job_id} ended: return code {code} ({reason})")
            return self._code

    def poll(self):
        """The JobReturnCode once the job has ended; UNKNOWN (127) while it runs, as FLARE's
        ProcessHandle answers for a process still running."""
        if self._code is not None:
            return self._code
        try:
            rows = job_rows(self.client)
        except (DaemonUnavailable, DaemonRefused) as e:
            self.logger.error(f"cjrelay job {self.job_id}: cannot poll: {e}")
            return self._ended(JobReturnCode.INFRASTRUCTURE_ERROR, f"cjrelayd unreachable: {e}")
        row = next((r for r in rows if r.get("job_id") == self.job_id), None)
        if row is None:
            return self._ended(JobReturnCode.INFRASTRUCTURE_ERROR, "cjrelayd no longer knows the job")
        if row.get("state") != "ended":
            return JobReturnCode.UNKNOWN
        return self._ended(return_code(row.get("outcome")), row.get("reason", ""))

    def wait(self):
        """Block until the job has ended (``job wait``); a lost connection is retried while the
        daemon still answers, and ends the wait as 104 when it does not."""
        while self._code is None:
            try:
                f = StatusClient.fields(self.client.command(f"job wait {self.job_id}", timeout=0))
                self._ended(return_code(f.get("outcome")), f.get("reason", ""))
            except DaemonRefused as e:
                self._ended(JobReturnCode.INFRASTRUCTURE_ERROR, f"job wait: {e}")
            except DaemonUnavailable as e:
                if self.poll() == JobReturnCode.UNKNOWN:
                    self.logger.warning(f"cjrelay job {self.job_id}: job wait lost ({e}); waiting again")
                    time.sleep(self.wait_retry)

    def terminate(self):
        """Stop the job (``job stop``): it ends as aborted (9). An ended job is left alone."""
        if self._code is not None:
            return
        try:
            self.client.command(f"job stop {self.job_id} terminated by the client parent")
            self.logger.info(f"cjrelay job {self.job_id}: stop requested")
        except DaemonRefused as e:
            if e.code != 409:  # 409: it has ended already
                self.logger.error(f"cjrelay job {self.job_id}: job stop refused: {e}")
        except DaemonUnavailable as e:
            self.logger.error(f"cjrelay job {self.job_id}: cannot stop: {e}")


def job_rows(client: StatusClient) -> list:
    """``show jobs json``: one dict per job cjrelayd knows (running, or ended and still kept)."""
    table = client.show_json("jobs")
    if isinstance(table, list):
        return [r for r in table if isinstance(r, dict)]
    if isinstance(table, dict):
        for v in table.values():
            if isinstance(v, list):
                return [r for r in v if isinstance(r, dict)]
    return []
