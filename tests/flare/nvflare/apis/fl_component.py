# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.apis.fl_component.FLComponent (a logger and handle_event)."""

import logging


class FLComponent:
    def __init__(self):
        self.logger = logging.getLogger(self.__class__.__name__)

    def handle_event(self, event_type: str, fl_ctx):
        pass
