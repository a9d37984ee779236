# SPDX-License-Identifier: Apache-2.0
"""cjrelay_flare on the client parent (CP) of a real FLARE release (2.8.1, 2.7.2); prints TAP lines.

Run by tests/e2e/test_flare.sh (j) with PYTHONPATH = tests/site/shim, the FLARE tree
(../shared/flare/<version>) and the package, never the stand-in of tests/flare/nvflare:

  * the CP's set-up is FLARE's own: FLClientStarterConfiger builds local/resources.json's
    components (the launcher as the README's entry names it), fed_utils.get_job_launcher fires
    BEFORE_JOB_LAUNCH and applies the "exactly one launcher" rule; the launch's fl_ctx has the
    props client_train.py and ClientExecutor.start_app of that version set, JOB_PROCESS_ARGS
    with the credentials (-t/-ts/-d) included;
  * the jobs are exported at test time with that version's FedJob + ScriptRunner (the NumPy
    trainer of tests/site/train.py), then changed where a case needs it, and deployed as FLARE
    deploys them (<ws>/<job_id>/app_site-1, meta.json);
  * the description is taken from the job start line the launcher sends (the status socket is
    replaced by a recorder: cjrelayd is not asked), and its TASK_EXCHANGE / METRICS_EXCHANGE are
    compared with the client_api_config.json that version's own ClientAPILauncherExecutor and
    ExternalConfigurator write for the same job;
  * every job cjrelay does not serve goes to the launcher's ClientProcessJobLauncher (FLARE's
    own class; its launch_job is recorded, no client job is started), the reason in the CP's log.

    releases.py --tree DIR --work DIR --label 2.8.1
"""

import argparse
import copy
import json
import logging
import os
import shutil
import sys

CREDS = ("cjtest-reltoken-6a1f", "cjtest-relsig-0c9e", "cjtest-relssid-77d2")
SITE = "site-1"
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_DIR = os.path.join(os.path.dirname(HERE), "site")
_out = {"fail": 0}
# this script's folder holds the FLARE stand-in (tests/flare/nvflare): never on this run's path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]


def check(name, ok, detail=""):
    print(("ok - " if ok else "not ok - ") + name + (f" ({detail})" if detail and not ok else ""), flush=True)
    if not ok:
        _out["fail"] += 1
    return ok


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


# ---- the CP ---------------------------------------------------------------------------------------

class Engine:
    """What fed_utils.get_job_launcher and the CP's components ask of FLARE's ClientEngine: a
    context manager with the CP's stickers, and events fired to the site's components."""

    def __init__(self, components):
        from nvflare.apis.fl_context import FLContextManager

        self.components = components
        self.mgr = FLContextManager(engine=self, identity_name=SITE, job_id="", public_stickers={},
                                    private_stickers={})

    def new_context(self):
        return self.mgr.new_context()

    def fire_event(self, event_type, fl_ctx):
        for c in self.components.values():
            if hasattr(c, "handle_event"):
                c.handle_event(event_type, fl_ctx)


class CP:
    """A client workspace as FLARE provisions one, and the CP's components built by FLARE."""

    def __init__(self, root, launcher_args):
        import argparse as ap

        from nvflare.apis.fl_constant import FLContextKey
        from nvflare.apis.workspace import Workspace
        from nvflare.private.fed.app.fl_conf import FLClientStarterConfiger

        self.root = root
        write_json(os.path.join(root, "startup", "fed_client.json"), {
            "format_version": 2,
            "servers": [{"name": "cjtest_project", "service": {"target": "127.0.0.1:8002", "scheme": "tcp"},
                         "identity": "server"}],
            "client": {"ssl_private_key": "client.key", "ssl_cert": "client.crt", "ssl_root_cert": "rootCA.pem",
                       "fqsn": SITE, "is_leaf": True, "connection_security": "clear"},
        })
        write_json(os.path.join(root, "local", "resources.json"), {
            "format_version": 2,
            "components": [
                {"id": "resource_manager",
                 "path": "nvflare.app_common.resource_managers.gpu_resource_manager.GPUResourceManager",
                 "args": {"num_of_gpus": 0, "mem_per_gpu_in_GiB": 0}},
                {"id": "job_launcher", "path": "cjrelay_flare.CJRelayJobLauncher", "args": launcher_args},
            ],
        })
        self.ws = Workspace(root, SITE)
        args = ap.Namespace(workspace=root, job_id=None, config_folder="config", set=["uid=" + SITE], parent_url=None)
        conf = FLClientStarterConfiger(workspace=self.ws, args=args, kv_list=args.set)
        conf.configure()
        self.deployer = conf.base_deployer
        self.engine = Engine(conf.components)
        with self.engine.new_context() as ctx:  # client_train.py's sticky props
            ctx.set_prop(FLContextKey.CLIENT_CONFIG, self.deployer.client_config, private=True, sticky=True)
            ctx.set_prop(FLContextKey.SERVER_CONFIG, self.deployer.server_config, private=True, sticky=True)
            ctx.set_prop(FLContextKey.SECURE_MODE, self.deployer.secure_train, private=True, sticky=True)
            ctx.set_prop(FLContextKey.WORKSPACE_OBJECT, self.ws, private=True)

    def launcher(self, meta):
        from nvflare.private.fed.utils.fed_utils import get_job_launcher

        return get_job_launcher(meta, self.engine.new_context())

    def deploy(self, job_id, app_dir, change=None, conf_name=None, custom=True):
        """<ws>/<job_id>/app_site-1 from an exported app, its client config changed by ``change``
        (``custom`` false: without its custom folder); the meta's byoc as FLARE's server derives
        it (job_meta_validator.py: the app has a custom folder)."""
        dest = self.ws.get_app_dir(job_id)
        shutil.rmtree(self.ws.get_run_dir(job_id), ignore_errors=True)
        shutil.copytree(app_dir, dest)
        if not custom:
            shutil.rmtree(os.path.join(dest, "custom"), ignore_errors=True)
        path = os.path.join(dest, "config", "config_fed_client.json")
        with open(path) as f:
            config = json.load(f)
        if change:
            config = change(copy.deepcopy(config)) or config
        if conf_name:
            os.remove(path)
            path = os.path.join(dest, "config", conf_name)
        write_json(path, config)
        meta = {"job_id": job_id, "name": job_id, "deploy_map": {"app_" + SITE: [SITE]}}
        if os.path.isdir(os.path.join(dest, "custom")):
            meta["byoc"] = True
        write_json(self.ws.get_job_meta_path(job_id), meta)
        return meta

    def launch_context(self, job_id, parent_conn_sec=None):
        """The fl_ctx of ClientExecutor.start_app: JOB_PROCESS_ARGS as this version sets them."""
        from nvflare.apis.fl_constant import FLContextKey
        from nvflare.apis.job_launcher_spec import JobProcessArgs

        service = self.deployer.server_config[0]["service"]
        token, sig, ssid = CREDS
        ctx = self.engine.new_context()
        args = {
            JobProcessArgs.EXE_MODULE: ("-m", "nvflare.private.fed.app.client.worker_process"),
            JobProcessArgs.JOB_ID: ("-n", job_id),
            JobProcessArgs.CLIENT_NAME: ("-c", SITE),
            JobProcessArgs.AUTH_TOKEN: ("-t", token),
            JobProcessArgs.TOKEN_SIGNATURE: ("-ts", sig),
            JobProcessArgs.SSID: ("-d", ssid),
            JobProcessArgs.WORKSPACE: ("-m", self.root),
            JobProcessArgs.STARTUP_DIR: ("-w", self.ws.get_startup_kit_dir()),
            JobProcessArgs.PARENT_URL: ("-p", "tcp://localhost:41234"),
            JobProcessArgs.SCHEME: ("-scheme", service.get("scheme", "grpc")),
            JobProcessArgs.TARGET: ("-g", service.get("target")),
            JobProcessArgs.STARTUP_CONFIG_FILE: ("-s", "fed_client.json"),
            JobProcessArgs.OPTIONS: ("--set", " uid=site-1 print_conf=True"),
        }
        if parent_conn_sec:  # 2.7.2: -pcs; 2.8.x: --parent_conn_sec
            flag = "-pcs" if hasattr(JobProcessArgs, "HA_MODE") else "--parent_conn_sec"
            args[JobProcessArgs.PARENT_CONN_SEC] = (flag, parent_conn_sec)
        ctx.set_prop(FLContextKey.JOB_PROCESS_ARGS, args, private=True, sticky=False)
        return ctx


class Recorder(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def wire(launcher):
    """The launcher's status socket and stock launcher replaced by recorders."""
    sent, stock = [], []

    def command(line, timeout=None, fds=()):
        sent.append(line)
        return ["state: starting"]

    launcher.client.command = command
    launcher.stock.launch_job = lambda meta, ctx: stock.append(meta["job_id"]) or "stock-handle"
    rec = Recorder()
    launcher.logger.addHandler(rec)
    launcher.logger.setLevel(logging.DEBUG)
    return sent, stock, rec


def launch(cp, launcher, job_id, app, change=None, **kw):
    """Deploy and launch; (the description sent, or None; whether the stock launcher got it; the log)."""
    meta = cp.deploy(job_id, app, change, kw.pop("conf_name", None), kw.pop("custom", True))
    sent, stock, rec = wire(launcher)
    launcher.launch_job(meta, cp.launch_context(job_id, **kw))
    launcher.logger.removeHandler(rec)
    desc = json.loads(sent[-1][len("job start "):]) if sent else None
    return desc, job_id in stock, rec.lines


# ---- FLARE's own view of a job: FedJob's export, the stock client job's client_api_config.json --------

def export(out, name, **runner):
    from nvflare.app_common.np.np_model_persistor import NPModelPersistor
    from nvflare.app_common.workflows.fedavg import FedAvg
    from nvflare.fuel.utils.constants import FrameworkType
    from nvflare.job_config.api import FedJob
    from nvflare.job_config.script_runner import ScriptRunner

    job = FedJob(name=name, min_clients=1)
    job.to_server(NPModelPersistor(model=[0.0, 0.0, 0.0, 0.0]), id="persistor")
    job.to_server(FedAvg(num_clients=1, num_rounds=2, persistor_id="persistor"))
    cwd = os.getcwd()
    os.chdir(TRAIN_DIR)  # the script named relative to its folder, as tests/site/admin.py does
    try:
        args = dict(script="train.py", script_args="2", launch_external_process=True, framework=FrameworkType.NUMPY)
        args.update(runner)
        job.to(ScriptRunner(**args), SITE)
        job.export_job(out)
    finally:
        os.chdir(cwd)
    return os.path.join(out, name, "app_" + SITE)


def stock_exchange(cp, job_id):
    """TASK_EXCHANGE and METRICS_EXCHANGE (each without pipe) of the client_api_config.json this
    FLARE's ClientAPILauncherExecutor (prepare_config_for_launch, after the job-config overrides
    where the version applies them) and ExternalConfigurator (ABOUT_TO_START_RUN) write for the
    deployed job; its components built by FLARE's ComponentBuilder from the job's config, FLARE's
    variables resolved by FLARE's resolver with the values a client job has."""
    from nvflare.apis.event_type import EventType
    from nvflare.apis.fl_constant import SystemVarName
    from nvflare.apis.fl_context import FLContextManager
    from nvflare.fuel.utils.component_builder import ComponentBuilder
    from nvflare.fuel.utils.json_scanner import JsonScanner
    from nvflare.fuel.utils.wfconf import resolve_var_refs

    cfg_dir = cp.ws.get_app_config_dir(job_id)
    with open(os.path.join(cfg_dir, "config_fed_client.json")) as f:
        data = json.load(f)
    variables = dict(data)
    variables.update({SystemVarName.JOB_ID: job_id, SystemVarName.SITE_NAME: SITE, SystemVarName.WORKSPACE: cp.root,
                      SystemVarName.ROOT_URL: "tcp://127.0.0.1:8002", SystemVarName.CP_URL: "tcp://localhost:41234",
                      SystemVarName.RELAY_URL: "", SystemVarName.SECURE_MODE: False,
                      SystemVarName.JOB_CUSTOM_DIR: cp.ws.get_app_custom_dir(job_id), SystemVarName.JOB_CONFIG_DIR: cfg_dir})
    resolve_var_refs(JsonScanner(data), variables)

    class Builder(ComponentBuilder):
        def get_module_scanner(self):
            return None

    builder = Builder()
    comps = {c["id"]: builder.build_component(c) for c in data["components"]}
    executor = builder.build_component(data["executors"][0]["executor"])

    class JobEngine:
        def get_component(self, cid):
            return comps.get(cid)

        def get_all_components(self):
            return comps

        def get_workspace(self):
            return cp.ws

    ctx = FLContextManager(engine=JobEngine(), identity_name=SITE, job_id=job_id).new_context()
    executor.pipe = comps[executor.pipe_id] if hasattr(executor, "pipe_id") else comps[data["executors"][0]["executor"]["args"]["pipe_id"]]
    if hasattr(executor, "_apply_client_config_overrides"):
        executor._apply_client_config_overrides(ctx)
    out_file = os.path.join(cfg_dir, "client_api_config.json")
    if os.path.exists(out_file):
        os.remove(out_file)
    executor.prepare_config_for_launch(ctx)
    for c in comps.values():  # what MetricRelay does at ABOUT_TO_START_RUN, but the pipe's opening
        if type(c).__name__ == "MetricRelay":
            c.pipe = comps[c.pipe_id]
    for c in comps.values():
        if type(c).__name__ == "ExternalConfigurator":
            c.handle_event(EventType.ABOUT_TO_START_RUN, ctx)
    with open(out_file) as f:
        written = json.load(f)
    os.remove(out_file)
    out = {}
    for key in ("TASK_EXCHANGE", "METRICS_EXCHANGE"):
        if key in written:
            out[key] = {k: v for k, v in written[key].items() if k != "pipe"}
    return out, executor


# ---- the cases ------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tree", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--label", required=True)
    a = p.parse_args()
    tree = os.path.abspath(a.tree)
    os.environ["CLIENT_API_TYPE"] = "IN_PROCESS_API"   # the CP's own; the trainer must not get it
    os.environ["MALLOC_ARENA_MAX"] = "4"
    L = a.label

    import nvflare

    check(f"{L}: FLARE is the real tree ({nvflare.__file__})", nvflare.__file__.startswith(tree + os.sep))
    import cjrelay_flare
    from cjrelay_flare import pipe_job
    from nvflare.app_common.job_launcher.client_process_launcher import ClientProcessJobLauncher

    check(f"{L}: cjrelay_flare imports on this FLARE's CP", True)
    cp = CP(os.path.join(a.work, "ws"), {"socket_path": os.path.join(a.work, "status.sock"),
                                         "on_daemon_error": "fallback"})
    meta = cp.deploy("J0", export(os.path.join(a.work, "exp"), "ext"))
    launcher = cp.launcher(meta)
    check(f"{L}: FLARE's get_job_launcher picks CJRelayJobLauncher, the site's one launcher",
          isinstance(launcher, cjrelay_flare.CJRelayJobLauncher), type(launcher))
    check(f"{L}: its fallback is this FLARE's ClientProcessJobLauncher", isinstance(launcher.stock, ClientProcessJobLauncher))

    image_meta = dict(meta, deploy_map={"app_" + SITE: [{"sites": [SITE], "image": "cjtest/trainer:1"}]})
    try:
        other = cp.launcher(image_meta)
    except RuntimeError as e:
        other = e
    from nvflare.apis.event_type import EventType
    from nvflare.apis.fl_constant import FLContextKey

    with cp.engine.new_context() as ctx:  # FLARE's own process launcher, asked about the same job
        ctx.set_prop(FLContextKey.JOB_META, image_meta, private=True, sticky=False)
        ClientProcessJobLauncher().handle_event(EventType.BEFORE_JOB_LAUNCH, ctx)
        takes_images = bool(ctx.get_prop(FLContextKey.JOB_LAUNCHER))
    check(f"{L}: a job with a job image for the site: the launcher registers as this FLARE's process launcher "
          f"would ({'it does' if takes_images else 'it does not: no launcher'})",
          isinstance(other, cjrelay_flare.CJRelayJobLauncher) if takes_images
          else isinstance(other, RuntimeError) and "no job launcher" in str(other), other)

    app = export(os.path.join(a.work, "exp"), "ext")
    with open(os.path.join(app, "config", "config_fed_client.json")) as f:
        exported = json.load(f)
    ex = exported["executors"][0]["executor"]
    check(f"{L}: FedJob exported a ClientAPILauncherExecutor with a SubprocessLauncher and CellPipes",
          ex["path"].endswith("ClientAPILauncherExecutor")
          and sorted(c["path"].rsplit(".", 1)[-1] for c in exported["components"])
          == ["CellPipe", "CellPipe", "ExternalConfigurator", "MetricRelay", "SubprocessLauncher"], exported)

    # -- the job, served ------------------------------------------------------------------------------
    desc, stock, log = launch(cp, launcher, "J1", app)
    check(f"{L}: the exported job goes to cjrelayd, not the stock launcher", desc is not None and not stock, log)
    desc = desc or {}
    w = desc.get("worker", {})
    expected_version = nvflare.__version__ if nvflare.__version__[:1] not in ("0", "") else L.rsplit(".", 1)[0]
    check(f"{L}: flare_version {desc.get('flare_version')!r} (nvflare.__version__ {nvflare.__version__!r})",
          desc.get("flare_version") == expected_version)
    python3 = os.path.abspath(shutil.which("python3"))
    check(f"{L}: worker.argv is the launcher's script, split: {w.get('argv')}",
          w.get("argv") == [python3, "-u", "custom/train.py", "2"])
    check(f"{L}: worker.cwd is the app dir", w.get("cwd") == cp.ws.get_app_dir("J1") and os.path.isabs(w.get("cwd", "")))
    env = w.get("env", {})
    check(f"{L}: worker.env: the CP's, without CLIENT_API_TYPE (cjrelayd sets it)",
          "CLIENT_API_TYPE" not in env and env.get("MALLOC_ARENA_MAX") == "4")
    check(f"{L}: worker.env: PYTHONPATH ends with the app's custom dir",
          env.get("PYTHONPATH", "").split(os.pathsep)[-1] == cp.ws.get_app_custom_dir("J1"), env.get("PYTHONPATH"))
    check(f"{L}: worker.count 1, listen tcp://127.0.0.1:0, launch_timeout 300 (external_pre_init_timeout)",
          w.get("count") == 1 and w.get("listen") == "tcp://127.0.0.1:0" and w.get("launch_timeout") == 300.0, w)
    check(f"{L}: credentials from JOB_PROCESS_ARGS (-t, -ts, -d)",
          desc.get("credentials") == dict(zip(("token", "token_signature", "ssid"), CREDS)), desc.get("credentials"))
    check(f"{L}: no credential in the worker's argv or environment",
          not any(c in json.dumps(w) for c in CREDS))
    check(f"{L}: server_url, parent_url, site, workspace",
          desc.get("server_url") == "tcp://127.0.0.1:8002" and desc.get("parent_url") == "tcp://localhost:41234"
          and desc.get("site") == SITE and desc.get("workspace") == cp.root, desc)
    boot = desc.get("bootstrap", {})
    check(f"{L}: bootstrap has TASK_EXCHANGE and METRICS_EXCHANGE, no pipe, nothing the daemon writes",
          sorted(boot) == ["METRICS_EXCHANGE", "TASK_EXCHANGE"]
          and all("pipe" not in v for v in boot.values()), boot)
    want, _ = stock_exchange(cp, "J1")
    check(f"{L}: TASK_EXCHANGE is what this FLARE's ClientAPILauncherExecutor writes",
          boot.get("TASK_EXCHANGE") == want.get("TASK_EXCHANGE"), f"{boot.get('TASK_EXCHANGE')} != {want.get('TASK_EXCHANGE')}")
    check(f"{L}: METRICS_EXCHANGE is what its ExternalConfigurator writes",
          boot.get("METRICS_EXCHANGE") == want.get("METRICS_EXCHANGE"), f"{boot.get('METRICS_EXCHANGE')} != {want.get('METRICS_EXCHANGE')}")
    check(f"{L}: the CP's log says cjrelayd runs it", any("J1: cjrelayd runs it" in ln for ln in log), log)
    saved = nvflare.__version__
    nvflare.__version__ = L
    desc2, _, _ = launch(cp, launcher, "J1v", app)
    nvflare.__version__ = saved
    check(f"{L}: a CP reporting nvflare.__version__ {L} sends it as flare_version", (desc2 or {}).get("flare_version") == L)

    # -- what the job sets --------------------------------------------------------------------------------
    once = export(os.path.join(a.work, "exp1"), "once", launch_once=False)
    d, _, log = launch(cp, launcher, "J2", once)
    want, _ = stock_exchange(cp, "J2")
    check(f"{L}: launch_once false (ScriptRunner) reaches TASK_EXCHANGE as stock writes it",
          d and d["bootstrap"]["TASK_EXCHANGE"]["launch_once"] is False
          and d["bootstrap"]["TASK_EXCHANGE"] == want["TASK_EXCHANGE"], (d or {}).get("bootstrap", log))

    def with_args(config):
        config["executors"][0]["executor"]["args"].update(
            {"heartbeat_timeout": 120.0, "train_with_evaluation": True, "max_resends": 0, "memory_gc_rounds": 2,
             "external_pre_init_timeout": 50.0})
        return config

    d, _, log = launch(cp, launcher, "J3", app, with_args)
    want, _ = stock_exchange(cp, "J3")
    check(f"{L}: executor args given by the job reach TASK_EXCHANGE as stock writes them",
          d and d["bootstrap"]["TASK_EXCHANGE"] == want["TASK_EXCHANGE"]
          and d["bootstrap"]["TASK_EXCHANGE"]["HEARTBEAT_TIMEOUT"] == 120.0, (d or {}).get("bootstrap", log))
    check(f"{L}: the executor's external_pre_init_timeout is worker.launch_timeout",
          d and d["worker"].get("launch_timeout") == 50.0)

    def overrides(config):
        config.update({"EXTERNAL_PRE_INIT_TIMEOUT": 42, "submit_result_timeout": 77.0, "download_complete_timeout": 99.0})
        return config

    d, _, log = launch(cp, launcher, "J4", app, overrides)
    want, stock_ex = stock_exchange(cp, "J4")
    check(f"{L}: top-level EXTERNAL_PRE_INIT_TIMEOUT overrides the executor's: launch_timeout 42",
          d and d["worker"].get("launch_timeout") == 42.0, (d or {}).get("worker", log))
    check(f"{L}: top-level submit_result_timeout/download_complete_timeout as this FLARE applies them "
          f"({want.get('TASK_EXCHANGE', {}).get('submit_result_timeout')})",
          d and d["bootstrap"]["TASK_EXCHANGE"] == want["TASK_EXCHANGE"], (d or {}).get("bootstrap", log))

    def log_streamer(config):  # as the CP's SiteLogStreamer injects it (2.8.x, allow_log_streaming)
        config["components"].append({"id": "auto_log_streamer",
                                     "path": "nvflare.app_common.logging.job_log_streamer.JobLogStreamer",
                                     "args": {"target_parent_server": True, "log_file_name": "error_log.txt"}})
        return config

    d, stock, log = launch(cp, launcher, "J4s", app, log_streamer)
    check(f"{L}: a job with the JobLogStreamer a site injects goes to cjrelayd", d is not None and not stock, log)

    def variables(config):
        config["app_script"] = "train.py"
        launcher_comp = next(c for c in config["components"] if c["id"] == "launcher")
        launcher_comp["args"]["script"] = "python3 -u custom/{app_script} --site {SITE_NAME} --job {JOB_ID} --ws {WORKSPACE} --custom '{JOB_CUSTOM_DIR}'"
        return config

    d, _, log = launch(cp, launcher, "J5", app, variables)
    check(f"{L}: FLARE's variables and the job's own in the script are resolved",
          d and d["worker"]["argv"] == [python3, "-u", "custom/train.py", "--site", SITE, "--job", "J5",
                                        "--ws", cp.root, "--custom", cp.ws.get_app_custom_dir("J5")],
          (d or {}).get("worker", {}).get("argv", log))
    try:
        import pyhocon  # noqa: F401  (tests/site/shim's stand-in reads .conf files written as JSON)
        d, _, log = launch(cp, launcher, "J6", app, variables, conf_name="config_fed_client.conf")
        check(f"{L}: a .conf client config, its job variable resolved",
              d and d["worker"]["argv"][2] == "custom/train.py" and d["worker"]["argv"][6] == "J6", log)
    except ImportError:
        print(f"skip - {L}: a .conf client config: no pyhocon")

    for cls, fmt in (("PTClientAPILauncherExecutor", "pytorch"), ("TFClientAPILauncherExecutor", "keras_layer_weights")):
        def subclass(config, cls=cls):
            ex = config["executors"][0]["executor"]
            ex["path"] = pipe_job.EXECUTOR_MODULES[cls] + "." + cls
            ex["args"].pop("max_resends", None) if cls.startswith("TF") else None
            return config

        d, _, log = launch(cp, launcher, "J7" + cls[:2], app, subclass)
        te = (d or {}).get("bootstrap", {}).get("TASK_EXCHANGE", {})
        check(f"{L}: {cls} (its source read, not imported: {'torch' if fmt == 'pytorch' else 'tensorflow'} "
              f"{'loaded' if ('torch' if fmt == 'pytorch' else 'tensorflow') in sys.modules else 'not loaded'}): "
              f"exchange_format {te.get('exchange_format')}",
              te.get("exchange_format") == fmt and te.get("download_complete_timeout") == 1800.0
              and te.get("max_resends") == (3 if fmt != "pytorch" else ex["args"].get("max_resends", 3)),
              te or log)

    # max_resends null: 2.7.2's FedJob writes it and its client job takes it (unbounded); 2.8.x refuses it
    def unbounded(config):
        config["executors"][0]["executor"]["args"]["max_resends"] = None
        return config

    d, stock, log = launch(cp, launcher, "J8", app, unbounded)
    if pipe_job._refuses_unbounded():
        check(f"{L}: max_resends null, which this FLARE's client job refuses: the stock launcher, the reason logged",
              stock and d is None and any("not for cjrelay (max_resends" in ln for ln in log), log)
    else:
        check(f"{L}: max_resends null, which this FLARE's client job takes: TASK_EXCHANGE max_resends null",
              d and "max_resends" in d["bootstrap"]["TASK_EXCHANGE"] and d["bootstrap"]["TASK_EXCHANGE"]["max_resends"] is None, log)

    # -- what goes to FLARE's stock launcher ------------------------------------------------------------
    from nvflare.fuel.utils.constants import Mode
    from nvflare.fuel.utils.pipe.file_pipe import FilePipe

    filepipe = export(os.path.join(a.work, "exp2"), "filepipe",
                      task_pipe=FilePipe(mode=Mode.PASSIVE, root_path=os.path.join(a.work, "fp")))
    inproc = export(os.path.join(a.work, "exp3"), "inproc", launch_external_process=False)

    def custom_launcher(config):
        next(c for c in config["components"] if c["id"] == "launcher")["path"] = "site_custom.MyLauncher"
        return config

    def data_filters(config):
        config["task_data_filters"] = [{"tasks": ["train"], "filters": [
            {"path": "nvflare.app_common.filters.exclude_vars.ExcludeVars", "args": {"exclude_vars": "x"}}]}]
        return config

    def result_filters(config):
        config["task_result_filters"] = [{"tasks": ["train"], "filters": [
            {"path": "nvflare.app_common.filters.exclude_vars.ExcludeVars", "args": {"exclude_vars": "x"}}]}]
        return config

    def two_executors(config):
        config["executors"][0]["tasks"] = ["train"]
        config["executors"].append({"tasks": ["validate"], "executor": {
            "path": "nvflare.app_common.np.np_validator.NPValidator", "args": {}}})
        return config

    def cleanup(config):
        next(c for c in config["components"] if c["id"] == "launcher")["args"]["clean_up_script"] = "rm -rf /tmp/x"
        return config

    def extra_component(config):
        config["components"].append({"id": "my_widget", "path": "site_custom.MyWidget", "args": {}})
        return config

    def devtree(config):
        config["executors"][0]["executor"] = {"path": "nvflare.app_common.executors.client_api_executor.ClientAPIExecutor",
                                              "args": {"execution_mode": "external_process", "command": "python3 train.py"}}
        config["components"] = []
        return config

    cases = [
        ("a FilePipe job", filepipe, None, "is a FilePipe"),
        ("an in-process job", inproc, None, "has no ClientAPIExecutor"),
        ("a custom Launcher", app, custom_launcher, "not FLARE's SubprocessLauncher"),
        ("task_data_filters on the client", app, data_filters, "has task_data_filters"),
        ("task_result_filters on the client", app, result_filters, "has task_result_filters"),
        ("several executors", app, two_executors, "has 2 executors"),
        ("a clean_up_script", app, cleanup, "clean_up_script"),
        ("a component cjrelay does not run", app, extra_component, "components cjrelay does not run: my_widget"),
        ("a development-tree ClientAPIExecutor job", app, devtree, "this FLARE has no ClientAPIExecutor"),
    ]
    for n, (name, src, change, why) in enumerate(cases):
        d, stock, log = launch(cp, launcher, f"F{n}", src, change)
        check(f"{L}: {name}: FLARE's stock launcher runs it; the CP's log: ...({why}...",
              stock and d is None and any(f"F{n}: not for cjrelay (" in ln and why in ln for ln in log), log)

    d, stock, log = launch(cp, launcher, "F9", app, parent_conn_sec="tls")
    check(f"{L}: a CP whose internal listener is tls: the stock launcher, the reason logged",
          stock and d is None and any("internal listener is tls" in ln for ln in log), log)
    write_json(cp.ws.get_site_privacy_file_path(), {"scopes": [{"name": "public", "task_result_filters": []}],
                                                     "default_scope": "public"})
    d, stock, log = launch(cp, launcher, "F10", app)
    os.remove(cp.ws.get_site_privacy_file_path())
    check(f"{L}: a site privacy policy (local/privacy.json): the stock launcher, the reason logged",
          stock and d is None and any("F10: not for cjrelay (the site has a privacy policy" in ln for ln in log), log)
    d, stock, log = launch(cp, launcher, "F11", app)
    check(f"{L}: without it, the same job goes to cjrelayd again", d is not None and not stock, log)
    try:
        import nvflare.app_common.widgets.component_path_authorizer  # noqa: F401  (FLARE 2.8.1 and later)
        res = cp.ws.get_resources_file_path()
        with open(res) as f:
            saved = f.read()
        resources = json.loads(saved)
        resources.update({"class_list_enforcement_mode": "enforce", "class_allow_list": [
            "nvflare.app_common.executors", "nvflare.fuel.utils.pipe", "nvflare.app_common.widgets"]})
        write_json(res, resources)
        d, stock, log = launch(cp, launcher, "F12", app, custom=False)
        d2, stock2, log2 = launch(cp, launcher, "F13", app)
        with open(res, "w") as f:
            f.write(saved)
        check(f"{L}: a class allow-list without SubprocessLauncher, a job without custom code: the stock launcher (which refuses the job as "
              f"FLARE does), the reason logged", stock and d is None and any(
                  "F12: not for cjrelay (the site's class allow-list refuses it" in ln and "SubprocessLauncher" in ln
                  for ln in log), log)
        check(f"{L}: the same list, the job with its custom folder (BYOC, exempt in FLARE): cjrelayd",
              d2 is not None and not stock2, log2)
    except ImportError:
        print(f"skip - {L}: the site's class allow-list: this FLARE has none")
    return 1 if _out["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
