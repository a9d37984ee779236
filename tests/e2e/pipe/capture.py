# SPDX-License-Identifier: Apache-2.0
# Records the SFM frames between a stock release trainer and cjrelayd (tests/vectors/pipe/):
# run as the trainer's command in place of train.py.  It points the trainer's pipe at a
# loopback proxy of its own (config/client_api_config.json's cp_conn_props.url and each
# exchange's root_url), forwards every byte to cjrelayd's listener unchanged, writes each
# frame to $CJ_CAPTURE_DIR/<n>_<dir>_<type>[_<channel>_<topic>].bin, then runs train.py.
import json
import os
import runpy
import socket
import struct
import sys
import threading

import msgpack

OUT = os.environ["CJ_CAPTURE_DIR"]
CFG = "config/client_api_config.json"
TYPES = {1: "data", 4: "hello", 5: "ready", 6: "ping", 7: "pong"}
seq = [0]
lock = threading.Lock()


def frames(src, dst, tag):
    buf = b""
    while True:
        data = src.recv(65536)
        if not data:
            dst.close()
            return
        dst.sendall(data)
        buf += data
        while len(buf) >= 16:
            n = struct.unpack(">I", buf[:4])[0]
            if len(buf) < n:
                break
            f, buf = buf[:n], buf[n:]
            hl, t = struct.unpack(">HB", f[4:7])
            name = TYPES.get(t, str(t))
            if t == 1 and hl:
                h = msgpack.unpackb(f[16:16 + hl], raw=False)
                name += "_%s_%s" % (h.get("cn__channel"), h.get("cn__topic"))
                if h.get("cn__channel") == "sm__STREAM":
                    name += "_%s" % h.get("sm__ch", "")
            with lock:
                seq[0] += 1
                path = os.path.join(OUT, "%03d_%s_%s.bin" % (seq[0], tag, name.replace("/", "-")))
            with open(path, "wb") as fh:
                fh.write(f)


cfg = json.load(open(CFG))
relay = cfg["cp_conn_props"]["url"]
host, port = relay[len("tcp://"):].rsplit(":", 1)
lsn = socket.socket()
lsn.bind(("127.0.0.1", 0))
lsn.listen(4)
mine = "tcp://127.0.0.1:%d" % lsn.getsockname()[1]
cfg["cp_conn_props"]["url"] = mine
for k in ("TASK_EXCHANGE", "METRICS_EXCHANGE"):
    if k in cfg:
        cfg[k]["pipe"]["ARG"]["root_url"] = mine
json.dump(cfg, open(CFG, "w"), indent=2)


def serve():
    while True:
        c, _ = lsn.accept()
        r = socket.create_connection((host, int(port)))
        threading.Thread(target=frames, args=(c, r, "t2r"), daemon=True).start()
        threading.Thread(target=frames, args=(r, c, "r2t"), daemon=True).start()


threading.Thread(target=serve, daemon=True).start()
sys.argv = ["custom/train.py"]
runpy.run_path("custom/train.py", run_name="__main__")
