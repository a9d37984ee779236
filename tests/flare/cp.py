# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the few steps of FLARE's client parent (CP) that involve the job launcher.

What FLARE's ClientExecutor.start_app and fed_utils do around a launcher, done here for the
tests: lay out a client workspace and a deployed job, build the components of the site's
``local/resources.json``, fire BEFORE_JOB_LAUNCH and take the one launcher that registered,
set JOB_PROCESS_ARGS and the sticky props, and read the return code as get_return_code does
(``_process_rc.txt`` wins unless the handle says 104).
"""

import importlib
import json
import os

from nvflare.apis.event_type import EventType
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.job_launcher_spec import JobProcessArgs
from nvflare.apis.workspace import Workspace

SITE = "site-1"


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def make_workspace(root, scheme, target, launcher_args, conn_sec="clear"):
    """startup/fed_client.json as FLARE provisions it, local/resources.json naming the launcher."""
    write_json(os.path.join(root, "startup", "fed_client.json"), {
        "format_version": 2,
        "servers": [{"name": "cjtest_project", "service": {"target": target, "scheme": scheme}, "identity": "server"}],
        "client": {"ssl_private_key": "client.key", "ssl_cert": "client.crt", "ssl_root_cert": "rootCA.pem",
                   "fqsn": SITE, "is_leaf": True, "connection_security": conn_sec},
    })
    write_json(os.path.join(root, "local", "resources.json"), {
        "format_version": 2,
        "components": [{"id": "job_launcher", "path": "cjrelay_flare.CJRelayJobLauncher", "args": launcher_args}],
    })


def deploy_job(root, job_id, executor, meta_extra=None, extra_vars=None):
    """<root>/<job_id>/meta.json and app_<site>/config/config_fed_client.json with ``executor``."""
    ws = Workspace(root, SITE)
    config = {"format_version": 2, "executors": [{"tasks": ["train"], "executor": executor}],
              "components": []}
    config.update(extra_vars or {})
    write_json(os.path.join(ws.get_app_config_dir(job_id), "config_fed_client.json"), config)
    os.makedirs(ws.get_app_custom_dir(job_id), exist_ok=True)
    meta = {"job_id": job_id, "name": "cjtest", "deploy_map": {"app_" + SITE: [SITE]}}
    meta.update(meta_extra or {})
    write_json(os.path.join(ws.get_run_dir(job_id), "meta.json"), meta)
    return meta


def _build(component):
    module, _, cls = component["path"].rpartition(".")
    return getattr(importlib.import_module(module), cls)(**component.get("args", {}))


def select_launcher(root, job_meta):
    """Build local/resources.json's components, fire BEFORE_JOB_LAUNCH, return the one that registered."""
    with open(os.path.join(root, "local", "resources.json")) as f:
        components = [_build(c) for c in json.load(f)["components"]]
    ctx = FLContext()
    ctx.set_prop(FLContextKey.JOB_META, job_meta)
    for c in components:
        c.handle_event(EventType.BEFORE_JOB_LAUNCH, ctx)
    launchers = ctx.get_prop(FLContextKey.JOB_LAUNCHER) or []
    if len(launchers) != 1:
        raise RuntimeError(f"Exactly one job launcher must be configured for this site, but found {len(launchers)}")
    return launchers[0]


def launch_context(root, job_id, parent_url, credentials):
    """The fl_ctx the CP hands launch_job: sticky props and JOB_PROCESS_ARGS."""
    with open(os.path.join(root, "startup", "fed_client.json")) as f:
        fed = json.load(f)
    ws = Workspace(root, SITE)
    service = fed["servers"][0]["service"]
    token, sig, ssid = credentials
    ctx = FLContext()
    ctx.set_prop(FLContextKey.WORKSPACE_OBJECT, ws)
    ctx.set_prop(FLContextKey.SERVER_CONFIG, fed["servers"])
    ctx.set_prop(FLContextKey.CLIENT_CONFIG, fed["client"])
    ctx.set_prop(FLContextKey.SECURE_MODE, False)
    ctx.set_prop(FLContextKey.CLIENT_NAME, SITE)
    ctx.set_prop(FLContextKey.JOB_PROCESS_ARGS, {
        JobProcessArgs.EXE_MODULE: ("-m", "nvflare.private.fed.app.client.worker_process"),
        JobProcessArgs.JOB_ID: ("-n", job_id),
        JobProcessArgs.CLIENT_NAME: ("-c", SITE),
        JobProcessArgs.AUTH_TOKEN: ("-t", token),
        JobProcessArgs.TOKEN_SIGNATURE: ("-ts", sig),
        JobProcessArgs.SSID: ("-d", ssid),
        JobProcessArgs.WORKSPACE: ("-m", root),
        JobProcessArgs.STARTUP_DIR: ("-w", ws.get_startup_kit_dir()),
        JobProcessArgs.PARENT_URL: ("-p", parent_url),
        JobProcessArgs.SCHEME: ("-scheme", service.get("scheme", "grpc")),
        JobProcessArgs.TARGET: ("-g", service.get("target")),
        JobProcessArgs.STARTUP_CONFIG_FILE: ("-s", "fed_client.json"),
        JobProcessArgs.OPTIONS: ("--set", " print_conf=True"),
    })
    return ctx


def return_code(handle, root, job_id):
    """As FLARE's get_return_code: the handle's code, overridden by _process_rc.txt unless 104."""
    code = handle.poll()
    rc_file = os.path.join(root, job_id, "_process_rc.txt")
    rc = code
    if os.path.exists(rc_file):
        with open(rc_file) as f:
            rc = int(f.readline())
        os.remove(rc_file)
    return code if code == 104 else rc
