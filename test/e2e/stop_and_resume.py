#!/usr/bin/env python3
"""A run stopped by SIGTERM saves a checkpoint, exits 0, and resumes into
the uninterrupted run, bit for bit.

  stop_and_resume.py DIR -- PROGRAM ARGS...

Runs PROGRAM ARGS --steps 100000 --log DIR/sig.jsonl --save-dir DIR/ck
--save-every 2 (so that the signal may arrive during a save),
sends SIGTERM once two steps are logged, and checks the exit status (0) and
the checkpoint of the step it stopped at (k). Then resumes it to k + 3
steps and runs the same k + 3 steps uninterrupted; the losses and the
parameters (--dump-params) must be identical. Prints what it saw."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
from safetensors.numpy import load_file


def losses(path):
    return [json.loads(l)["loss"] for l in open(path)]


def main():
    d = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    log, ck = os.path.join(d, "sig.jsonl"), os.path.join(d, "ck")
    p = subprocess.Popen(cmd + ["--steps", "100000", "--quiet", "--log", log,
                                "--save-dir", ck, "--save-every", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        if os.path.exists(log) and sum(1 for _ in open(log)) >= 2:
            break
        time.sleep(0.002)
    if p.poll() is not None:
        sys.exit(f"FAILED: the program ended before the signal "
                 f"(exit {p.returncode}): {p.stderr.read()}")
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit("FAILED: no exit within 60 s of SIGTERM")
    if p.returncode != 0:
        sys.exit(f"FAILED: exit {p.returncode} after SIGTERM: {err}")
    k = len(losses(log))
    latest = open(os.path.join(ck, "latest")).read().strip()
    print(f"stopped after step {k}, exit 0, latest {latest}")
    for line in err.splitlines():
        if line.startswith("note:"):
            print(line)
    if latest != f"step_{k}":
        sys.exit(f"FAILED: latest is {latest}, the run stopped after step {k}")
    n = k + 3
    r = subprocess.run(cmd + ["--steps", str(n), "--quiet", "--resume", ck,
                              "--log", os.path.join(d, "rest.jsonl"),
                              "--dump-params", os.path.join(d, "rest.st")],
                       capture_output=True, text=True)
    u = subprocess.run(cmd + ["--steps", str(n), "--quiet",
                              "--log", os.path.join(d, "full.jsonl"),
                              "--dump-params", os.path.join(d, "full.st")],
                       capture_output=True, text=True)
    if r.returncode or u.returncode:
        sys.exit(f"FAILED: resume {r.returncode} {r.stderr} / uninterrupted "
                 f"{u.returncode} {u.stderr}")
    got = losses(log) + losses(os.path.join(d, "rest.jsonl"))
    want = losses(os.path.join(d, "full.jsonl"))
    a, b = load_file(os.path.join(d, "rest.st")), load_file(
        os.path.join(d, "full.st"))
    same = got == want and a.keys() == b.keys() and all(
        np.array_equal(a[x], b[x]) for x in a)
    print(f"resumed to step {n}: " +
          ("bitwise identical to the uninterrupted run" if same else
           f"DIFFERENT: {got} vs {want}"))
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
