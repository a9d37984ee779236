# SPDX-License-Identifier: Apache-2.0
"""The client side of cjrelayd's status socket.

One AF_UNIX stream connection per call; one command per line. An answer is lines ending with
one empty line; an error is the single line ``ERR <code> <text>``. The peer's credentials
(``SO_PEERCRED``) decide what the daemon allows, so the CP must run as root, as the
daemon's user or as a member of its ``[status] admin_group`` to start and stop jobs.

The ``job start`` line carries the job's credentials: this module never logs a command line,
and error texts it raises name the command's verb only. It may also carry open files (the
startup kit's TLS files, ``tlsfiles.py``): sent with the line's bytes in one ``sendmsg``
(SCM_RIGHTS), at most ``MAX_FDS``.
"""

import array
import json
import socket

# cjrelayd refuses a line of 65 KiB or more (doc/interface.md, "Status socket").
MAX_LINE = 65535
# ... and takes at most 3 open files with one line (CJ_STATUS_MAX_FDS).
MAX_FDS = 3


class DaemonUnavailable(Exception):
    """cjrelayd could not be reached (no socket, connection refused, timed out, closed early)."""


class DaemonRefused(Exception):
    """cjrelayd answered ``ERR <code> <text>``."""

    def __init__(self, code: int, text: str):
        super().__init__(f"ERR {code} {text}")
        self.code = code
        self.text = text


class StatusClient:
    """Sends one command per connection to the status socket at ``path``."""

    def __init__(self, path: str, timeout: float = 10.0):
        self.path = path
        self.timeout = timeout

    def command(self, line: str, timeout=None, fds=()) -> list:
        """Send ``line``; return the answer's lines (without the closing empty line).

        ``timeout`` None uses the client's; a ``job wait`` passes 0 to wait without bound.
        ``fds``: open files passed with the line (the caller keeps and closes them).
        Raises DaemonUnavailable or DaemonRefused.
        """
        verb = " ".join(line.split(" ", 2)[:2])
        data = (line + "\n").encode("utf-8")
        if len(data) > MAX_LINE:
            raise DaemonRefused(413, f"{verb}: the line is {len(data)} bytes, more than cjrelayd takes")
        if len(fds) > MAX_FDS:
            raise DaemonRefused(400, f"{verb}: {len(fds)} open files, more than cjrelayd takes ({MAX_FDS})")
        limit = self.timeout if timeout is None else timeout
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(limit if limit else None)
                s.connect(self.path)
                sent = 0
                if fds:  # the files go with the line's first bytes
                    sent = s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                s.sendall(data[sent:])
                lines = self._read_answer(s)
        except (OSError, socket.timeout) as e:
            raise DaemonUnavailable(f"status socket {self.path}: {verb}: {e}") from None
        if lines and lines[0].startswith("ERR "):
            parts = lines[0].split(" ", 2)
            code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            raise DaemonRefused(code, parts[2] if len(parts) > 2 else "")
        return lines

    @staticmethod
    def _read_answer(s) -> list:
        """Read lines up to the empty line that ends an answer."""
        buf = b""
        while True:
            end = buf.find(b"\n\n")
            if end >= 0 or buf == b"\n":
                text = buf[: max(end, 0)].decode("utf-8", "replace")
                return text.split("\n") if text else []
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("the daemon closed the connection before the end of its answer")
            buf += chunk

    def show_json(self, what: str):
        """``show <what> json``: the answer's one JSON line, decoded."""
        lines = self.command(f"show {what} json")
        try:
            return json.loads(lines[0]) if lines else {}
        except ValueError as e:
            raise DaemonUnavailable(f"show {what} json: not JSON: {e}") from None

    @staticmethod
    def fields(lines: list) -> dict:
        """``key: value`` lines as a dict."""
        out = {}
        for ln in lines:
            k, sep, v = ln.partition(": ")
            if sep:
                out[k] = v
        return out
