# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.utils.process_utils.prepare_subprocess_command.

Splits a command string (shlex, POSIX) or takes an argv list, then replaces each
"${secret:NAME}" with the environment's NAME ("${secret:file:PATH}": the file's text).
"""

import os
import re
import shlex

_SECRET = re.compile(r"\$\{secret:(?:file:(?P<file>[^{}\s]+)|(?P<env>[A-Za-z_][A-Za-z0-9_]*))\}")


def _resolve(token: str) -> str:
    def one(m):
        if m.group("env"):
            if m.group("env") not in os.environ:
                raise ValueError(f"environment variable '{m.group('env')}' is not set on this site")
            return os.environ[m.group("env")]
        with open(m.group("file")) as f:
            return f.read().rstrip("\n")

    return _SECRET.sub(one, token)


def prepare_subprocess_command(command):
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("command argv must be a non-empty sequence of strings")
    return [_resolve(a) for a in argv]
