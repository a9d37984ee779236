"""Drives CJRelayJobLauncher through one job's life, as FLARE's CP would; prints TAP lines.

Run by tests/e2e/test_flare.sh with PYTHONPATH = tests/flare (the FLARE stand-in) and
integrations/flare (the package). One scenario per run:

  success   (job_property set, and the job's custom_props set it) launch into cjrelayd, poll while running, wait, return code 0, what the trainer got
  tls       as the startup kit provisions mutual TLS (scheme tcp, connection_security mtls, the
            kit's rootCA.pem, client.crt, client.key): the kit's files go to cjrelayd as open files
            (tls_fds), the job reaches an stcp server, return code 0
  uds       uds_driver true, no worker_listen: the job's own Unix socket is sent as uds://, the
            trainer gets the uds driver on NVFLARE_COMM_DRIVER_PATH and its bootstrap's connect_url is
            that uds:// URL; the job runs to its end (return code 0)
  abort     launch, terminate() mid-run, wait, return code 9
  stock     a job cjrelay does not serve (in_process executor) goes to ClientProcessJobLauncher
  narrowed  job_property set and the job's custom_props lack it: ClientProcessJobLauncher
  refused   cjrelayd refuses the job (ERR 400: a job id it does not take): ClientProcessJobLauncher
  lost      the answer to job start is lost after the job started: no second start by the stock launcher
  down      cjrelayd not listening, on_daemon_error fallback: ClientProcessJobLauncher, the reason logged
  downfail  cjrelayd not listening, on_daemon_error fail: a handle that has ended with 104
"""

import argparse
import io
import json
import logging
import os
import shutil
import sys
import time

import cp
from nvflare.app_common.job_launcher.client_process_launcher import ClientProcessJobLauncher

import cjrelay_flare
from cjrelay_flare.status import DaemonUnavailable, StatusClient

CREDS = ("cjtest-flaretoken-5be1d07c", "cjtest-flaresig-9a0c44e1", "cjtest-flaressid-31f7")
SECRET = "cjtest-secret-value-8d2f"
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
    described(job, a)
    boot = _bootstrap(a, job)
    if boot.get("memory_gc_rounds") == 2:
        print(f"ok - {job}: the trainer's bootstrap file has the description's bootstrap keys")
    else:
        print(f"skip - {job}: the trainer's bootstrap file has the description's bootstrap keys: cjrelayd "
              f"does not write them yet (memory_gc_rounds {boot.get('memory_gc_rounds')}, not 2)")


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
    h = start(a, job, external(a.worker, a.ws), launcher_args(a, worker_listen="tcp://127.0.0.1:0"))
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


def main():
    p = argparse.ArgumentParser()
    for opt in ("scenario", "ws", "socket", "target", "worker"):
        p.add_argument("--" + opt, required=True)
    p.add_argument("--scheme", default="tcp")
    p.add_argument("--parent", default="")
    p.add_argument("--sim-out", default="")
    p.add_argument("--conn-sec", default="clear")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, handlers=[logging.StreamHandler(_LOG), logging.StreamHandler(sys.stderr)])
    os.environ["CJTEST_TRAINER_SECRET"] = SECRET
    os.environ.setdefault("LANG", "C.UTF-8")
    if a.scenario == "success":
        success(a)
    elif a.scenario == "tls":
        tls(a)
    elif a.scenario == "abort":
        abort(a)
    elif a.scenario == "uds":
        uds(a)
    elif a.scenario == "stock":
        inproc = {"path": "nvflare.app_common.executors.client_api_executor.ClientAPIExecutor",
                  "args": {"execution_mode": "in_process", "task_script_path": "train.py"}}
        stock(a, "FJ3", inproc, launcher_args(a), expect_log="not for cjrelay")
    elif a.scenario == "narrowed":
        stock(a, "FJ4", external(a.worker, a.ws), launcher_args(a, job_property="use_cjrelay"),
              {"custom_props": {"other": True}}, expect_log="do not set use_cjrelay")
    elif a.scenario == "lost":
        lost(a)
    elif a.scenario == "refused":
        stock(a, "FJ.7", external(a.worker, a.ws), launcher_args(a), expect_log="cjrelayd refused the job (ERR 400 job_id")
    elif a.scenario == "down":
        stock(a, "FJ5", external(a.worker, a.ws), launcher_args(a), expect_log="cjrelayd is not reachable")
    elif a.scenario == "downfail":
        downfail(a)
    else:
        raise SystemExit(f"unknown scenario {a.scenario}")
    logged = _LOG.getvalue()
    check(f"{a.scenario}: no credential or secret in the launcher's log",
          not any(c in logged for c in CREDS + (SECRET,)))
    print(json.dumps({"scenario": a.scenario, "failed": _out["fail"]}), file=sys.stderr)
    return 1 if _out["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
