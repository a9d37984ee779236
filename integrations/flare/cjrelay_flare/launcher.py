# SPDX-License-Identifier: Apache-2.0
"""CJRelayJobLauncher: the site's one job launcher; cjrelayd runs the jobs it can serve.

Registered in the site's ``local/resources.json``. On BEFORE_JOB_LAUNCH it registers itself for
every job the stock process launcher it replaces would take (FLARE wants exactly one launcher), then ``launch_job`` picks (with ``job_property``
set, only among jobs whose ``custom_props`` set that property true):

* the job's client app runs one ClientAPIExecutor in external_process mode (FLARE's development
  tree): cjrelayd gets ``job start`` with the cellapi description (description.build);
* the job's client app runs one ClientAPILauncherExecutor with a SubprocessLauncher and
  CellPipes (FLARE 2.7.2, 2.8.x; pipe_job.py): ``job start`` with the pipe description
  (description.build_pipe), which names the CP's FLARE version;
* any other job (task filters on the client, several executors, a site privacy policy, a
  FilePipe, a launcher of its own, ...): FLARE's stock ClientProcessJobLauncher, unchanged, the
  reason in the CP's log.

cjrelayd down or refusing a job it should serve: the reason goes to FLARE's log, then per
``on_daemon_error`` the job falls back to the stock launcher (``"fallback"``) or the launch
fails with INFRASTRUCTURE_ERROR (``"fail"``, a handle whose poll() is 104).
"""

import json
import os

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_constant import FLContextKey, JobConstants
from nvflare.apis.job_def import get_custom_prop
from nvflare.apis.job_launcher_spec import JobLauncherSpec, JobProcessArgs, JobReturnCode, add_launcher
from nvflare.app_common.job_launcher.client_process_launcher import ClientProcessJobLauncher

from . import description, pipe_job, tlsfiles
from .app_config import (NotServable, check_allowed, check_servable, executors, load_client_config,
                         load_trainer_spec, system_vars)
from .handle import CJRelayJobHandle, job_rows
from .status import DaemonRefused, DaemonUnavailable, StatusClient

FALLBACK = "fallback"
FAIL = "fail"


class FailedLaunchHandle(CJRelayJobHandle):
    """A launch that could not happen: it has ended, with INFRASTRUCTURE_ERROR and the reason."""

    def __init__(self, job_id: str, reason: str, logger=None):
        super().__init__(job_id, client=None, logger=logger)
        self._code = JobReturnCode.INFRASTRUCTURE_ERROR
        self.reason = reason


class CJRelayJobLauncher(JobLauncherSpec):
    def __init__(
        self,
        socket_path: str = "/run/cjrelay/status.sock",
        connect_timeout: float = 10.0,
        on_daemon_error: str = FALLBACK,
        job_property: str = "",
        pass_env=None,
        worker_listen: str = "",
        mode: str = "",
        uds_driver: bool = True,
        tls_fds: bool = True,
    ):
        """Args:
        socket_path: cjrelayd's status socket (``[status] socket`` in its INI).
        connect_timeout: seconds for each status command but ``job wait``.
        on_daemon_error: ``fallback`` (the stock launcher runs the job) or ``fail`` (104).
        job_property: if set, only jobs whose meta's custom_props set this key true go to cjrelay.
        pass_env: None (the default): the trainer gets the CP's whole environment, as a stock
            trainer does, the job's credentials excepted; a list (or a blank- or comma-separated
            string) of names: only those of the CP's variables (an allow-list).
        worker_listen: the job's worker listener (``unix:PATH``, ``uds://PATH``, ``tcp://127.0.0.1:PORT``;
            ``tcp://127.0.0.1:0`` picks a free port per job); default: cjrelayd's per-job Unix socket
            through the uds driver, or with ``uds_driver`` false a free loopback port per job.
        mode: ``pass_through`` or ``spool``; default the INI's.
        uds_driver: true (the default): when the job's worker listener is a Unix socket (``unix:PATH``,
            ``uds://PATH``, or none given: cjrelayd's per-job socket beside ``socket_path``), send it as
            ``uds://PATH`` and put cjrelay_flare's uds driver on the trainer's ``NVFLARE_COMM_DRIVER_PATH``,
            so a stock trainer reaches it over AF_UNIX. A tcp listener is left as is. False and no
            ``worker_listen``: ``tcp://127.0.0.1:0``, for FLARE's own drivers know no Unix socket.
        tls_fds: open the startup kit's TLS files here, in the CP, and pass them to cjrelayd as
            open files with ``job start`` (tlsfiles.py), so that cjrelayd's account needs no right
            to read the kit; false sends their paths, which cjrelayd opens itself.
        """
        super().__init__()
        if on_daemon_error not in (FALLBACK, FAIL):
            raise ValueError(f"on_daemon_error must be '{FALLBACK}' or '{FAIL}', not {on_daemon_error!r}")
        self.client = StatusClient(socket_path, connect_timeout)
        self.on_daemon_error = on_daemon_error
        self.job_property = job_property
        if isinstance(pass_env, str):
            pass_env = pass_env.replace(",", " ").split()
        self.pass_env = None if pass_env is None else tuple(pass_env)
        self.worker_listen = worker_listen
        self.mode = mode
        if isinstance(uds_driver, str):   # "false" in a hand-written resources.json
            uds_driver = uds_driver.strip().lower() in ("1", "true", "yes", "on")
        self.uds_driver = bool(uds_driver)
        self.socket_path = socket_path
        self.tls_fds = bool(tls_fds)
        self.stock = ClientProcessJobLauncher()

    def handle_event(self, event_type: str, fl_ctx):
        if event_type == EventType.BEFORE_JOB_LAUNCH and _process_launcher_takes(fl_ctx):
            add_launcher(self, fl_ctx)

    def launch_job(self, job_meta: dict, fl_ctx):
        job_id = job_meta.get(JobConstants.JOB_ID)
        try:
            desc = self._describe(job_id, job_meta, fl_ctx)
        except NotServable as e:
            self.logger.info(f"job {job_id}: not for cjrelay ({e}); FLARE's process launcher runs it")
            return self.stock.launch_job(job_meta, fl_ctx)
        fds = tlsfiles.open_for(desc, self.logger) if self.tls_fds else []
        try:
            answer = self.client.command("job start " + _one_line_json(desc), fds=fds)
        except (DaemonUnavailable, DaemonRefused) as e:
            if isinstance(e, DaemonUnavailable) and self._started_anyway(job_id):
                self.logger.warning(f"job {job_id}: job start got no answer ({e}), but cjrelayd runs the job")
                return CJRelayJobHandle(job_id, self.client, logger=self.logger)
            return self._daemon_error(job_id, job_meta, fl_ctx, e)
        finally:
            tlsfiles.close_all(fds)
            desc = None  # drop the resolved secrets and credentials
        self.logger.info(f"job {job_id}: cjrelayd runs it ({' '.join(answer)})")
        return CJRelayJobHandle(job_id, self.client, logger=self.logger)

    def _describe(self, job_id, job_meta: dict, fl_ctx) -> dict:
        """The job description, or NotServable when cjrelay does not serve the job."""
        if self.job_property and not get_custom_prop(job_meta, self.job_property):
            raise NotServable(f"the job's custom_props do not set {self.job_property}")
        arg = lambda name: description.job_arg(fl_ctx, name)  # noqa: E731
        if arg(JobProcessArgs.PARENT_CONN_SEC) not in (None, "", "clear"):
            raise NotServable(f"the CP's internal listener is {arg(JobProcessArgs.PARENT_CONN_SEC)}; cjrelayd links to a clear one")
        workspace = fl_ctx.get_prop(FLContextKey.WORKSPACE_OBJECT)
        site = arg(JobProcessArgs.CLIENT_NAME) or fl_ctx.get_identity_name()
        link = description.server_link(fl_ctx)
        sys_vars = system_vars(job_id, site, workspace, link["server_url"], arg(JobProcessArgs.PARENT_URL),
                               bool(fl_ctx.get_prop(FLContextKey.SECURE_MODE)))
        _check_privacy(workspace)
        data = load_client_config(workspace.get_app_config_dir(job_id), sys_vars)
        check_servable(data)
        check_allowed(data, job_meta, fl_ctx, workspace)
        opts = {
            "site": site,
            "workspace": arg(JobProcessArgs.WORKSPACE) or workspace.get_root_dir(),
            "app_dir": workspace.get_app_dir(job_id),
            "custom_dir": workspace.get_app_custom_dir(job_id),
            "parent_url": arg(JobProcessArgs.PARENT_URL),
            "pass_env": self.pass_env,
            "worker_listen": self.worker_listen,
            "mode": self.mode,
            "uds_driver": self.uds_driver,
            "status_socket": self.socket_path,
        }
        found = executors(data)
        if found and pipe_job.is_launcher_executor(found[0]):
            spec = pipe_job.load_pipe_spec(data, found[0])
            opts["flare_version"] = pipe_job.flare_version()
            return description.build_pipe(job_id, fl_ctx, spec, opts)
        return description.build(job_id, fl_ctx, load_trainer_spec(data), opts)

    def _started_anyway(self, job_id) -> bool:
        """Whether a job start whose answer was lost started the job (never start it twice)."""
        try:
            return any(r.get("job_id") == job_id for r in job_rows(self.client))
        except (DaemonUnavailable, DaemonRefused):
            return False

    def _daemon_error(self, job_id, job_meta, fl_ctx, e):
        """cjrelayd down or refusing: say why, then fall back or fail with 104."""
        what = "is not reachable" if isinstance(e, DaemonUnavailable) else "refused the job"
        if self.on_daemon_error == FALLBACK:
            self.logger.error(f"job {job_id}: cjrelayd {what} ({e}); FLARE's process launcher runs it")
            return self.stock.launch_job(job_meta, fl_ctx)
        self.logger.error(f"job {job_id}: cjrelayd {what} ({e}); the launch fails (104)")
        return FailedLaunchHandle(job_id, f"cjrelayd {what}: {e}", logger=self.logger)


def _process_launcher_takes(fl_ctx) -> bool:
    """Whether the CP's FLARE would have its process launcher take the job: always, but in FLARE
    2.7.2 a job whose deploy map gives this site a job image (extract_job_image), which is left
    to a container launcher there; the launcher registers exactly when the stock one would."""
    try:
        from nvflare.utils.job_launcher_utils import extract_job_image
    except ImportError:
        return True
    return not extract_job_image(fl_ctx.get_prop(FLContextKey.JOB_META) or {}, fl_ctx.get_identity_name())


def _check_privacy(workspace):
    """NotServable when the site has a privacy policy (local/privacy.json): FLARE's client job
    applies its scopes' filters to the decoded tasks and results."""
    get = getattr(workspace, "get_site_privacy_file_path", None)
    path = get() if get else os.path.join(workspace.get_root_dir(), "local", "privacy.json")
    if path and os.path.exists(path):
        raise NotServable(f"the site has a privacy policy ({path}), whose filters run in FLARE's client job")


def _one_line_json(obj) -> str:
    return json.dumps(obj, separators=(", ", ": "), ensure_ascii=False)
