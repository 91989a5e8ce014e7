#!/usr/bin/env python3
"""Lazy clone + first `ls` + first `cat`, step by step, for several avfs binaries
interleaved rep by rep: wall time, the client's CPU (user+sys of the process, from
wait4) and requests (lines of the S3 server's log, as the bench counts them).

  scripts/lazy-steps.py REPS URL LS_DIR CAT_FILE SERVER_LOG label=/path/to/avfs ...

The remote at URL must hold a pushed workspace `main` (docs/benchmarks.md, remote group);
the environment carries the endpoint and keys (AWS_ENDPOINT_URL, ...). Each run clones
into a fresh $AVFS_HOME under /dev/shm and removes it afterwards.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

reps, URL, LS, CAT, LOG = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
bins = dict(a.split("=", 1) for a in sys.argv[6:])


def requests():
    with open(LOG, errors="replace") as f:
        return sum(1 for line in f if '" ' in line)


def run(cmd, env):
    r0, t = requests(), time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True)
    wall = time.monotonic() - t
    out, err, status = p.stdout, p.stderr, p.returncode
    if status != 0:
        raise SystemExit(f"{cmd} failed: {err.decode()}")
    time.sleep(0.05)  # the server logs after it answers
    return wall, requests() - r0, out


STEPS = ("clone", "ls", "cat", "total")
res = {k: {s: [] for s in STEPS} for k in bins}
for rep in range(reps):
    for label, binary in bins.items():
        home = f"/dev/shm/lazy-steps-{os.getpid()}-{label}"
        shutil.rmtree(home, ignore_errors=True)
        env = dict(os.environ, AVFS_HOME=home)
        total = [0.0, 0.0, 0]
        for name, cmd in (
            ("clone", [binary, "clone", URL, "c"]),
            ("ls", [binary, "--vault", "c", "ls", LS]),
            ("cat", [binary, "--vault", "c", "cat", CAT]),
        ):
            before = os.times()
            wall, reqs, _ = run(cmd, env)
            after = os.times()
            cpu = (after.children_user - before.children_user) + (
                after.children_system - before.children_system
            )
            res[label][name].append((wall, cpu, reqs))
            total = [total[0] + wall, total[1] + cpu, total[2] + reqs]
        res[label]["total"].append(tuple(total))
        shutil.rmtree(home, ignore_errors=True)
        load = open("/proc/loadavg").read().split()[0]
        print(label, rep, *(f"{s}={res[label][s][-1][0]:.3f}s" for s in STEPS), "load", load, flush=True)

print()
print("| step | " + " | ".join(f"{l}: wall (median) | {l}: client cpu | {l}: requests" for l in bins) + " |")
print("|---|" + "---|---|---:|" * len(bins))
for s in STEPS:
    cells = []
    for l in bins:
        v = res[l][s]
        cells += [
            f"{statistics.median(x[0] for x in v):.3f} s",
            f"{statistics.median(x[1] for x in v):.3f} s",
            str(int(statistics.median(x[2] for x in v))),
        ]
    print(f"| {s} | " + " | ".join(cells) + " |")
