# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.utils.wfconf.resolve_var_refs.

As FLARE's: a string that is exactly "{NAME}" becomes the variable's value (any type); any
other string has its "{NAME}" parts formatted in, and is kept as written when that fails;
"{$VAR}" is the environment's VAR; "${secret:...}" references are left for later. Repeats
until nothing changes (at most 20 rounds). No "{@def:...}" parameterized definitions.
"""

import os
import re

_SECRET = re.compile(r"\$\{secret:[^{}]*\}")
_WHOLE = re.compile(r"^\{([^{}]+)\}$")


def _subst(text: str, variables: dict):
    m = _WHOLE.match(text.strip())
    if m and not _SECRET.fullmatch(text.strip()):
        return variables.get(m.group(1))
    shielded = _SECRET.sub(lambda s: s.group(0).replace("{", "{{").replace("}", "}}"), text)
    try:
        return shielded.format(**variables)
    except (KeyError, IndexError, ValueError, AttributeError):
        return text


def _walk(node, variables: dict) -> int:
    changed = 0
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in list(items):
        if isinstance(value, str):
            new = _subst(value, variables)
            if new != value:
                node[key] = new
                changed += 1
        else:
            changed += _walk(value, variables)
    return changed


def resolve_var_refs(scanner, var_values: dict):
    variables = {"$" + k: v for k, v in os.environ.items()}
    variables.update(var_values)
    for _ in range(20):
        if not _walk(scanner.data, variables):
            return
    raise ValueError("variable references not resolved in 20 rounds")
