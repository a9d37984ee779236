# SPDX-License-Identifier: Apache-2.0
# sampler.py — what a FLARE site's processes pay for a job, for bench/flare.sh: every
# SECS seconds it reads /proc for the given root pids and all their descendants, keeping
# each process's last CPU times (user + system, from /proc/PID/stat) and its peak RSS
# (VmHWM), until it gets SIGTERM; then it prints one JSON object:
#   {"site": {"cpu_s": .., "rss_peak_kib": .., "pids": N}, "trainer": {...},
#    "processes": [{"pid", "name", "cpu_s", "rss_peak_kib", "trainer"}...]}
# "site" sums every process but the trainers (a process whose command line names
# TRAINER): the client parent, the client job (stock) or cjrelayd, and their helpers.
# CPU is the delta from the first sample (a process born later counts from 0); a
# process that exits loses at most its last SECS of CPU.
#   python3 sampler.py SECS TRAINER PID...
#   python3 sampler.py report FILE RUN SIZE FLARE T0: that JSON (FILE) as bench/flare.sh's
#       "# BENCH ..." lines: the run's name, FLARE's version, the model's SIZE (512M, 1G), the
#       job's time since T0 (seconds since the epoch), the site's CPU per GiB of model
import json
import os
import signal
import sys

TICK = os.sysconf("SC_CLK_TCK")


def children_of():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(roots):
    kids = children_of()
    out, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo.extend(kids.get(p, []))
    return out


def read(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        with open(f"/proc/{pid}/status") as f:
            hwm = next((int(l.split()[1]) for l in f if l.startswith("VmHWM:")), 0)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, StopIteration):
        return None
    fields = st[st.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    return cpu, hwm, cmd


def main(argv):
    secs, trainer, roots = float(argv[1]), argv[2], [int(p) for p in argv[3:]]
    first, last = {}, {}

    def sample():
        for pid in tree(roots) - {os.getpid()}:
            r = read(pid)
            if r is None:
                continue
            cpu, hwm, cmd = r
            if pid not in first:
                first[pid] = cpu if pid in roots else 0.0
            old = last.get(pid)
            last[pid] = (cpu, max(hwm, old[1] if old else 0), cmd or (old[2] if old else ""))

    while True:
        sample()
        if signal.sigtimedwait([signal.SIGTERM], secs) is not None:
            sample()
            break
    procs = []
    for pid, (cpu, hwm, cmd) in sorted(last.items()):
        procs.append({"pid": pid, "name": cmd[:120], "cpu_s": round(cpu - first[pid], 3),
                      "rss_peak_kib": hwm, "trainer": trainer in cmd})
    out = {}
    for kind, want in (("site", False), ("trainer", True)):
        sel = [p for p in procs if p["trainer"] == want]
        out[kind] = {"cpu_s": round(sum(p["cpu_s"] for p in sel), 3),
                     "rss_peak_kib": max((p["rss_peak_kib"] for p in sel), default=0), "pids": len(sel)}
    out["processes"] = procs
    print(json.dumps(out))


def report(path, run, size, flare, t0):
    import time
    d = json.load(open(path))
    s, t = d["site"], d["trainer"]
    gib = int(size.rstrip("MG")) / (1024 if size.endswith("M") else 1)
    print(f"# BENCH {run} FLARE {flare} model {size}: job {time.time() - float(t0):.1f} s; "
          f"site (all but the trainer) CPU {s['cpu_s']:.2f} s = {s['cpu_s'] / gib:.2f} s/GiB, "
          f"peak RSS {s['rss_peak_kib'] // 1024} MiB ({s['pids']} processes); trainer CPU {t['cpu_s']:.2f} s")
    for p in d["processes"]:
        if not p["trainer"] and p["cpu_s"] > 0.05:
            print(f"#   {p['cpu_s']:8.2f} s {p['rss_peak_kib'] // 1024:6d} MiB  {p['name'][:90]}")


if __name__ == "__main__":
    if sys.argv[1] == "report":
        report(*sys.argv[2:7])
    else:
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
        main(sys.argv)
