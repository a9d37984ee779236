# SPDX-License-Identifier: Apache-2.0
"""What a job's client app asks for: on FLARE's development tree, its ClientAPIExecutor in
external_process mode (this module); on FLARE's releases, its ClientAPILauncherExecutor
(pipe_job.py). What neither serves is said here too: task filters, several executors.

The app's ``config/config_fed_client.{json,conf,yml}`` is read with FLARE's own config loader,
and its variable references (``{JOB_ID}``, ``{SITE_NAME}``, ``{WORKSPACE}``, ``{JOB_CUSTOM_DIR}``,
the config's own top-level variables, ``{$ENV}``) are resolved with FLARE's own resolver and the
values the CP's job process would use. ``${secret:...}`` references are NOT resolved here: they
stay in the command until ``trainer_argv`` is called, just before the job goes to cjrelayd.
"""

import os
from dataclasses import dataclass, field
from typing import Optional

from nvflare.apis.fl_constant import JobConstants, SystemVarName
from nvflare.fuel.utils.config_factory import ConfigFactory
from nvflare.fuel.utils.json_scanner import JsonScanner
from nvflare.fuel.utils.wfconf import resolve_var_refs

try:  # FLARE's development tree; its releases (2.7.2, 2.8.x) have no ClientAPIExecutor either
    from nvflare.utils.process_utils import prepare_subprocess_command
except ImportError:
    prepare_subprocess_command = None

EXECUTOR_CLASS = "ClientAPIExecutor"
EXTERNAL_PROCESS = "external_process"

# ClientAPIExecutor's defaults for what the trainer's bootstrap carries (its __init__ at the
# FLARE commit named in tests/flare/README.md).
_DEFAULTS = {
    "train_with_evaluation": False,
    "params_exchange_format": "raw",
    "server_expected_format": "numpy",
    "params_transfer_type": "FULL",
    "train_task_name": "train",
    "evaluate_task_name": "validate",
    "submit_model_task_name": "submit_model",
    "launch_once": True,
    "memory_gc_rounds": 0,
    "cuda_empty_cache": False,
    "launch_timeout": 300.0,
}


class NotServable(Exception):
    """The job's client app is not one cjrelay serves; the text says why."""


@dataclass
class TrainerSpec:
    """The external-process trainer one client app asks for (variables resolved, secrets not)."""

    command: object  # a str or a list of str, as in the config
    args: dict = field(default_factory=dict)

    def arg(self, name):
        return self.args.get(name, _DEFAULTS.get(name))

    def task_exchange(self) -> dict:
        """The bootstrap's ``task_exchange`` object, as FLARE's CJ writes it."""
        return {
            "train_with_eval": bool(self.arg("train_with_evaluation")),
            "exchange_format": _enum_value(self.arg("params_exchange_format")),
            "server_expected_format": _enum_value(self.arg("server_expected_format")),
            "transfer_type": _enum_value(self.arg("params_transfer_type")),
            "train_task_name": self.arg("train_task_name"),
            "eval_task_name": self.arg("evaluate_task_name"),
            "submit_model_task_name": self.arg("submit_model_task_name"),
            "launch_once": bool(self.arg("launch_once")),
        }

    def trainer_argv(self) -> list:
        """The trainer's argv, ``${secret:...}`` resolved now, with FLARE's own function.

        Called at the last moment, right before ``job start``: the resolved values then live
        only in the one status-socket line and in the trainer's argv, as in a stock CJ.
        """
        return prepare_subprocess_command(self.command)


def _enum_value(v):
    return getattr(v, "value", v)


def load_client_config(app_config_dir: str, sys_vars: dict) -> dict:
    """The app's client config, its variables resolved (secrets not); NotServable without one."""
    path = os.path.join(app_config_dir, JobConstants.CLIENT_JOB_CONFIG)
    conf = ConfigFactory.load_config(path, [app_config_dir])
    if conf is None:
        raise NotServable(f"no client config {JobConstants.CLIENT_JOB_CONFIG} (or .conf/.yml) in {app_config_dir}")
    data = conf.to_dict()
    variables = dict(data)
    variables.update(sys_vars)
    resolve_var_refs(JsonScanner(data), variables)
    return data


def check_servable(data: dict):
    """NotServable for what FLARE's client job does around the trainer and cjrelayd does not:
    task filters on the client (they run on the decoded task and result), several executors."""
    for key in ("task_data_filters", "task_result_filters"):
        if data.get(key):
            raise NotServable(f"the client app has {key}, which run in FLARE's client job")
    found = executors(data)
    if len(found) > 1:
        names = [e.get("path") or e.get("name") for e in found]
        raise NotServable(f"the client app has {len(found)} executors ({', '.join(map(str, names))}); cjrelay serves one")


def check_allowed(data: dict, job_meta: dict, fl_ctx, workspace):
    """NotServable when the site's class allow-list (``class_allow_list`` in local/resources.json,
    FLARE 2.8.1 and later) refuses one of the client app's classes: FLARE's client job would
    refuse to build it, and cjrelayd builds none, so FLARE's own ComponentPathAuthorizer is asked
    here. A BYOC job (custom code) is exempt, as in FLARE. FLARE without the allow-list: no check."""
    try:
        from nvflare.apis.fl_exception import UnsafeComponentError
        from nvflare.app_common.widgets.component_path_authorizer import ComponentPathAuthorizer
    except ImportError:
        return
    if (job_meta or {}).get("byoc"):
        return
    authorizer = ComponentPathAuthorizer()
    items = executors(data) + [c for c in data.get("components") or [] if isinstance(c, dict)]
    for key in ("task_data_filters", "task_result_filters"):
        for entry in data.get(key) or []:
            items += [f for f in (entry or {}).get("filters") or [] if isinstance(f, dict)]
    for item in items:
        try:
            authorizer.authorize_component_config(item, fl_ctx=fl_ctx, workspace=workspace)
        except UnsafeComponentError as e:
            raise NotServable(f"the site's class allow-list refuses it: {e}") from None


def load_trainer_spec(data: dict) -> TrainerSpec:
    """Find the app's one external-process ClientAPIExecutor; raise NotServable otherwise."""
    found = [e for e in executors(data) if _is_client_api(e)]
    if not found:
        raise NotServable(f"the client app has no {EXECUTOR_CLASS} (FLARE's development tree) and no "
                          f"ClientAPILauncherExecutor (FLARE 2.7, 2.8): its trainer runs in FLARE's client job")
    external = [e for e in found if (e.get("args") or {}).get("execution_mode") == EXTERNAL_PROCESS]
    if len(external) != 1 or len(found) != 1:
        modes = [(e.get("args") or {}).get("execution_mode") for e in found]
        raise NotServable(f"the client app's {EXECUTOR_CLASS}s run in {modes}; cjrelay serves exactly one, external_process")
    if prepare_subprocess_command is None:
        raise NotServable(f"this FLARE has no {EXECUTOR_CLASS} (nvflare.utils.process_utils.prepare_subprocess_command)")
    args = dict(external[0].get("args") or {})
    command = args.get("command")
    if not command or (isinstance(command, str) and not command.strip()):
        raise NotServable(f"the {EXECUTOR_CLASS} has no command")
    return TrainerSpec(command=command, args=args)


def executors(data: dict) -> list:
    """The executor entries of a client config."""
    out = []
    for entry in data.get("executors") or []:
        if isinstance(entry, dict) and isinstance(entry.get("executor"), dict):
            out.append(entry["executor"])
    return out


def _is_client_api(executor: dict) -> bool:
    name = executor.get("path") or executor.get("name") or ""
    return isinstance(name, str) and name.rsplit(".", 1)[-1] == EXECUTOR_CLASS


def system_vars(job_id: str, site: str, workspace, root_url: str, cp_url: Optional[str], secure: bool) -> dict:
    """The variables FLARE's client job config offers (SystemVarName), as the CJ would set them."""
    return {
        SystemVarName.JOB_ID: job_id,
        SystemVarName.SITE_NAME: site,
        SystemVarName.WORKSPACE: workspace.get_root_dir(),
        SystemVarName.ROOT_URL: root_url,
        SystemVarName.CP_URL: cp_url or "",
        SystemVarName.RELAY_URL: "",
        SystemVarName.SECURE_MODE: secure,
        SystemVarName.JOB_CUSTOM_DIR: workspace.get_app_custom_dir(job_id),
        SystemVarName.JOB_CONFIG_DIR: workspace.get_app_config_dir(job_id),
    }
