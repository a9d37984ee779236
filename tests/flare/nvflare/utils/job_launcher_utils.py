# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.utils.job_launcher_utils.add_custom_dir_to_path."""

import os
import sys


def add_custom_dir_to_path(app_custom_folder, new_env):
    new_env["PYTHONPATH"] = os.pathsep.join(list(sys.path) + [app_custom_folder])
