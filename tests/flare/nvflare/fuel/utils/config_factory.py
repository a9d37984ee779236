# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.utils.config_factory.ConfigFactory (JSON configs only)."""

import json
import os


class _JsonConfig:
    def __init__(self, data: dict):
        self.data = data

    def to_dict(self, resolve=True) -> dict:
        return self.data


class ConfigFactory:
    @staticmethod
    def load_config(file_path: str, search_dirs=None, target_fmt=None):
        name = os.path.basename(file_path)
        for d in search_dirs or [os.path.dirname(file_path)]:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                with open(path) as f:
                    return _JsonConfig(json.load(f))
        return None
