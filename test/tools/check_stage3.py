#!/usr/bin/env python3
"""Checks a stage-3 program after the whole `dsc compile` pipeline.

  check_stage3.py gathers IR.mlir        all_gathers per stage-3 bucket in
                                         @forward_backward, and every use of
                                         a value after its dsc.release
  check_stage3.py passes DUMP.txt        all_gathers after each pass of a
                                         --print-ir-after-all dump
  check_stage3.py window IR.mlir S3.txt KEEP.txt PREFETCH
                                         gathered copies alive at once in
                                         the IR, and the --report lines on
                                         gathered parameters: the release
                                         bounds them by the prefetch window

Prints one line of facts per mode (FileCheck reads it) and exits 1 with a
message naming the offending value when an invariant is broken.
"""

import re
import sys

# Ops whose result is (part of) a copy of their operand's data: a gathered
# bucket is alive while any of them is (as codegen's MemoryPlan counts).
COPIES = ("dsc.wait", "dsc.slice", "dsc.reshape", "dsc.transpose", "dsc.cast")
VALUE = re.compile(r"%[A-Za-z0-9_.$-]+(?:#\d+)?")


def function_body(text, name):
    """The lines of func.func @name, up to its closing brace."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*func\.func (?:\w+ )?@" + re.escape(name) + r"\(", line):
            indent = len(line) - len(line.lstrip())
            body = []
            for later in lines[i + 1:]:
                if later.strip() == "}" and len(later) - len(later.lstrip()) == indent:
                    return line, body
                body.append(later)
    sys.exit(f"error: no func.func @{name}")


def parse(line):
    """(results, op name, operands) of one printed op, or None."""
    line = line.split(" loc(")[0].strip()
    results = []
    m = re.match(r"((?:%[^=]+?,?\s*)+)=\s*(.*)", line)
    if m and m.group(1).strip().startswith("%"):
        results = [r.split("#")[0] for r in VALUE.findall(m.group(1))]
        rest = m.group(2)
    else:
        rest = line
    name = rest.split(" ")[0].strip('"')
    # Operands: the values before the type signature.
    head = rest.split(" : ")[0]
    operands = [v.split("#")[0] for v in VALUE.findall(head)]
    return results, name, operands


def gathers(path):
    text = open(path).read()
    header, body = function_body(text, "forward_backward")
    ops = [parse(l) for l in body if l.strip() and not l.strip().startswith("//")]
    # The stage-3 shards: arguments marked dsc.param_shard.
    shards = re.findall(r"(%arg\d+): [^{,)]*\{[^}]*dsc\.param_shard", header)
    defs = {}  # value -> (op index, op name, operands)
    for i, (results, name, operands) in enumerate(ops):
        for r in results:
            defs[r] = (i, name, operands)

    def source(v):
        """What a collective communicates, through its dsc.collective_input."""
        d = defs.get(v)
        return d[2][0] if d and d[1] == "dsc.collective_input" else v

    per_shard = {s: 0 for s in shards}
    for results, name, operands in ops:
        if name == "shard.all_gather" and source(operands[0]) in per_shard:
            per_shard[source(operands[0])] += 1
    # Uses after release: a released value, and what it was cut from (the
    # wait, slices and reshapes back to the gather), are dead afterwards.
    releases = 0
    for i, (results, name, operands) in enumerate(ops):
        if name != "dsc.release":
            continue
        releases += 1
        dead, work = set(), list(operands)
        while work:
            v = work.pop()
            if v in dead:
                continue
            dead.add(v)
            d = defs.get(v)
            if d and d[1] in COPIES:
                work.append(d[2][0])
        for j in range(i + 1, len(ops)):
            for v in ops[j][2]:
                if v in dead:
                    sys.exit(f"error: {v} is used by {ops[j][1]} (op {j}) "
                             f"after its dsc.release (op {i})")
    if not shards:
        sys.exit("error: no stage-3 shard arguments in @forward_backward")
    # "2:8 1:1": 8 buckets gathered twice (forward, backward), one once (a
    # bucket whose values backward does not read).
    hist = {}
    for n in per_shard.values():
        hist[n] = hist.get(n, 0) + 1
    hist = " ".join(f"{n}:{k}" for n, k in sorted(hist.items(), reverse=True))
    print(f"buckets {len(shards)} gathers per bucket {hist} "
          f"releases {releases} no use after release")


def passes(path):
    counts = []
    for block in re.split(r"// -----// IR Dump After ", open(path).read())[1:]:
        name = re.match(r".*?\((\S+)\)", block).group(1)
        counts.append(f"{name} {block.count('shard.all_gather')}")
    print(" ; ".join(counts))


def copies(path):
    """Each stage-3 gathered copy in @forward_backward: (first op, last op
    that reads it or a piece of it, bytes), in op order."""
    header, body = function_body(open(path).read(), "forward_backward")
    ops = [parse(l) for l in body if l.strip() and not l.strip().startswith("//")]
    shards = set(re.findall(r"(%arg\d+): [^{,)]*\{[^}]*dsc\.param_shard", header))
    sizes = {"f32": 4, "bf16": 2, "f16": 2}
    defs, root, spans = {}, {}, {}
    for i, line in enumerate(l for l in body if l.strip() and not l.strip().startswith("//")):
        results, name, operands = ops[i]
        for r in results:
            defs[r] = (name, operands)
        if name == "shard.all_gather":
            src = operands[0]
            if defs.get(src, ("",))[0] == "dsc.collective_input":
                src = defs[src][1][0]
            if src in shards:
                n, e = re.search(r"-> tensor<(\d+)x(\w+)>", line).groups()
                root[results[0]] = results[0]
                spans[results[0]] = [i, i, int(n) * sizes[e]]
        elif name in COPIES and operands and operands[0] in root:
            root[results[0]] = root[operands[0]]
        if name != "dsc.release":
            for v in operands:
                if v in root:
                    spans[root[v]][1] = max(spans[root[v]][1], i)
    return sorted(spans.values())


def window(ir, s3, keep, prefetch):
    """The release and the prefetch window bound the gathered copies alive
    at once: at most prefetch + 1, not counting a copy whose uses enclose
    another copy's whole life (a tied weight, used at both ends of forward,
    is alive throughout). The plan's peak (--report) is within those
    copies' bytes and below the peak with --keep-gathered."""
    spans = copies(ir)
    enclosing = [s for s in spans
                 if any(s[0] < t[0] and t[1] < s[1] for t in spans)]
    worst = 0
    for i in range(max(s[1] for s in spans) + 1):
        alive = [s for s in spans if s[0] <= i <= s[1] and s not in enclosing]
        if len(alive) > prefetch + 1:
            sys.exit(f"error: {len(alive)} gathered copies alive at op {i}, "
                     f"more than prefetch + 1 = {prefetch + 1}")
        worst = max(worst, len(alive))
    largest = max(s[2] for s in spans)
    bound = (prefetch + 1) * largest + sum(s[2] for s in enclosing)
    pat = re.compile(r"gathered parameters in the arena: at most .*? \((\d+) B\)"
                     r" alive at once")

    def peak(path):
        m = pat.search(open(path).read())
        if not m:
            sys.exit(f"error: {path}: no line on gathered parameters")
        return int(m.group(1))

    planned, kept = peak(s3), peak(keep)
    if planned > bound:
        sys.exit(f"error: the plan holds {planned} B of gathered parameters "
                 f"at once, more than the window's {bound} B")
    if planned >= kept:
        sys.exit(f"error: released ({planned} B) is not below kept ({kept} B)")
    print(f"{len(spans)} copies, at most {worst} alive at once besides "
          f"{len(enclosing)} enclosing; plan {planned} B <= window {bound} B, "
          f"kept {kept} B")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "gathers":
        gathers(sys.argv[2])
    elif mode == "passes":
        passes(sys.argv[2])
    elif mode == "window":
        window(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(f"error: unknown mode {mode}")
