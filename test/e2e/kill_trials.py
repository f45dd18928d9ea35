#!/usr/bin/env python3
"""SIGKILL a training run with checkpoints at random moments; check resumes.

    kill_trials.py PROGRAM ARGS... --trials N --seed S [--steps M] [--work DIR]

PROGRAM is a compiled dsc program, ARGS its options (data, seed, ...; not
--steps, --save-dir, --save-every, --log, --resume or --dump-params, which
this script sets). First one uninterrupted run of M steps (the reference:
its losses, from --log, and its --dump-params file, and how long it took).
Then for each trial:

  1. start the program with --save-dir D --save-every 1 --steps M --log L1,
     SIGKILL it after a random delay in [0, the reference's duration];
  2. if D/latest exists, resume from D to M steps (--resume D --save-dir D
     --log L2 --dump-params P), else start afresh the same way;
  3. check: the losses of L1 up to the step of `latest` (the killed run's
     log may go further, or end mid-line) followed by those of L2 are the
     reference's, bit for bit (the JSON numbers compared as text); P is
     the reference's dump, byte for byte; no step_*.tmp remains in D, and
     every step_N in D has a manifest.json (what `dsc checkpoint verify`
     needs, checked here without dsc).

A trial counts as "killed during a save" when D held a step_*.tmp or
step_*.old right after the kill. Prints

    N trials: K killed during a save, R resumed, 0 mismatches

and exits 1 if there was a mismatch (each described on stderr).
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

OWN = {"--steps", "--save-dir", "--save-every", "--log", "--resume",
       "--dump-params"}


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--seed", type=int, default=0,
                   help="seeds the kill delays (not the program)")
    p.add_argument("--steps", type=int, default=8,
                   help="M, the steps of every run (default 8)")
    p.add_argument("--work", help="a folder for the runs (default: a "
                   "temporary one, removed at the end)")
    p.add_argument("program")
    args, rest = p.parse_known_args()
    for a in rest:
        if a.split("=")[0] in OWN:
            p.error(a + " is set by this script")
    return args, rest


def losses(path, upto=None):
    """{step: the loss as written} of the complete lines of a --log file."""
    out = {}
    try:
        with open(path, "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return out
    for line in data.split("\n"):
        try:
            rec = json.loads(line, parse_float=str, parse_int=str)
        except ValueError:
            continue  # the killed run's last line may be cut short
        if not isinstance(rec, dict) or "step" not in rec:
            continue
        step = int(rec["step"])
        if upto is None or step <= upto:
            out[step] = (rec.get("loss"), rec.get("grad_norm"))
    return out


def latest_step(save_dir):
    try:
        with open(os.path.join(save_dir, "latest")) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    if not name.startswith("step_"):
        raise ValueError("latest holds %r" % name)
    return int(name[len("step_"):])


def leftovers(save_dir):
    return sorted(n for n in os.listdir(save_dir)
                  if n.startswith("step_") and
                  (n.endswith(".tmp") or n.endswith(".old")))


def run(cmd, log):
    with open(log, "wb") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode


def main():
    args, rest = parse()
    rng = random.Random(args.seed)
    work = args.work or tempfile.mkdtemp(prefix="dsc-kill-")
    os.makedirs(work, exist_ok=True)
    M = str(args.steps)
    base = [args.program] + rest + ["--steps", M, "--quiet"]

    # The reference, timed.
    ref_log = os.path.join(work, "ref.jsonl")
    ref_dump = os.path.join(work, "ref.safetensors")
    t0 = time.monotonic()
    rc = run(base + ["--save-dir", os.path.join(work, "ref_ckpt"),
                     "--save-every", "1", "--log", ref_log,
                     "--dump-params", ref_dump],
             os.path.join(work, "ref.out"))
    duration = time.monotonic() - t0
    if rc != 0:
        sys.exit("kill_trials: the reference run failed (exit %d), see %s"
                 % (rc, os.path.join(work, "ref.out")))
    ref = losses(ref_log)
    with open(ref_dump, "rb") as f:
        ref_bytes = f.read()
    if sorted(ref) != list(range(1, args.steps + 1)):
        sys.exit("kill_trials: the reference log has steps %s, want 1-%d"
                 % (sorted(ref), args.steps))

    during_save = resumed = 0
    mismatches = []
    for trial in range(args.trials):
        d = os.path.join(work, "t%03d" % trial)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        ckpt = os.path.join(d, "ckpt")
        log1, log2 = os.path.join(d, "a.jsonl"), os.path.join(d, "b.jsonl")
        dump = os.path.join(d, "params.safetensors")
        problems = []

        # 1. Start and kill.
        with open(os.path.join(d, "a.out"), "wb") as out:
            p = subprocess.Popen(base + ["--save-dir", ckpt, "--save-every",
                                         "1", "--log", log1],
                                 stdout=out, stderr=subprocess.STDOUT)
            time.sleep(rng.uniform(0, duration))
            p.send_signal(signal.SIGKILL)
            p.wait()
        if os.path.isdir(ckpt) and leftovers(ckpt):
            during_save += 1

        # 2. Resume (or start afresh).
        try:
            k = latest_step(ckpt) if os.path.isdir(ckpt) else None
        except ValueError as e:
            problems.append(str(e))
            k = None
        cmd = base + ["--save-dir", ckpt, "--save-every", "1", "--log", log2,
                      "--dump-params", dump]
        if k is not None:
            cmd += ["--resume", ckpt]
            resumed += 1
        rc = run(cmd, os.path.join(d, "b.out"))
        if rc != 0:
            problems.append("the %s run exited %d (see %s)" % (
                "resumed" if k is not None else "fresh", rc,
                os.path.join(d, "b.out")))

        # 3. Compare.
        if not problems:
            got = losses(log1, upto=k) if k is not None else {}
            if k is not None and sorted(got) != list(range(1, k + 1)):
                problems.append("the killed run's log has steps %s up to "
                                "latest (step %d)" % (sorted(got), k))
            second = losses(log2)
            first = (k or 0) + 1
            if sorted(second) != list(range(first, args.steps + 1)):
                problems.append("the second run logged steps %s, want %d-%d"
                                % (sorted(second), first, args.steps))
            got.update(second)
            for step in sorted(ref):
                if got.get(step) != ref[step]:
                    problems.append("step %d: loss, grad_norm %s, the "
                                    "uninterrupted run %s"
                                    % (step, got.get(step), ref[step]))
                    break
            try:
                with open(dump, "rb") as f:
                    if f.read() != ref_bytes:
                        problems.append("--dump-params differs from the "
                                        "uninterrupted run's")
            except FileNotFoundError:
                problems.append("no --dump-params file")
            left = leftovers(ckpt)
            if left:
                problems.append("left behind: " + ", ".join(left))
            for name in os.listdir(ckpt):
                path = os.path.join(ckpt, name)
                if (name.startswith("step_") and name[5:].isdigit() and
                        not os.path.isfile(os.path.join(path, "manifest.json"))):
                    problems.append(name + " has no manifest.json")
            if latest_step(ckpt) != args.steps:
                problems.append("latest is not step_%d" % args.steps)

        if problems:
            mismatches.append(trial)
            print("trial %d (killed, latest %s): %s"
                  % (trial, k, "; ".join(problems)), file=sys.stderr)
        else:  # a failed trial's folder stays, for a look
            shutil.rmtree(d, ignore_errors=True)

    print("%d trials: %d killed during a save, %d resumed, %d mismatches"
          % (args.trials, during_save, resumed, len(mismatches)))
    if mismatches:
        print("kill_trials: the failed trials are in " + work, file=sys.stderr)
    elif not args.work:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
