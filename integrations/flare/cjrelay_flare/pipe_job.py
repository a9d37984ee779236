# SPDX-License-Identifier: Apache-2.0
"""FLARE's releases (2.7.2, 2.8.0, 2.8.1): an external-process Client API job, as FLARE's
FedJob/ScriptRunner export it, read for cjrelayd's pipe dialect.

Such a client app has one ``ClientAPILauncherExecutor`` (or its PyTorch/TensorFlow subclass)
whose ``pipe_id`` names a ``CellPipe`` component and whose ``launcher_id`` names a
``SubprocessLauncher`` (its ``script`` is the trainer's command line), and, for the trainer's
metrics, an ``ExternalConfigurator`` naming a ``MetricRelay`` with a ``CellPipe`` of its own.
The stock client job writes the trainer's ``config/client_api_config.json`` from those
components; ``PipeSpec.bootstrap()`` gives the job's part of it (``TASK_EXCHANGE``,
``METRICS_EXCHANGE``, without their ``pipe``, which cjrelayd writes with its own connection).

Every value the job does not set is the default of the CP's own FLARE classes (their
constructors' signatures), and the keys are FLARE's own ``ConfigKey`` names, so what the trainer
gets is what that FLARE version's client job would have written. A job whose client side holds
anything cjrelay does not reproduce raises NotServable with the reason; the launcher then gives
the job to FLARE's stock launcher.
"""

import ast
import importlib
import inspect
import os
import re
import shlex
import sys
from dataclasses import dataclass, field

from .app_config import NotServable

# The executors of an external-process Client API job in FLARE's releases, by class name, and
# the module each is defined in (FedJob writes the full path; a config may give the short name).
EXECUTOR_MODULES = {
    "ClientAPILauncherExecutor": "nvflare.app_common.executors.client_api_launcher_executor",
    "PTClientAPILauncherExecutor": "nvflare.app_opt.pt.client_api_launcher_executor",
    "TFClientAPILauncherExecutor": "nvflare.app_opt.tf.client_api_launcher_executor",
}
BASE_EXECUTOR = "ClientAPILauncherExecutor"
CELL_PIPE = ("nvflare.fuel.utils.pipe.cell_pipe", "CellPipe")
SUBPROCESS_LAUNCHER = ("nvflare.app_common.launchers.subprocess_launcher", "SubprocessLauncher")
METRIC_RELAY = ("nvflare.app_common.widgets.metric_relay", "MetricRelay")
EXTERNAL_CONFIGURATOR = ("nvflare.app_common.widgets.external_configurator", "ExternalConfigurator")
# components a job may carry whose work cjrelayd leaves undone, by design: the live streaming of
# a job's log (the CP's SiteLogStreamer injects one into every job of a site that allows log
# streaming, 2.8.x; the CP still uploads the file at the job's end)
TOLERATED = (("nvflare.app_common.logging.job_log_streamer", "JobLogStreamer"),)
# top-level keys of config_fed_client that override the executor's args (recipe.add_client_config;
# client/constants.py, client/config.py ConfigKey): EXTERNAL_PRE_INIT_TIMEOUT in every release,
# the others where the executor applies them (2.8.x: _apply_client_config_overrides)
PRE_INIT_OVERRIDE = ("EXTERNAL_PRE_INIT_TIMEOUT", "external_pre_init_timeout")
LATER_OVERRIDES = (("submit_result_timeout", "submit_result_timeout"), ("max_resends", "max_resends"),
                   ("download_complete_timeout", "download_complete_timeout"))
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def class_name(comp: dict) -> str:
    """The class a component or executor entry names (``path``, else FLARE's short ``name``)."""
    name = comp.get("path") or comp.get("name") or ""
    return name.rsplit(".", 1)[-1] if isinstance(name, str) else ""


def _module_of(comp: dict) -> str:
    path = comp.get("path") or ""
    return path.rpartition(".")[0] if isinstance(path, str) else ""


def is_launcher_executor(executor: dict) -> bool:
    return class_name(executor) in EXECUTOR_MODULES


def _is(comp, what) -> bool:
    """Whether a component is FLARE's class ``what`` (module, name): by its path, or by a short name."""
    module, name = what
    return isinstance(comp, dict) and class_name(comp) == name and _module_of(comp) in ("", module)


def _defaults(cls) -> dict:
    """The constructor's keyword defaults of a FLARE class, as that FLARE version has them."""
    return {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
            if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _import(module, name):
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise NotServable(f"this FLARE has no {module}.{name} ({e})") from None


def executor_defaults(name: str):
    """(the args FLARE's ``name`` executor takes, the values it runs with when a job gives none).

    Those values are its constructor's defaults (``inspect.empty``: required), and for what a
    subclass does not take, the base ClientAPILauncherExecutor's (the subclass passes nothing, so
    the base default applies). ClientAPILauncherExecutor is imported (light: FLARE's app_common).
    Its PyTorch/TensorFlow subclasses are read from their source (ast), not imported: their
    modules import torch or tensorflow, which a CP need not load; a default the source gives as an
    expression of the base module's names (``ExchangeFormat.PYTORCH``) is evaluated there."""
    base_module = EXECUTOR_MODULES[BASE_EXECUTOR]
    base = _defaults(_import(base_module, BASE_EXECUTOR))
    if name == BASE_EXECUTOR:
        return set(base), base
    module = EXECUTOR_MODULES[name]
    loaded = sys.modules.get(module)
    if loaded is not None and hasattr(loaded, name):
        own = _defaults(getattr(loaded, name))
    else:
        own = _source_defaults(module, name, base, vars(sys.modules[base_module]))
    merged = dict(base)
    merged.update(own)
    return set(own), merged


def _source_defaults(module: str, name: str, base: dict, namespace: dict) -> dict:
    import nvflare

    path = os.path.join(os.path.dirname(nvflare.__file__), *module.split(".")[1:]) + ".py"
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError) as e:
        raise NotServable(f"this FLARE has no {module}.{name} ({e})") from None
    init = next((n for c in tree.body if isinstance(c, ast.ClassDef) and c.name == name
                 for n in c.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        raise NotServable(f"{path}: no {name}.__init__")
    args = [a.arg for a in init.args.args][1:]
    values = [inspect.Parameter.empty] * (len(args) - len(init.args.defaults)) + list(init.args.defaults)
    out = {}
    for arg, node in zip(args, values):
        if node is inspect.Parameter.empty:
            out[arg] = node
            continue
        try:
            out[arg] = eval(compile(ast.Expression(node), path, "eval"), dict(namespace))  # noqa: S307 (FLARE's own source)
        except Exception:
            out[arg] = base.get(arg, inspect.Parameter.empty)
    return out


def _value(v):
    """An enum default (FLARE's ExchangeFormat, TransferType) as the text FLARE writes."""
    return getattr(v, "value", v)


@dataclass
class PipeSpec:
    """The trainer of one release job: its command and what its client_api_config.json gets."""

    script: str
    launch_once: bool
    executor: dict = field(default_factory=dict)   # the executor's args, defaults filled in
    metrics: dict = None                           # the exported MetricRelay's args, or None

    def trainer_argv(self) -> list:
        """The command as SubprocessLauncher runs it: ``shlex.split(script)``."""
        return shlex.split(self.script)

    def pre_init_timeout(self):
        return self.executor.get("external_pre_init_timeout")

    def bootstrap(self) -> dict:
        """``TASK_EXCHANGE`` (and ``METRICS_EXCHANGE``) as the stock client job writes them,
        FLARE's ConfigKey names (client/config.py), without ``pipe``."""
        from nvflare.client.config import ConfigKey
        from nvflare.fuel.utils.constants import PipeChannelName

        e = self.executor
        task = {
            ConfigKey.TRAIN_WITH_EVAL: bool(e["train_with_evaluation"]),
            ConfigKey.EXCHANGE_FORMAT: _value(e["params_exchange_format"]),
            ConfigKey.SERVER_EXPECTED_FORMAT: _value(e["server_expected_format"]),
            ConfigKey.TRANSFER_TYPE: _value(e["params_transfer_type"]),
            ConfigKey.TRAIN_TASK_NAME: e["train_task_name"],
            ConfigKey.EVAL_TASK_NAME: e["evaluate_task_name"],
            ConfigKey.SUBMIT_MODEL_TASK_NAME: e["submit_model_task_name"],
            ConfigKey.PIPE_CHANNEL_NAME: PipeChannelName.TASK,
            ConfigKey.HEARTBEAT_TIMEOUT: e["heartbeat_timeout"],
            ConfigKey.MEMORY_GC_ROUNDS: e["memory_gc_rounds"],
            ConfigKey.CUDA_EMPTY_CACHE: e["cuda_empty_cache"],
            ConfigKey.SUBMIT_RESULT_TIMEOUT: e["submit_result_timeout"],
            ConfigKey.MAX_RESENDS: e["max_resends"],
            ConfigKey.DOWNLOAD_COMPLETE_TIMEOUT: e["download_complete_timeout"],
            ConfigKey.LAUNCH_ONCE: bool(self.launch_once),
        }
        out = {ConfigKey.TASK_EXCHANGE: task}
        if self.metrics is not None:   # MetricRelay.export, without the pipe
            out[ConfigKey.METRICS_EXCHANGE] = {ConfigKey.PIPE_CHANNEL_NAME: self.metrics["pipe_channel_name"],
                                               ConfigKey.HEARTBEAT_TIMEOUT: self.metrics["heartbeat_timeout"]}
        return out


def _component(components: dict, cid, role: str) -> dict:
    comp = components.get(cid) if isinstance(cid, str) else None
    if comp is None:
        raise NotServable(f"the {role} {cid!r} is not a component of the client app")
    return comp


def _cell_pipe(components: dict, cid, role: str):
    comp = _component(components, cid, role)
    if not _is(comp, CELL_PIPE):
        raise NotServable(f"the {role} {cid!r} is a {class_name(comp) or comp.get('path')}; cjrelay serves CellPipe jobs "
                          f"(a FilePipe's files are read by FLARE's client job)")
    mode = str((comp.get("args") or {}).get("mode", "PASSIVE")).upper()
    if mode != "PASSIVE":
        raise NotServable(f"the {role} {cid!r} is an {mode} CellPipe; the client job's end is the passive one")


def load_pipe_spec(data: dict, executor: dict) -> PipeSpec:
    """The PipeSpec of a client config (variables resolved) whose one executor is ``executor``."""
    name = class_name(executor)
    if _module_of(executor) not in ("", EXECUTOR_MODULES[name]):
        raise NotServable(f"the executor {executor.get('path')} is not FLARE's own {name}")
    takes, defaults = executor_defaults(name)
    given = dict(executor.get("args") or {})
    unknown = sorted(set(given) - takes)
    if unknown:
        raise NotServable(f"{name} of this FLARE takes no {', '.join(unknown)}")
    args = {k: v for k, v in defaults.items() if v is not inspect.Parameter.empty}
    args.update(given)
    for key, arg in (PRE_INIT_OVERRIDE,) + (LATER_OVERRIDES if _applies_all_overrides() else ()):
        if key in data:
            args[arg] = data[key]
    missing = [k for k, v in defaults.items() if v is inspect.Parameter.empty and k not in given]
    if missing:
        raise NotServable(f"the {name} lacks {', '.join(missing)}")
    if _refuses_unbounded() and (args.get("max_resends") is None or args.get("download_complete_timeout") is None):
        raise NotServable("max_resends or download_complete_timeout is None, which this FLARE's client job refuses")

    components = {c.get("id"): c for c in data.get("components") or [] if isinstance(c, dict)}
    _cell_pipe(components, args.get("pipe_id"), "task pipe")
    if not args.get("launcher_id"):
        raise NotServable(f"the {name} has no launcher_id: its trainer is not started by the client job")
    launcher = _component(components, args["launcher_id"], "launcher")
    if not _is(launcher, SUBPROCESS_LAUNCHER):
        raise NotServable(f"the launcher {args['launcher_id']!r} is a {class_name(launcher) or launcher.get('path')}, "
                          f"not FLARE's SubprocessLauncher")
    largs = dict(_defaults(_import(*SUBPROCESS_LAUNCHER)))
    largs.update(launcher.get("args") or {})
    script = largs.get("script")
    if not isinstance(script, str) or not script.strip():
        raise NotServable(f"the launcher {args['launcher_id']!r} has no script")
    if largs.get("clean_up_script"):
        raise NotServable(f"the launcher {args['launcher_id']!r} has a clean_up_script, which cjrelayd does not run")

    used = {args["pipe_id"], args["launcher_id"]}
    metrics = None
    for cid, comp in components.items():
        if not _is(comp, EXTERNAL_CONFIGURATOR):
            continue
        used.add(cid)
        for rid in (comp.get("args") or {}).get("component_ids") or []:
            relay = _component(components, rid, "ExternalConfigurator's component")
            if not _is(relay, METRIC_RELAY):
                raise NotServable(f"the ExternalConfigurator exports {rid!r}, a {class_name(relay)}; cjrelay writes "
                                  f"only a MetricRelay's METRICS_EXCHANGE")
            if metrics is not None:
                raise NotServable("the ExternalConfigurators export more than one MetricRelay")
            rargs = {k: v for k, v in _defaults(_import(*METRIC_RELAY)).items() if v is not inspect.Parameter.empty}
            rargs.update(relay.get("args") or {})
            _cell_pipe(components, rargs.get("pipe_id"), "metric pipe")
            used.update((rid, rargs["pipe_id"]))
            metrics = rargs
    for cid, comp in components.items():
        if _is(comp, METRIC_RELAY) and cid not in used:
            # a relay no configurator exports: the trainer gets no METRICS_EXCHANGE, as stock
            used.update((cid, (comp.get("args") or {}).get("pipe_id")))
    used.update(cid for cid, comp in components.items() if any(_is(comp, t) for t in TOLERATED))
    others = sorted(str(c) for c in set(components) - used)
    if others:
        raise NotServable(f"the client app has components cjrelay does not run: {', '.join(others)}")
    return PipeSpec(script=script, launch_once=bool(largs.get("launch_once")), executor=args, metrics=metrics)


def _executor_class():
    return _import(EXECUTOR_MODULES[BASE_EXECUTOR], BASE_EXECUTOR)


def _applies_all_overrides() -> bool:
    """2.8.x: the executor takes submit_result_timeout, max_resends and download_complete_timeout
    from config_fed_client's top level too (2.7.2: EXTERNAL_PRE_INIT_TIMEOUT only)."""
    return hasattr(_executor_class(), "_apply_client_config_overrides")


def _refuses_unbounded() -> bool:
    """2.8.x: the client job refuses max_resends None at the job's start (2.7.2 takes it)."""
    return hasattr(_executor_class(), "_validate_required_timeout_values")


def flare_version() -> str:
    """The CP's FLARE version for the job description's ``flare_version``: ``nvflare.__version__``
    as FLARE reports it (``2.8.1``); when that is no version (a source tree without git metadata
    reports ``0+unknown``), the release line this FLARE's features show: ``2.9`` (the job process's
    credentials in the environment, JobProcessEnv), ``2.7`` (JobProcessArgs.HA_MODE), else ``2.8``."""
    import nvflare

    version = str(getattr(nvflare, "__version__", "") or "")
    m = _VERSION.match(version)
    if m and int(m.group(1)) > 0:
        return version
    from nvflare.apis import job_launcher_spec as spec

    if hasattr(spec, "JobProcessEnv"):
        return "2.9"
    if hasattr(spec.JobProcessArgs, "HA_MODE"):
        return "2.7"
    return "2.8"
