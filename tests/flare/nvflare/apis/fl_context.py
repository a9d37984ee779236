# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.apis.fl_context.FLContext (props only; no engine, no stickiness)."""


class FLContext:
    def __init__(self):
        self.props = {}

    def set_prop(self, key: str, value, private=True, sticky=True):
        self.props[key] = value
        return True

    def get_prop(self, key, default=None):
        return self.props.get(key, default)

    def remove_prop(self, key: str, force_removal=False):
        self.props.pop(key, None)

    def get_identity_name(self, default=""):
        return self.props.get("__client_name__", default)
