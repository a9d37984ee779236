# SPDX-License-Identifier: Apache-2.0
"""Drives CJRelayJobLauncher through one job's life, as FLARE's CP would; prints TAP lines.

Run by tests/e2e/test_flare.sh with PYTHONPATH = tests/flare (the FLARE stand-in) and
integrations/flare (the package). One scenario per run:

  success   (job_property set, and the job's custom_props set it) launch into cjrelayd, poll while running, wait, return code 0, what the trainer got
            (the CP's environment, as a stock trainer's: MALLOC_ARENA_MAX, MALLOC_CONF, the CP's PATH;
            never the job's credentials, nor a variable holding one)
  tls       as the startup kit provisions mutual TLS (scheme tcp, connection_security mtls, the
            kit's rootCA.pem, client.crt, client.key): the kit's files go to cjrelayd as open files
            (tls_fds), the job reaches an stcp server, return code 0;
            pass_env narrows the trainer's environment to the names it lists
  documented  the launcher configured with integrations/flare/README.md's resources.json snippet as
            it stands (--readme): a trainer that starts as a stock FLARE trainer (stock_trainer.py)
            reaches its job (through the uds driver) and the job runs to its end (return code 0)
  nostart   a stock trainer given a URL it cannot use (uds_driver false, worker_listen unix:):
            it dies at once, is relaunched, and after the executor's launch_timeout (3 s) the job
            ends with 101, the trainer's error in the reason, in show jobs and in the CP's log
  uds       uds_driver true, no worker_listen: the job's own Unix socket is sent as uds://, the
            trainer gets the uds driver on NVFLARE_COMM_DRIVER_PATH and its bootstrap's connect_url is
            that uds:// URL; the job runs to its end (return code 0)
  abort     launch, terminate() mid-run, wait, return code 9
  stock     a job cjrelay does not serve (in_process executor) goes to ClientProcessJobLauncher
  narrowed  job_property set and the job's custom_props lack it: ClientProcessJobLauncher
  bigenv    a CP environment of more variables than cjrelayd's worker.env takes: ClientProcessJobLauncher,
            the reason logged
  refused   cjrelayd refuses the job (ERR 400: a job id it does not take): ClientProcessJobLauncher
  lost      the answer to job start is lost after the job started: no second start by the stock launcher
  down      cjrelayd not listening, on_daemon_error fallback: ClientProcessJobLauncher, the reason logged
  downfail  cjrelayd not listening, on_daemon_error fail: a handle that has ended with 104
  configure python3 -m cjrelay_flare.configure on a client workspace as FLARE main provisions it
            (local/resources.json.default only): resources.json made with the README's job_launcher
            entry in place of process_launcher, every other key and component kept, the CP's
            launcher then CJRelayJobLauncher; run again: nothing changed; --undo: the stock one back;
            a site of two launchers, or of another launcher, or an unknown argument: refused, the
            file untouched (needs no daemon)
"""

import argparse
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import cp
from nvflare.app_common.job_launcher.client_process_launcher import ClientProcessJobLauncher

import cjrelay_flare
from cjrelay_flare.status import DaemonUnavailable, StatusClient

CREDS = ("cjtest-flaretoken-5be1d07c", "cjtest-flaresig-9a0c44e1", "cjtest-flaressid-31f7")
SECRET = "cjtest-secret-value-8d2f"
HERE = os.path.dirname(os.path.abspath(__file__))
# The CP's own variables a stock trainer inherits (FLARE's start script sets MALLOC_ARENA_MAX 4).
CP_ENV = {"MALLOC_ARENA_MAX": "4", "MALLOC_CONF": "narenas:2", "CJTEST_CP_ONLY": "from-the-cp"}
_out = {"fail": 0}


def check(name, ok, detail=""):
    print(("ok - " if ok else "not ok - ") + name + (f" ({detail})" if detail else ""), flush=True)
    if not ok:
        _out["fail"] += 1


def external(worker, ws):
    """A ClientAPIExecutor in external_process mode; its command records what the trainer got,
    then becomes the reference worker. {JOB_ID}, {WORKSPACE} and {worker_bin} are FLARE
    variables; the last argument is a secret reference resolved from the CP's environment."""
    script = ("env > {WORKSPACE}/{JOB_ID}.env; pwd > {WORKSPACE}/{JOB_ID}.cwd; "
              "echo $1 > {WORKSPACE}/{JOB_ID}.arg; cp $NVFLARE_CLIENT_API_BOOTSTRAP {WORKSPACE}/{JOB_ID}.boot; "
              "exec {worker_bin}")
    return {"path": "nvflare.app_common.executors.client_api_executor.ClientAPIExecutor",
            "args": {"execution_mode": "external_process",
                     "command": ["sh", "-c", script, "trainer", "${secret:CJTEST_TRAINER_SECRET}"],
                     "params_exchange_format": "numpy", "train_task_name": "train", "memory_gc_rounds": 2}}


def stock_executor(launch_timeout=None):
    """A ClientAPIExecutor whose trainer starts as a stock FLARE trainer (stock_trainer.py), then
    runs the job as the reference worker."""
    args = {"execution_mode": "external_process",
            "command": [sys.executable, os.path.join(HERE, "stock_trainer.py"), "{WORKSPACE}/{JOB_ID}", "{worker_bin}"]}
    if launch_timeout is not None:
        args["launch_timeout"] = launch_timeout
    return {"path": "nvflare.app_common.executors.client_api_executor.ClientAPIExecutor", "args": args}


def documented_args(readme):
    """The args of the job_launcher entry integrations/flare/README.md tells a site to put in its
    local/resources.json (its "After" snippet), as they stand."""
    with open(readme) as f:
        text = f.read()
    for block in re.findall(r"```json\n(.*?)```", text, re.S):
        block = block.strip()
        if block.startswith('{"id": "job_launcher"'):
            entry = json.loads(block)
            if entry.get("path") == "cjrelay_flare.CJRelayJobLauncher":
                return dict(entry["args"])
    raise SystemExit(f"{readme}: no job_launcher snippet")


def launcher_args(a, **extra):
    args = {"socket_path": a.socket, "connect_timeout": 5}
    args.update(extra)
    return args


def start(a, job, executor, largs, meta_extra=None):
    cp.make_workspace(a.ws, a.scheme, a.target, largs, a.conn_sec)
    meta = cp.deploy_job(a.ws, job, executor, meta_extra, {"worker_bin": a.worker})
    launcher = cp.select_launcher(a.ws, meta)
    check(f"{job}: the site's one launcher is CJRelayJobLauncher", isinstance(launcher, cjrelay_flare.CJRelayJobLauncher))
    ctx = cp.launch_context(a.ws, job, a.parent, CREDS)
    _spy(launcher)
    return launcher.launch_job(meta, ctx)


SENT = {}


def _lose_answer(launcher):
    """The job start goes through, but its answer is lost (as on a timeout)."""
    real = launcher.client.command

    def command(line, timeout=None, **kw):
        answer = real(line, timeout, **kw)
        if line.startswith("job start "):
            raise DaemonUnavailable("the answer was lost (test)")
        return answer

    launcher.client.command = command


def lost(a):
    job = "FJ9"
    ClientProcessJobLauncher.launched.clear()
    cp.make_workspace(a.ws, a.scheme, a.target, launcher_args(a))
    meta = cp.deploy_job(a.ws, job, external(a.worker, a.ws), None, {"worker_bin": a.worker})
    launcher = cp.select_launcher(a.ws, meta)
    _lose_answer(launcher)
    h = launcher.launch_job(meta, cp.launch_context(a.ws, job, a.parent, CREDS))
    check(f"{job}: a started job whose answer was lost keeps its cjrelay handle",
          isinstance(h, cjrelay_flare.CJRelayJobHandle) and ClientProcessJobLauncher.launched == [])
    check(f"{job}: the log says so", "but cjrelayd runs the job" in _LOG.getvalue())
    h.terminate()
    h.wait()
    check(f"{job}: and it ends through terminate() (9)", h.poll() == 9, h.poll())


def _spy(launcher):
    """Keeps the job description the launcher sends (in memory, for the checks)."""
    client = getattr(launcher, "client", None)
    if client is None:
        return
    real = client.command

    def command(line, timeout=None, fds=()):
        if line.startswith("job start "):
            SENT.update(json.loads(line[len("job start "):]))
            SENT["_fds"] = [os.readlink(f"/proc/self/fd/{fd}") for fd in fds]
        return real(line, timeout, fds=fds)

    client.command = command


def jobs_row(a, job):
    rows = StatusClient(a.socket).show_json("jobs")
    rows = next((v for v in rows.values() if isinstance(v, list)), []) if isinstance(rows, dict) else rows
    return next((r for r in rows if r.get("job_id") == job), None)


def success(a):
    job = "FJ1"
    h = start(a, job, external(a.worker, a.ws), launcher_args(a, job_property="use_cjrelay"),
              {"custom_props": {"use_cjrelay": True}})
    check(f"{job}: launch_job returned a cjrelay handle", isinstance(h, cjrelay_flare.CJRelayJobHandle), type(h).__name__)
    code = h.poll()
    check(f"{job}: poll while running gives UNKNOWN (127)", code == 127, code)
    row = jobs_row(a, job)
    check(f"{job}: show jobs lists it running", row is not None and row.get("state") in ("starting", "running"), row)
    h.wait()
    code = cp.return_code(h, a.ws, job)
    check(f"{job}: wait returns at the end; return code 0", code == 0, f"{code} {h.reason}")
    check(f"{job}: poll after the end gives SUCCESS", h.poll() == 0)
    app_dir = os.path.join(a.ws, job, "app_" + cp.SITE)
    env = _read(os.path.join(a.ws, job + ".env"))
    check(f"{job}: trainer cwd is the app dir", _read(os.path.join(a.ws, job + ".cwd")).strip() == app_dir)
    check(f"{job}: trainer PYTHONPATH has the app's custom dir", f"{app_dir}/custom" in _env(env, "PYTHONPATH"))
    check(f"{job}: the secret reference was resolved into the trainer's argv",
          _read(os.path.join(a.ws, job + ".arg")).strip() == SECRET)
    check(f"{job}: no credential in the trainer's environment", not any(c in env for c in CREDS))
    check(f"{job}: the CP's variable passed on (LANG)", _env(env, "LANG") == os.environ.get("LANG"))
    cp_env(job, env)
    described(job, a)
    boot = _bootstrap(a, job)
    if boot.get("memory_gc_rounds") == 2:
        print(f"ok - {job}: the trainer's bootstrap file has the description's bootstrap keys")
    else:
        print(f"skip - {job}: the trainer's bootstrap file has the description's bootstrap keys: cjrelayd "
              f"does not write them yet (memory_gc_rounds {boot.get('memory_gc_rounds')}, not 2)")


def cp_env(job, env):
    """The trainer's environment is the CP's, as a stock trainer's, credentials excepted."""
    for k, v in CP_ENV.items():
        check(f"{job}: the CP's {k} reached the trainer", _env(env, k) == v, _env(env, k))
    check(f"{job}: the trainer's PATH is the CP's", _env(env, "PATH") == os.environ["PATH"], _env(env, "PATH"))
    check(f"{job}: no credential in the trainer's environment", not any(c in env for c in CREDS))
    check(f"{job}: not the CP's credential variables, nor one holding a credential",
          "NVFLARE_JOB_AUTH_TOKEN=" not in env and "CJTEST_HOLDS_SIG=" not in env)
    check(f"{job}: nor what worker.env cannot take (BASH_FUNC_cjtest%%, a non-UTF-8 value)",
          "BASH_FUNC_cjtest" not in env and "CJTEST_NOT_UTF8=" not in env)


def described(job, a):
    """What the launcher put in the job description, as a stock CJ would have received it."""
    te = SENT.get("bootstrap", {}).get("task_exchange", {})
    check(f"{job}: described: the executor's task_exchange", te.get("exchange_format") == "numpy"
          and te.get("train_task_name") == "train" and te.get("launch_once") is True, te)
    check(f"{job}: described: memory_gc_rounds, cuda_empty_cache",
          SENT["bootstrap"].get("memory_gc_rounds") == 2 and SENT["bootstrap"].get("cuda_empty_cache") is False)
    check(f"{job}: described: site, server, project, parent, workspace", SENT.get("site") == cp.SITE
          and SENT.get("server_url") == "tcp://" + a.target and SENT.get("connection_security") == "clear"
          and SENT.get("project_name") == "cjtest_project" and SENT.get("parent_url") == a.parent
          and SENT.get("workspace") == a.ws)
    check(f"{job}: described: the credentials from fl_ctx", SENT.get("credentials") == dict(
          zip(("token", "token_signature", "ssid"), CREDS)))
    check(f"{job}: described: the program found on the CP's PATH", SENT["worker"]["argv"][0] == shutil.which("sh"),
          SENT["worker"]["argv"][0])
    check(f"{job}: described: argv with the variables resolved", SENT["worker"]["argv"][2].startswith(
          f"env > {a.ws}/{job}.env;") and SENT["worker"]["argv"][2].endswith("exec " + a.worker))


def tls(a):
    job = "FJ8"
    h = start(a, job, external(a.worker, a.ws), launcher_args(a, worker_listen="tcp://127.0.0.1:0",
                                                              pass_env=["LANG", "PATH"]))
    check(f"{job}: launched into cjrelayd", isinstance(h, cjrelay_flare.CJRelayJobHandle))
    row = jobs_row(a, job)
    check(f"{job}: the server url is the TLS scheme", row is not None and row.get("server") == "stcp://" + a.target, row)
    kit = os.path.join(a.ws, "startup")
    files = [os.path.join(kit, f) for f in ("rootCA.pem", "client.crt", "client.key")]
    check(f"{job}: described: the kit's TLS files as open files (tls_fds), no paths",
          SENT.get("tls_fds") == {"ca_file": 0, "cert_file": 1, "key_file": 2} and SENT.get("_fds") == files
          and not any(k in SENT for k in ("ca_file", "cert_file", "key_file")), (SENT.get("tls_fds"), SENT.get("_fds")))
    config = StatusClient(a.socket).command(f"show config job {job}")
    shown = [ln.split()[1] for ln in config if ln.split()[:1] == ["upstream.key_file"]]
    check(f"{job}: show config job names the key fd:<its path>", shown == ["fd:" + files[2]], shown)

    h.wait()
    code = cp.return_code(h, a.ws, job)
    check(f"{job}: over mutual TLS to its end; return code 0", code == 0, f"{code} {h.reason}")
    url = _bootstrap(a, job).get("connect_url", "")
    check(f"{job}: the trainer reached the loopback port cjrelayd bound for the job", url.startswith("tcp://127.0.0.1:")
          and not url.endswith(":0"), url)
    env = _read(os.path.join(a.ws, job + ".env"))
    check(f"{job}: pass_env [LANG, PATH]: the trainer has those", _env(env, "LANG") == os.environ["LANG"]
          and _env(env, "PATH") == os.environ["PATH"])
    check(f"{job}: pass_env [LANG, PATH]: and not the CP's others", not any(k + "=" in env for k in CP_ENV), env)


def uds(a):
    job = "FJU"
    h = start(a, job, external(a.worker, a.ws), launcher_args(a, uds_driver=True))
    check(f"{job}: launched into cjrelayd", isinstance(h, cjrelay_flare.CJRelayJobHandle))
    sock = a.socket[:-len(".sock")] + f".jobs/{job}/workers.sock"
    want = "uds://" + sock.lstrip("/")
    check(f"{job}: described: worker.listen is the job's own socket as uds://", SENT["worker"].get("listen") == want,
          SENT["worker"].get("listen"))
    h.wait()
    code = cp.return_code(h, a.ws, job)
    check(f"{job}: the trainer over the Unix socket ran the job to its end; return code 0", code == 0, f"{code} {h.reason}")
    url = _bootstrap(a, job).get("connect_url", "")
    check(f"{job}: the bootstrap's connect_url is the uds:// URL", url == want, url)
    env = _read(os.path.join(a.ws, job + ".env"))
    drivers = _env(env, "NVFLARE_COMM_DRIVER_PATH").split(os.pathsep)[0]
    check(f"{job}: the trainer's NVFLARE_COMM_DRIVER_PATH names the folder of the uds driver",
          [f for f in os.listdir(drivers) if f.endswith(".py")] == ["uds_driver.py"] if os.path.isdir(drivers) else False, drivers)


def wait_bounded(h, job, secs):
    """h.wait(), but a job that does not end within secs fails the check (and is stopped)
    instead of holding the suite until its time limit."""
    t = threading.Thread(target=h.wait, daemon=True)
    t.start()
    t.join(secs)
    check(f"{job}: the job ended within {secs} s", not t.is_alive())
    if t.is_alive():
        h.terminate()
        t.join(30)


def documented(a):
    job = "FJD"
    largs = documented_args(a.readme)
    largs["socket_path"] = a.socket   # the test daemon's, in place of /run/cjrelay/status.sock
    h = start(a, job, stock_executor(), largs)
    check(f"{job}: the documented snippet ({sorted(largs)}): launched into cjrelayd",
          isinstance(h, cjrelay_flare.CJRelayJobHandle), type(h).__name__)
    wait_bounded(h, job, 60)
    code = cp.return_code(h, a.ws, job)
    check(f"{job}: the stock trainer reached its job; return code 0", code == 0, f"{code} {h.reason}")
    link = _read(os.path.join(a.ws, job + ".link")).strip()
    check(f"{job}: it linked as FLARE does, through the uds driver", link == "linked uds CJRelayUdsDriver", link)
    env = _read(os.path.join(a.ws, job + ".env"))
    cp_env(job, env)
    app_dir = os.path.join(a.ws, job, "app_" + cp.SITE)
    check(f"{job}: trainer PYTHONPATH has the app's custom dir", f"{app_dir}/custom" in _env(env, "PYTHONPATH"))


def nostart(a):
    job = "FJN"
    sock = a.socket[:-len(".sock")] + f".jobs/{job}/workers.sock"
    largs = launcher_args(a, uds_driver=False, worker_listen="unix:" + sock)
    t0 = time.time()
    h = start(a, job, stock_executor(launch_timeout=3), largs)
    check(f"{job}: launched into cjrelayd", isinstance(h, cjrelay_flare.CJRelayJobHandle))
    check(f"{job}: described: worker.launch_timeout is the executor's", SENT["worker"].get("launch_timeout") == 3.0,
          SENT["worker"].get("launch_timeout"))
    wait_bounded(h, job, 30)
    took = time.time() - t0
    code = cp.return_code(h, a.ws, job)
    check(f"{job}: the job ended after the launch_timeout ({took:.1f} s)", 3 <= took < 20, took)
    check(f"{job}: return code 101 (FLARE's EXCEPTION: the server fails the job)", code == 101, f"{code} {h.reason}")
    check(f"{job}: the reason names the timeout and the trainer's error: {h.reason}",
          "launch_timeout 3 s" in h.reason and f"invalid Parent URL 'unix:{sock}'" in h.reason)
    row = jobs_row(a, job) or {}
    check(f"{job}: show jobs: ended, outcome 101, the reason", row.get("state") == "ended"
          and str(row.get("outcome")) == "101" and "invalid Parent URL" in row.get("reason", ""), row)
    logged = _LOG.getvalue()
    check(f"{job}: the CP's log has the return code and the reason",
          "ended: return code 101" in logged and "invalid Parent URL" in logged, logged.strip()[-400:])
    check(f"{job}: poll after the end gives 101", h.poll() == 101)


def abort(a):
    job = "FJ2"
    h = start(a, job, external(a.worker, a.ws), launcher_args(a))
    check(f"{job}: launched into cjrelayd", isinstance(h, cjrelay_flare.CJRelayJobHandle))
    deadline = time.time() + 30
    while time.time() < deadline and "ROUND 1 " not in _read(a.sim_out):
        time.sleep(0.1)
    check(f"{job}: a round went through before the abort", "ROUND 1 " in _read(a.sim_out))
    check(f"{job}: poll mid-run gives UNKNOWN", h.poll() == 127)
    h.terminate()
    h.wait()
    code = cp.return_code(h, a.ws, job)
    check(f"{job}: terminate() ends it as aborted (9)", code == 9, f"{code} {h.reason}")
    h.terminate()  # an ended job: nothing to do, no error
    check(f"{job}: terminate() after the end is harmless", h.poll() == 9)


def stock(a, job, executor, largs, meta_extra=None, expect_log=""):
    ClientProcessJobLauncher.launched.clear()
    h = start(a, job, executor, largs, meta_extra)
    check(f"{job}: handed to FLARE's ClientProcessJobLauncher", ClientProcessJobLauncher.launched == [job],
          ClientProcessJobLauncher.launched)
    check(f"{job}: the stock handle, not a cjrelay one", not isinstance(h, cjrelay_flare.CJRelayJobHandle))
    h.wait()
    check(f"{job}: the stock job ends with 0", h.poll() == 0)
    if expect_log:
        check(f"{job}: the log says why: {expect_log}", expect_log in _LOG.getvalue(), _LOG.getvalue().strip()[-300:])


def downfail(a):
    job = "FJ6"
    ClientProcessJobLauncher.launched.clear()
    h = start(a, job, external(a.worker, a.ws), launcher_args(a, on_daemon_error="fail"))
    check(f"{job}: nothing handed to the stock launcher", ClientProcessJobLauncher.launched == [])
    h.wait()
    check(f"{job}: the handle has ended with INFRASTRUCTURE_ERROR (104)", h.poll() == 104, h.poll())
    check(f"{job}: the CP's return code is 104", cp.return_code(h, a.ws, job) == 104)
    check(f"{job}: the log says why", "cjrelayd is not reachable" in _LOG.getvalue() and "fails (104)" in _LOG.getvalue())


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _bootstrap(a, job):
    try:
        return json.loads(_read(os.path.join(a.ws, job + ".boot")))
    except ValueError:
        return {}


def _env(text, name):
    return next((ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith(name + "=")), "")


_LOG = io.StringIO()


# local/resources.json.default as FLARE main's `nvflare poc prepare` writes it (the class allow-list
# shortened): the stock launcher among the site's other components and top-level keys
PROVISIONED = {
    "format_version": 2,
    "class_list_enforcement_mode": "enforce",
    "class_allow_list": ["nvflare.app_common.np.np_trainer.NPTrainer", "nvflare.app_common.workflows.fedavg.FedAvg"],
    "allow_log_streaming": True,
    "client": {"retry_timeout": 30, "compression": "Gzip"},
    "components": [
        {"id": "resource_manager", "path": "nvflare.app_common.resource_managers.gpu_resource_manager.GPUResourceManager",
         "args": {"num_of_gpus": 0, "mem_per_gpu_in_GiB": 0, "expiration_period": 300}},
        {"id": "process_launcher", "path": "nvflare.app_common.job_launcher.client_process_launcher.ClientProcessJobLauncher",
         "args": {}},
        {"id": "site_log_streamer", "path": "nvflare.app_common.logging.site_log_streamer.SiteLogStreamer",
         "args": {"log_file_name": "error_log.txt"}},
    ],
}


def _configure(ws, *args):
    """python3 -m cjrelay_flare.configure ARGS... WS, as a site runs it: (rc, stdout + stderr)."""
    r = subprocess.run([sys.executable, "-m", "cjrelay_flare.configure", *args, ws],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return r.returncode, " | ".join(r.stdout.strip().splitlines())


def _snap(path):
    st = os.stat(path)
    return _read(path), st.st_mtime_ns, st.st_mode


def configure(a):
    ws = a.ws
    cp.make_workspace(ws, a.scheme, a.target, {})
    local = os.path.join(ws, "local")
    res, dflt = os.path.join(local, "resources.json"), os.path.join(local, "resources.json.default")
    os.unlink(res)
    cp.write_json(dflt, PROVISIONED)
    os.chmod(dflt, 0o640)
    before = _read(dflt)
    rc, out = _configure(ws, "--socket", a.socket)
    check("configure: exits 0 on the provisioned workspace", rc == 0, out)
    check("configure: says what it did", "made from resources.json.default" in out and "replaced by" in out, out)
    check("configure: resources.json.default untouched", _read(dflt) == before)
    conf = json.loads(_read(res)) if os.path.exists(res) else {}
    check("configure: resources.json has resources.json.default's mode", os.path.exists(res)
          and os.stat(res).st_mode & 0o777 == 0o640)
    want = {"id": "job_launcher", "path": "cjrelay_flare.CJRelayJobLauncher",
            "args": dict(documented_args(a.readme), socket_path=a.socket)}
    comps = conf.get("components", [])
    check("configure: the README's job_launcher entry in process_launcher's place",
          len(comps) == 3 and comps[1] == want, json.dumps(comps[1] if len(comps) == 3 else comps))
    kept = dict(conf, components=[c for c in comps if c.get("id") != "job_launcher"])
    orig = dict(PROVISIONED, components=[c for c in PROVISIONED["components"] if c["id"] != "process_launcher"])
    check("configure: every other key and component as provisioned", kept == orig)
    # the entry built as the CP builds a component (the stand-in has none of the others)
    launcher = cp._build(comps[1]) if len(comps) == 3 else None
    check("configure: the entry builds a CJRelayJobLauncher on the given socket",
          isinstance(launcher, cjrelay_flare.CJRelayJobLauncher) and launcher.socket_path == a.socket,
          type(launcher).__name__)
    snap = _snap(res)
    rc, out = _configure(ws, "--socket", a.socket)
    check("configure: run again: says so, exits 0, changes nothing",
          rc == 0 and "already configured" in out and _snap(res) == snap, out)
    rc, out = _configure(ws, "--socket", a.socket + ".other")
    check("configure: run again with another socket: refused, nothing changed",
          rc == 1 and "already configured, with other arguments" in out and _snap(res) == snap, out)
    rc, out = _configure(ws, "--socket", a.socket, "no_such_arg=1")
    check("configure: an argument the launcher does not take: refused", rc == 1 and "no_such_arg=1" in out
          and "uds_driver" in out and _snap(res) == snap, out)
    rc, out = _configure(ws, "--undo")
    check("configure --undo: exits 0, FLARE's stock launcher back as provisioned",
          rc == 0 and json.loads(_read(res)) == PROVISIONED, out)
    rc, out = _configure(ws, "--undo")
    check("configure --undo again: says so, nothing changed", rc == 0 and "already FLARE's stock one" in out, out)
    rc, out = _configure(ws, "--socket", a.socket, "uds_driver=false", "job_property=use_cjrelay")
    args = json.loads(_read(res))["components"][1].get("args", {})
    check("configure ARG=VALUE: JSON values, else strings",
          rc == 0 and args.get("uds_driver") is False and args.get("job_property") == "use_cjrelay", json.dumps(args))
    # a site that is not as provisioned: two launchers, or another kind than the stock one
    docker = {"id": "docker_launcher", "path": "nvflare.app_opt.job_launcher.docker_launcher.ClientDockerJobLauncher",
              "args": {}}
    for name, comps in (("two launchers", PROVISIONED["components"] + [docker]),
                        ("a Docker launcher", [docker]), ("no launcher", PROVISIONED["components"][:1])):
        cp.write_json(res, dict(PROVISIONED, components=comps))
        snap = _snap(res)
        rc, out = _configure(ws, "--socket", a.socket)
        check(f"configure: {name}: refused with a reason, nothing changed", rc == 1 and _snap(res) == snap
              and ("job launchers" in out or "not FLARE's" in out), out)
    rc, out = _configure(os.path.join(ws, "startup"))
    check("configure: not a client workspace: refused", rc == 1 and "not a FLARE client workspace" in out, out)


def main():
    p = argparse.ArgumentParser()
    for opt in ("scenario", "ws", "socket", "target", "worker"):
        p.add_argument("--" + opt, required=True)
    p.add_argument("--scheme", default="tcp")
    p.add_argument("--parent", default="")
    p.add_argument("--sim-out", default="")
    p.add_argument("--conn-sec", default="clear")
    p.add_argument("--readme", default=os.path.join(HERE, "..", "..", "integrations", "flare", "README.md"))
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, handlers=[logging.StreamHandler(_LOG), logging.StreamHandler(sys.stderr)])
    os.environ["CJTEST_TRAINER_SECRET"] = SECRET
    os.environ.setdefault("LANG", "C.UTF-8")
    # the CP's own environment, which a stock trainer inherits: FLARE's start script's
    # MALLOC_ARENA_MAX, a PATH of the CP's own; and what must not reach the trainer: the job's
    # credentials under their names, or in a variable's value
    os.environ.update(CP_ENV)
    os.environ["PATH"] = os.path.join(a.ws, "cp-bin") + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    os.environ["NVFLARE_JOB_AUTH_TOKEN"] = CREDS[0]
    os.environ["CJTEST_HOLDS_SIG"] = f"sig={CREDS[1]};"
    # and what cjrelayd's worker.env cannot take (a stock trainer would get them): a bash
    # function's variable, a value that is not UTF-8; the job still goes to cjrelayd
    os.environ["BASH_FUNC_cjtest%%"] = "() {  echo cjtest\n}"
    os.environ["CJTEST_NOT_UTF8"] = b"caf\xe9".decode("utf-8", "surrogateescape")
    os.makedirs(os.path.join(a.ws, "cp-bin"), exist_ok=True)
    if a.scenario == "success":
        success(a)
    elif a.scenario == "tls":
        tls(a)
    elif a.scenario == "abort":
        abort(a)
    elif a.scenario == "uds":
        uds(a)
    elif a.scenario == "documented":
        documented(a)
    elif a.scenario == "nostart":
        nostart(a)
    elif a.scenario == "stock":
        inproc = {"path": "nvflare.app_common.executors.client_api_executor.ClientAPIExecutor",
                  "args": {"execution_mode": "in_process", "task_script_path": "train.py"}}
        stock(a, "FJ3", inproc, launcher_args(a), expect_log="not for cjrelay")
    elif a.scenario == "narrowed":
        stock(a, "FJ4", external(a.worker, a.ws), launcher_args(a, job_property="use_cjrelay"),
              {"custom_props": {"other": True}}, expect_log="do not set use_cjrelay")
    elif a.scenario == "bigenv":
        os.environ.update({f"CJTEST_BIG_{i}": "x" for i in range(300)})
        stock(a, "FJB", external(a.worker, a.ws), launcher_args(a),
              expect_log="not for cjrelay (the trainer's environment has 3")
    elif a.scenario == "lost":
        lost(a)
    elif a.scenario == "refused":
        stock(a, "FJ.7", external(a.worker, a.ws), launcher_args(a), expect_log="cjrelayd refused the job (ERR 400 job_id")
    elif a.scenario == "down":
        stock(a, "FJ5", external(a.worker, a.ws), launcher_args(a), expect_log="cjrelayd is not reachable")
    elif a.scenario == "downfail":
        downfail(a)
    elif a.scenario == "configure":
        configure(a)
    else:
        raise SystemExit(f"unknown scenario {a.scenario}")
    logged = _LOG.getvalue()
    check(f"{a.scenario}: no credential or secret in the launcher's log",
          not any(c in logged for c in CREDS + (SECRET,)))
    print(json.dumps({"scenario": a.scenario, "failed": _out["fail"]}), file=sys.stderr)
    return 1 if _out["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
