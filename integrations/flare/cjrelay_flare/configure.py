# SPDX-License-Identifier: Apache-2.0
"""Names CJRelayJobLauncher as the site's job launcher in a FLARE client's ``local/resources.json``.

    python3 -m cjrelay_flare.configure [--socket PATH] [--undo] [ARG=VALUE ...] <client workspace>

Run with the Python the FLARE client runs with, as the account that owns the workspace. It reads
``<client workspace>/local/resources.json``, or, when the site has none yet, the provisioned
``resources.json.default`` (FLARE reads the first of the two it finds, never both), and writes
``local/resources.json`` with the one job launcher, FLARE's ``ClientProcessJobLauncher``, replaced
by ``cjrelay_flare.CJRelayJobLauncher``; every other key and component stays as provisioned.
``ARG=VALUE`` sets one more launcher argument (VALUE is JSON when it parses as JSON, else a
string: ``uds_driver=false``, ``job_property=use_cjrelay``). ``--undo`` puts the stock launcher
back. A workspace that is already as asked is left as it is; one whose launcher is not the stock
one, or that has more or fewer than one, is refused. It prints what it did; the FLARE client
reads the file at its start, so restart it after.
"""

import argparse
import inspect
import json
import os
import sys
import tempfile

from .launcher import CJRelayJobLauncher

STOCK_PATH = "nvflare.app_common.job_launcher.client_process_launcher.ClientProcessJobLauncher"
STOCK_ENTRY = {"id": "process_launcher", "path": STOCK_PATH, "args": {}}
CJRELAY_PATH = "cjrelay_flare.CJRelayJobLauncher"
DEFAULT_SOCKET = "/run/cjrelay/status.sock"


class Refused(Exception):
    """The workspace is not one this command changes; the message says why."""


def entry(socket_path, extra=None):
    """The job_launcher component of integrations/flare/README.md ("After")."""
    args = {"socket_path": socket_path, "on_daemon_error": "fallback"}
    args.update(extra or {})
    return {"id": "job_launcher", "path": CJRELAY_PATH, "args": args}


def launcher_args(pairs):
    """ARG=VALUE pairs as the launcher's keyword arguments, each checked against its signature."""
    known = [p for p in inspect.signature(CJRelayJobLauncher.__init__).parameters if p != "self"]
    out = {}
    for kv in pairs:
        name, eq, text = kv.partition("=")
        if not eq or name not in known:
            raise Refused(f"{kv!r}: not ARG=VALUE with ARG one of the launcher's arguments ({', '.join(known)})")
        try:
            out[name] = json.loads(text)
        except ValueError:
            out[name] = text
    return out


def is_launcher(comp):
    """A job launcher by its class's name: FLARE's are all *JobLauncher (process, docker, k8s,
    slurm), as is CJRelayJobLauncher."""
    return isinstance(comp, dict) and str(comp.get("path", "")).rsplit(".", 1)[-1].endswith("JobLauncher")


def load(workspace):
    """(the file read, its parsed content)."""
    local = os.path.join(workspace, "local")
    for name in ("resources.json", "resources.json.default"):
        path = os.path.join(local, name)
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    conf = json.load(f)
            except (OSError, ValueError) as e:
                raise Refused(f"{path}: {e}")
            if not isinstance(conf, dict) or not isinstance(conf.get("components"), list):
                raise Refused(f"{path}: no \"components\" list: not a FLARE resources file")
            return path, conf
    raise Refused(f"{local}: neither resources.json nor resources.json.default: not a FLARE client workspace")


def write(src, dest, conf):
    """dest, atomically, with src's mode (and owner, when run as root)."""
    st = os.stat(src)
    fd, tmp = tempfile.mkstemp(prefix=".resources.json.", dir=os.path.dirname(dest))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(conf, f, indent=2)
            f.write("\n")
        os.chmod(tmp, st.st_mode & 0o7777)
        if os.geteuid() == 0:
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise


def configure(workspace, socket_path=DEFAULT_SOCKET, extra=None, undo=False, out=print):
    """Changes the workspace's resources.json as asked; returns True if it wrote it."""
    src, conf = load(workspace)
    dest = os.path.join(workspace, "local", "resources.json")
    comps = conf["components"]
    found = [i for i, c in enumerate(comps) if is_launcher(c)]
    if len(found) != 1:
        named = ", ".join(f"{comps[i].get('id')} ({comps[i].get('path')})" for i in found) or "none"
        raise Refused(f"{src}: {len(found)} job launchers ({named}); FLARE needs exactly one, and this command "
                      f"replaces a single {STOCK_PATH.rsplit('.', 1)[-1]}: edit the file by hand "
                      "(integrations/flare/README.md, \"The local/resources.json change\")")
    i = found[0]
    cur = comps[i]
    if undo:
        if cur.get("path") == STOCK_PATH:
            out(f"{src}: the launcher is already FLARE's stock one ({cur.get('id')}): nothing changed")
            return False
        if cur.get("path") != CJRELAY_PATH:
            raise Refused(f"{src}: the launcher is {cur.get('path')}, not {CJRELAY_PATH}: nothing to undo")
        new = dict(STOCK_ENTRY)
        dflt = os.path.join(workspace, "local", "resources.json.default")
        try:   # the provisioned entry, when the kit has one
            with open(dflt, encoding="utf-8") as f:
                new = next(c for c in json.load(f)["components"] if isinstance(c, dict) and c.get("path") == STOCK_PATH)
        except (OSError, ValueError, KeyError, TypeError, StopIteration):
            pass
    else:
        new = entry(socket_path, extra)
        if cur.get("path") == CJRELAY_PATH:
            if cur.get("args", {}) == new["args"]:
                out(f"{src}: already configured: {json.dumps(cur)}; nothing changed")
                return False
            raise Refused(f"{src}: already configured, with other arguments: {json.dumps(cur)}; nothing changed "
                          f"(asked: {json.dumps(new['args'])}; run with --undo first to replace it)")
        if cur.get("path") != STOCK_PATH:
            raise Refused(f"{src}: the site's launcher is {cur.get('id')} ({cur.get('path')}), not FLARE's "
                          f"{STOCK_PATH}: CJRelayJobLauncher hands the jobs it does not serve to the stock one, "
                          "so it would change how those run; nothing changed")
    comps[i] = new
    if src != dest:
        out(f"{dest}: made from {os.path.basename(src)} (FLARE reads resources.json first)")
    write(src, dest, conf)
    out(f"{dest}: {cur.get('id')} ({cur.get('path')}) replaced by {json.dumps(new)}; "
        f"the other {len(comps) - 1} components and every other key as they were")
    out("restart the FLARE client: it reads the file at its start")
    return True


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m cjrelay_flare.configure",
                                description="Name cjrelay_flare.CJRelayJobLauncher as a FLARE client's job launcher "
                                            "in <client workspace>/local/resources.json (--undo: FLARE's stock one).")
    p.add_argument("--socket", default=DEFAULT_SOCKET, help=f"cjrelayd's [status] socket (default {DEFAULT_SOCKET})")
    p.add_argument("--undo", action="store_true", help="put FLARE's ClientProcessJobLauncher back")
    p.add_argument("args", nargs="*", metavar="ARG=VALUE", help="one more launcher argument (VALUE: JSON, else a string)")
    p.add_argument("workspace", help="the FLARE client's workspace (the folder holding startup/ and local/)")
    a = p.parse_args(argv)
    try:
        extra = launcher_args(a.args)
        if a.undo and (extra or a.socket != DEFAULT_SOCKET):
            raise Refused("--undo takes no --socket or ARG=VALUE")
        configure(a.workspace, a.socket, extra, a.undo)
    except (Refused, OSError) as e:
        print(f"cjrelay_flare.configure: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
