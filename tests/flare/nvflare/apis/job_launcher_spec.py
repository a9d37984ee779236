# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.apis.job_launcher_spec (the launcher API, FLARE's names and values)."""

from abc import ABC, abstractmethod

from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_constant import FLContextKey
from nvflare.fuel.common.exit_codes import ProcessExitCode


class JobProcessArgs:
    EXE_MODULE = "exe_module"
    WORKSPACE = "workspace"
    STARTUP_DIR = "startup_dir"
    AUTH_TOKEN = "auth_token"
    TOKEN_SIGNATURE = "auth_signature"
    SSID = "ssid"
    JOB_ID = "job_id"
    CLIENT_NAME = "client_name"
    PARENT_URL = "parent_url"
    PARENT_CONN_SEC = "parent_conn_sec"
    TARGET = "target"
    SCHEME = "scheme"
    STARTUP_CONFIG_FILE = "startup_config_file"
    OPTIONS = "options"


class JobReturnCode(ProcessExitCode):
    SUCCESS = 0
    EXECUTION_ERROR = 1
    ABORTED = 9
    UNKNOWN = 127


def add_launcher(launcher, fl_ctx):
    launchers = fl_ctx.get_prop(FLContextKey.JOB_LAUNCHER, [])
    launchers.append(launcher)
    fl_ctx.set_prop(FLContextKey.JOB_LAUNCHER, launchers, private=True, sticky=False)


class JobHandleSpec(ABC):
    @abstractmethod
    def terminate(self):
        raise NotImplementedError()

    @abstractmethod
    def poll(self):
        raise NotImplementedError()

    @abstractmethod
    def wait(self):
        raise NotImplementedError()


class JobLauncherSpec(FLComponent, ABC):
    @abstractmethod
    def launch_job(self, job_meta: dict, fl_ctx):
        raise NotImplementedError()
