# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.apis.job_def.get_custom_prop (a job meta's user-settable custom_props)."""


def get_custom_prop(meta: dict, prop_key: str, default=None):
    props = meta.get("custom_props")
    return props.get(prop_key, default) if props else default
