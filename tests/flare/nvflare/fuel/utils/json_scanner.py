# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.utils.json_scanner.JsonScanner (holds the data; wfconf walks it)."""


class JsonScanner:
    def __init__(self, json_data: dict, location=None):
        self.data = json_data
