# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.apis.workspace.Workspace (the client layout: <root>/<job_id>/app_<site>)."""

import os


class Workspace:
    def __init__(self, root_dir: str, site_name: str = "", config_folder: str = "config"):
        self.root_dir = root_dir
        self.site_name = site_name
        self.config_folder = config_folder

    def get_root_dir(self) -> str:
        return self.root_dir

    def get_startup_kit_dir(self) -> str:
        return os.path.join(self.root_dir, "startup")

    def get_run_dir(self, job_id: str) -> str:
        return os.path.join(self.root_dir, job_id)

    def get_app_dir(self, job_id: str) -> str:
        return os.path.join(self.get_run_dir(job_id), "app_" + self.site_name)

    def get_app_config_dir(self, job_id: str) -> str:
        return os.path.join(self.get_app_dir(job_id), self.config_folder)

    def get_app_custom_dir(self, job_id: str) -> str:
        return os.path.join(self.get_app_dir(job_id), "custom")
