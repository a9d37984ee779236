# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.apis.fl_constant (the names the launcher and the tests use, FLARE's values)."""


class FLContextKey:
    CLIENT_NAME = "__client_name__"
    WORKSPACE_OBJECT = "__workspace_object__"
    SECURE_MODE = "__secure_mode__"
    JOB_META = "__job_meta__"
    JOB_PROCESS_ARGS = "__job_process_args__"
    SITE_OBJ = "_site_obj_"
    JOB_LAUNCHER = "_job_launcher"
    CLIENT_CONFIG = "__client_config__"
    SERVER_CONFIG = "__server_config__"


class JobConstants:
    CLIENT_JOB_CONFIG = "config_fed_client.json"
    META_FILE = "meta.json"
    JOB_ID = "job_id"


class SystemVarName:
    SITE_NAME = "SITE_NAME"
    WORKSPACE = "WORKSPACE"
    JOB_ID = "JOB_ID"
    ROOT_URL = "ROOT_URL"
    CP_URL = "CP_URL"
    RELAY_URL = "RELAY_URL"
    SECURE_MODE = "SECURE_MODE"
    JOB_CUSTOM_DIR = "JOB_CUSTOM_DIR"
    JOB_CONFIG_DIR = "JOB_CONFIG_DIR"
    PYTHONPATH = "PYTHONPATH"
