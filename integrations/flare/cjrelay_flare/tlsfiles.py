# SPDX-License-Identifier: Apache-2.0
"""The startup kit's TLS files handed to cjrelayd as open files.

The client parent (CP) can read the kit (``startup/rootCA.pem``, ``client.crt``, ``client.key``;
provisioning makes the key 0600, owned by the FLARE account); cjrelayd's own account need not.
``open_for`` opens, with the CP's rights, each file the job description names by path, takes the
path out of the description and names the open file in ``tls_fds`` instead (its index among the
files passed); ``StatusClient.command(..., fds=...)`` passes them with the ``job start`` line
(SCM_RIGHTS over the status socket), and ``close_all`` closes them once it is sent. cjrelayd
reads each at once and loads it from memory; ``cjrelayctl show config job <id>`` shows it as
``fd:<path>``. A file the CP cannot open (or that is not a regular file) keeps its path: cjrelayd
then tries it itself and says why it cannot.
"""

import os
import stat

TLS_KEYS = ("ca_file", "cert_file", "key_file")


def open_for(desc: dict, logger=None) -> list:
    """Open desc's TLS files; returns the descriptors (index i is tls_fds' i) and changes desc."""
    fds, named = [], {}
    try:
        for key in TLS_KEYS:
            path = desc.get(key)
            if not path:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
            except OSError as e:
                if logger:
                    logger.warning(f"{key} {path}: the client parent cannot open it ({e}); cjrelayd gets its path")
                continue
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                continue
            named[key] = len(fds)
            fds.append(fd)
    except BaseException:
        close_all(fds)
        raise
    for key in named:
        del desc[key]
    if named:
        desc["tls_fds"] = named
    return fds


def close_all(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
