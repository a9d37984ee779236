# SPDX-License-Identifier: Apache-2.0
"""The ``job start`` description of a job: what a stock CJ would have received from the CP.

Everything comes from what the CP put in ``fl_ctx`` before calling the launcher
(``JOB_PROCESS_ARGS``, ``WORKSPACE_OBJECT``, ``SERVER_CONFIG``, ``CLIENT_CONFIG``,
``SECURE_MODE``); the keys are those of cjrelayd's job description (doc/interface.md).
Credentials go into the description only, never into argv, the environment or a log line.
"""

import os
import re
import shutil

from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.job_launcher_spec import JobProcessArgs
from nvflare.utils.job_launcher_utils import add_custom_dir_to_path

from .app_config import NotServable, TrainerSpec
from .pipe_job import PipeSpec

# FLARE's secure schemes for each clear one: with connection_security tls or mtls, FLARE's
# drivers run TLS on the provisioned scheme; cjrelayd names the TLS variant in the URL.
_SECURE_SCHEME = {"tcp": "stcp", "http": "https", "grpc": "grpcs"}
_CLEAR_SCHEME = {v: k for k, v in _SECURE_SCHEME.items()}

# A stock trainer inherits the CP's environment (the CJ's os.environ copy, with the app's
# custom dir on PYTHONPATH); the trainer cjrelayd starts gets the same, in cjrelayd's otherwise
# clean environment: every variable of the CP (or, with pass_env, only those named) but the
# job's credentials and what cjrelayd sets itself. The job credentials travel in the job
# description only; a variable whose value holds one is left out too.
_NEVER_PASS = ("NVFLARE_JOB_AUTH_TOKEN", "NVFLARE_JOB_TOKEN_SIGNATURE", "NVFLARE_JOB_SSID",
               "NVFLARE_CLIENT_API_BOOTSTRAP", "CLIENT_API_TYPE")
# cjrelayd's bounds on worker.env (doc/interface.md, "Job description"): names as a shell's,
# values valid UTF-8 (the description is JSON).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_MAX = 256
ENV_TEXT = 32 * 1024
# [workers] launch_timeout's range (doc/interface.md): the executor's value is kept within it.
LAUNCH_TIMEOUT_MAX = 86400.0


def job_arg(fl_ctx, name, default=None):
    """One value of the CP's JOB_PROCESS_ARGS (each entry is ``(flag, value)``)."""
    entry = (fl_ctx.get_prop(FLContextKey.JOB_PROCESS_ARGS) or {}).get(name)
    return entry[1] if entry and entry[1] is not None else default


def server_link(fl_ctx) -> dict:
    """server_url, connection_security, the startup kit's TLS files and the project name."""
    scheme = job_arg(fl_ctx, JobProcessArgs.SCHEME, "grpc")
    target = job_arg(fl_ctx, JobProcessArgs.TARGET)
    if not target:
        raise NotServable("JOB_PROCESS_ARGS has no server target")
    client = fl_ctx.get_prop(FLContextKey.CLIENT_CONFIG) or {}
    conn_sec = client.get("connection_security")
    if not conn_sec:
        secure = scheme in _CLEAR_SCHEME or bool(fl_ctx.get_prop(FLContextKey.SECURE_MODE))
        conn_sec = "mtls" if secure else "clear"
    out = {"connection_security": conn_sec}
    if conn_sec == "clear":
        out["server_url"] = f"{_CLEAR_SCHEME.get(scheme, scheme)}://{target}"
    else:
        out["server_url"] = f"{_SECURE_SCHEME.get(scheme, scheme)}://{target}"
        out.update(_tls_files(fl_ctx, client, conn_sec))
    servers = fl_ctx.get_prop(FLContextKey.SERVER_CONFIG) or []
    if servers and isinstance(servers[0], dict) and servers[0].get("name"):
        out["project_name"] = servers[0]["name"]
    return out


def _tls_files(fl_ctx, client: dict, conn_sec: str) -> dict:
    startup = job_arg(fl_ctx, JobProcessArgs.STARTUP_DIR)
    if not startup:
        startup = fl_ctx.get_prop(FLContextKey.WORKSPACE_OBJECT).get_startup_kit_dir()
    keys = {"ca_file": ("ssl_root_cert", "ssl_rootcert")}
    if conn_sec == "mtls":
        keys.update({"cert_file": ("ssl_cert",), "key_file": ("ssl_private_key",)})
    out = {}
    for name, names in keys.items():
        value = next((client[k] for k in names if client.get(k)), None)
        if not value:
            raise NotServable(f"connection_security {conn_sec} but the client config has no {names[0]}")
        out[name] = value if os.path.isabs(value) else os.path.join(startup, value)
    return out


def credentials(fl_ctx):
    """token, token_signature, ssid: from JOB_PROCESS_ARGS, else the CP's FederatedClient."""
    site = fl_ctx.get_prop(FLContextKey.SITE_OBJ)
    token = job_arg(fl_ctx, JobProcessArgs.AUTH_TOKEN, getattr(site, "token", None))
    sig = job_arg(fl_ctx, JobProcessArgs.TOKEN_SIGNATURE, getattr(site, "token_signature", None))
    ssid = job_arg(fl_ctx, JobProcessArgs.SSID, getattr(site, "ssid", None))
    if not token or not sig:
        return None
    return {"token": str(token), "token_signature": str(sig), "ssid": str(ssid or "")}


def passed_env(pass_env=None, secrets=()) -> dict:
    """The CP's variables a stock trainer would inherit (all of them, or those ``pass_env``
    names), never the job's credentials: neither their variables nor any variable whose value
    holds one of ``secrets``; none that cjrelayd's worker.env cannot take."""
    names = os.environ.keys() if pass_env is None else [k for k in pass_env if k in os.environ]
    env = {k: os.environ[k] for k in names if k not in _NEVER_PASS and _passable(k, os.environ[k])}
    return {k: v for k, v in env.items() if not any(s and s in v for s in secrets)}


def trainer_env(custom_dir: str, pass_env=None, secrets=()) -> dict:
    """passed_env, with PYTHONPATH as FLARE's client job sets it for its trainer: the CP's
    sys.path, then the app's custom dir (FLARE's own helper)."""
    env = passed_env(pass_env, secrets)
    add_custom_dir_to_path(custom_dir, env)
    return env


def _passable(name: str, value: str) -> bool:
    """What cjrelayd's worker.env takes: a shell variable name (not, e.g., bash's exported
    functions, BASH_FUNC_f%%), and a name and value that are valid UTF-8."""
    try:
        name.encode("utf-8"), value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return bool(_ENV_NAME.match(name))


def check_env_bounds(env: dict):
    """NotServable when cjrelayd cannot take the environment (the job then runs stock)."""
    size = sum(len(k.encode()) + 1 + len(v.encode()) + 1 for k, v in env.items())
    if len(env) > ENV_MAX or size > ENV_TEXT:
        raise NotServable(f"the trainer's environment has {len(env)} variables, {size} bytes: more than cjrelayd "
                          f"takes ({ENV_MAX}, {ENV_TEXT} bytes); name the ones it needs in the launcher's pass_env")


def launch_timeout(spec):
    """The executor's launch_timeout for cjrelayd (FLARE's default 300 when the config has none;
    a release's ClientAPILauncherExecutor: its external_pre_init_timeout), within [workers]
    launch_timeout's range; None (FLARE's "no bound") or <= 0: not sent, so the site's [workers]
    launch_timeout applies and a trainer that cannot start still ends its job."""
    value = spec.pre_init_timeout() if isinstance(spec, PipeSpec) else spec.arg("launch_timeout")
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return min(value, LAUNCH_TIMEOUT_MAX) if value > 0 else None


LOOPBACK_ANY_PORT = "tcp://127.0.0.1:0"

# The folder NVFLARE_COMM_DRIVER_PATH names for a trainer that reaches cjrelayd over uds://:
# FLARE imports every module in it, and it holds only the uds driver.
UDS_DRIVER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "comm_drivers")


def default_worker_socket(status_socket: str, job_id: str) -> str:
    """cjrelayd's own choice when a job names no listener: beside its status socket,
    ``<status socket without .sock>.jobs/<job_id>/workers.sock``."""
    base = status_socket[:-5] if status_socket.endswith(".sock") and len(status_socket) > 5 else status_socket
    return f"{os.path.abspath(base)}.jobs/{job_id}/workers.sock"


def uds_listen(worker_listen: str, status_socket: str, job_id: str):
    """The job's Unix worker listener as ``uds://PATH`` (cjrelayd then writes that URL into the
    bootstrap, and checks the trainer's uid), or None when the listener is not a Unix socket."""
    first = (worker_listen or "").split(",")[0].strip()
    if not first:
        path = default_worker_socket(status_socket, job_id)
    elif first.startswith("unix:"):
        path = first[len("unix:"):]
    elif first.startswith("uds://"):
        path = "/" + first[len("uds://"):].lstrip("/")
    else:
        return None
    rest = worker_listen.split(",")[1:] if worker_listen else []
    return ",".join(["uds://" + path.lstrip("/")] + [r.strip() for r in rest])


def with_uds_driver(env: dict) -> dict:
    """env with the uds driver's folder first on NVFLARE_COMM_DRIVER_PATH (FLARE takes the
    first driver of a scheme; the CP's own folders stay after it)."""
    dirs = [UDS_DRIVER_DIR] + [d for d in env.get("NVFLARE_COMM_DRIVER_PATH", "").split(os.pathsep)
                               if d and d != UDS_DRIVER_DIR]
    env["NVFLARE_COMM_DRIVER_PATH"] = os.pathsep.join(dirs)
    return env


def absolute_program(argv: list) -> list:
    """argv with a bare program name (``python3``) looked up on the CP's PATH, as a stock CJ's
    subprocess finds it, even when pass_env leaves the CP's PATH out (cjrelayd's own PATH
    then applies, which may not hold the CP's Python environment: a venv, conda)."""
    if argv and os.sep not in argv[0]:
        found = shutil.which(argv[0])
        if found:
            argv = [os.path.abspath(found)] + argv[1:]
    return argv


def _upstream(job_id: str, fl_ctx, opts: dict) -> dict:
    """What every description has: the job, the site, the server link, the CP, the workspace."""
    desc = {"job_id": job_id, "site": opts["site"]}
    desc.update(server_link(fl_ctx))
    if opts.get("parent_url"):
        desc["parent_url"] = opts["parent_url"]
    if opts.get("mode"):
        desc["mode"] = opts["mode"]
    desc["workspace"] = opts["workspace"]
    return desc


def build(job_id: str, fl_ctx, spec: TrainerSpec, opts: dict) -> dict:
    """The whole description of a development-tree job (cellapi dialect). ``opts``: site,
    workspace, app_dir, custom_dir, parent_url, pass_env, worker_listen, mode, and for a trainer
    over the uds driver uds_driver and status_socket. Resolves the trainer's secrets (last step
    before sending)."""
    desc = _upstream(job_id, fl_ctx, opts)
    creds = credentials(fl_ctx)
    worker = {"cwd": opts["app_dir"], "count": 1,
              "env": trainer_env(opts["custom_dir"], opts.get("pass_env"), tuple((creds or {}).values()))}
    timeout = launch_timeout(spec)
    if timeout is not None:
        worker["launch_timeout"] = timeout
    listen = opts.get("worker_listen")
    uds = uds_listen(listen, opts.get("status_socket", ""), job_id) if opts.get("uds_driver") else None
    if not uds and not listen:
        # without the driver a stock trainer reaches only tcp (FLARE's drivers know no Unix
        # socket): a free loopback port for the job, as the stock CJ's own listener
        listen = LOOPBACK_ANY_PORT
    if uds:
        # a stock trainer reaches the Unix socket through cjrelay_flare's uds driver
        listen = uds
        with_uds_driver(worker["env"])
    check_env_bounds(worker["env"])
    if listen:
        # tcp://127.0.0.1:0 is passed as is: cjrelayd binds a free port for the job and
        # writes it into the trainer's bootstrap file
        worker["listen"] = listen
    desc["bootstrap"] = {
        "task_exchange": spec.task_exchange(),
        "memory_gc_rounds": int(spec.arg("memory_gc_rounds") or 0),
        "cuda_empty_cache": bool(spec.arg("cuda_empty_cache")),
    }
    if creds:
        desc["credentials"] = creds
    worker["argv"] = absolute_program(spec.trainer_argv())
    desc["worker"] = worker
    return desc


def build_pipe(job_id: str, fl_ctx, spec: PipeSpec, opts: dict) -> dict:
    """The whole description of a release job (2.7.2, 2.8.x: cjrelayd's pipe dialect). ``opts``
    as for build, plus flare_version. The trainer's command is the SubprocessLauncher's script
    split as it splits it, run in the app dir with the CP's environment and the app's custom dir on
    PYTHONPATH (CLIENT_API_TYPE and client_api_config.json are cjrelayd's to set); its listener is
    a loopback TCP port (a release trainer has only FLARE's own drivers); ``bootstrap`` carries the
    job's TASK_EXCHANGE and METRICS_EXCHANGE for the trainer's client_api_config.json."""
    desc = _upstream(job_id, fl_ctx, opts)
    desc["flare_version"] = opts["flare_version"]
    creds = credentials(fl_ctx)
    worker = {"cwd": opts["app_dir"], "count": 1,
              "env": trainer_env(opts["custom_dir"], opts.get("pass_env"), tuple((creds or {}).values()))}
    timeout = launch_timeout(spec)
    if timeout is not None:
        worker["launch_timeout"] = timeout
    listen = (opts.get("worker_listen") or "").split(",")[0].strip()
    worker["listen"] = listen if listen.startswith("tcp://") else LOOPBACK_ANY_PORT
    check_env_bounds(worker["env"])
    desc["bootstrap"] = spec.bootstrap()
    if creds:
        desc["credentials"] = creds
    worker["argv"] = absolute_program(spec.trainer_argv())
    desc["worker"] = worker
    return desc
