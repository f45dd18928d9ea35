#!/usr/bin/env python3
"""Run the dsc ONNX importer over the ONNX backend test models.

Usage:
    run_backend_models.py --dsc PATH/TO/dsc
        [--data /usr/share/libonnx-testdata/data] [--allow FILE]
        [--report OUT.md] [--jobs N] [--timeout SECONDS]
        [--dirs node,pytorch-converted,...] [--filter REGEX] [--verbose]

Models: <data>/<dir>/<test_name>/model.onnx for dir in node and
pytorch-converted (required) and pytorch-operator, simple, real (counted when
present).

dsc CLI contract assumed:
  * `dsc ops` prints the supported default-domain ONNX op types, one per line
    (blank lines and lines starting with '#' are ignored).
  * `dsc import --no-loss --summary-json MODEL.onnx` imports an inference
    graph and on success exits 0 printing one JSON object on stdout:
        {"inputs":  [{"name": str, "shape": [int...], "dtype": str}, ...],
         "outputs": [{"name": str, "shape": [int...], "dtype": str}, ...],
         "params":  [...], "ops": {"dsc.add": 3, ...}}
    dtype strings: f32 f16 bf16 f64 i64 i32 i16 i8 u64 u32 u16 u8 i1.
  * On a user error (unsupported op, opset, ...) it exits 1 and prints a
    line starting with "error:" on stderr.
  * Anything else -- killed by a signal, any other exit code, or running
    longer than --timeout (default 20 s) -- is a CRASH.

A model is SUPPORTED when it parses, its default-domain opset is >= 13, every
node (including nodes of If/Loop/Scan subgraphs) is in the default domain
('' or 'ai.onnx') and every op type is listed by `dsc ops`.

  * Supported models must import (exit 0).  Each graph output of tensor type
    is then compared with test_data_set_0/output_<i>.pb: the shape must be
    equal, and the dtype too where the summary gives one.  Outputs are
    matched by name, or by position when the names are not found.
    Sequence/optional outputs are not compared.
  * A supported model listed in the allow-list may instead fail with a clean
    error (exit 1 + "error:"); an allow-listed model that now imports and
    checks fine is reported, but is not a failure.
  * Unsupported models must be rejected cleanly (exit 1 + "error:").
    Importing one successfully is an unexpected failure.
  * Exit 1 without an "error:" line is an unexpected failure (bad
    diagnostic), not a crash.

Allow-list format (default: known_failures.txt next to this script): one
`<dir>/<test_name>  # reason` per line; '#' starts a comment.

Exit status: 0 when there is no unexpected failure and no crash, 1 otherwise,
2 on a setup error (dsc ops failed, data directory missing, ...).
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = "/usr/share/libonnx-testdata/data"
DEFAULT_ALLOW = os.path.join(SCRIPT_DIR, "known_failures.txt")
REQUIRED_DIRS = ["node", "pytorch-converted"]
OPTIONAL_DIRS = ["pytorch-operator", "simple", "real"]
MIN_OPSET = 13
DEFAULT_DOMAINS = ("", "ai.onnx")

DTYPE_NAMES = {
    TensorProto.FLOAT: "f32",
    TensorProto.FLOAT16: "f16",
    TensorProto.BFLOAT16: "bf16",
    TensorProto.DOUBLE: "f64",
    TensorProto.INT64: "i64",
    TensorProto.INT32: "i32",
    TensorProto.INT16: "i16",
    TensorProto.INT8: "i8",
    TensorProto.UINT64: "u64",
    TensorProto.UINT32: "u32",
    TensorProto.UINT16: "u16",
    TensorProto.UINT8: "u8",
    TensorProto.BOOL: "i1",
}

ERROR_LINE = re.compile(r"^error:", re.MULTILINE)


@dataclass
class Result:
    dir: str
    name: str
    supported: bool = False
    why_unsupported: str = ""
    allowed: bool = False          # listed in the allow-list
    rc: object = None              # exit code, or "timeout"
    imported: bool = False         # exit 0 (supported or not)
    shape_checked: bool = False    # >= 1 output compared, all matched
    outcome: str = ""              # pass | rejected | allowed | fail | crash
    detail: str = ""
    seconds: float = 0.0

    @property
    def key(self):
        return f"{self.dir}/{self.name}"


# ---------------------------------------------------------------------------
# model inspection


def _walk_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _walk_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _walk_nodes(g)


def classify(model, dsc_ops):
    """Return (supported, reason)."""
    opset = None
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            opset = imp.version
    if opset is None:
        return False, "no default-domain opset import"
    if opset < MIN_OPSET:
        return False, f"opset {opset} < {MIN_OPSET}"
    missing = set()
    for node in _walk_nodes(model.graph):
        if node.domain not in DEFAULT_DOMAINS:
            return False, f"node {node.op_type} in domain '{node.domain}'"
        if node.op_type not in dsc_ops:
            missing.add(node.op_type)
    if missing:
        return False, "ops not in `dsc ops`: " + ",".join(sorted(missing))
    return True, f"opset {opset}"


def _first_error(stderr):
    for line in stderr.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "(no stderr)"


def _error_line(stderr):
    m = ERROR_LINE.search(stderr)
    if not m:
        return None
    end = stderr.find("\n", m.start())
    return stderr[m.start(): end if end >= 0 else None][:200]


def check_outputs(model, test_dir, summary):
    """Compare summary outputs with the reference outputs.

    Returns (n_compared, problems)."""
    outs = summary.get("outputs")
    if not isinstance(outs, list):
        return 0, ["summary JSON has no 'outputs' list"]
    graph_outs = list(model.graph.output)
    problems = []
    if len(outs) != len(graph_outs):
        problems.append(f"summary has {len(outs)} outputs, model has "
                        f"{len(graph_outs)}")
    by_name = {o.get("name"): o for o in outs if isinstance(o, dict)}
    ref_dir = os.path.join(test_dir, "test_data_set_0")
    compared = 0
    for i, gout in enumerate(graph_outs):
        if gout.type.WhichOneof("value") != "tensor_type":
            continue
        ref_path = os.path.join(ref_dir, f"output_{i}.pb")
        if not os.path.exists(ref_path):
            continue
        got = by_name.get(gout.name)
        if got is None and len(outs) == len(graph_outs):
            got = outs[i] if isinstance(outs[i], dict) else None
        if got is None:
            problems.append(f"output '{gout.name}' missing from summary")
            continue
        try:
            ref = onnx.load_tensor(ref_path)
        except Exception as e:  # noqa: BLE001 - unreadable reference
            problems.append(f"cannot read {ref_path}: {e}")
            continue
        want_shape = [int(d) for d in ref.dims]
        shape = got.get("shape")
        if not (isinstance(shape, list)
                and all(isinstance(d, int) and not isinstance(d, bool)
                        for d in shape)
                and shape == want_shape):
            problems.append(f"output '{gout.name}': shape {shape} != "
                            f"reference {want_shape}")
        ref_type = ref.data_type
        if (ref_type == TensorProto.UINT16 and
                gout.type.tensor_type.elem_type == TensorProto.BFLOAT16):
            ref_type = TensorProto.BFLOAT16  # old test data stores bf16 as u16
        want_dtype = DTYPE_NAMES.get(ref_type)
        dtype = got.get("dtype")
        if dtype is not None and want_dtype is not None and dtype != want_dtype:
            problems.append(f"output '{gout.name}': dtype {dtype} != "
                            f"reference {want_dtype}")
        compared += 1
    return compared, problems


# ---------------------------------------------------------------------------
# running


def run_one(dsc, data, dname, tname, dsc_ops, allow, timeout):
    r = Result(dname, tname)
    r.allowed = r.key in allow
    test_dir = os.path.join(data, dname, tname)
    model_path = os.path.join(test_dir, "model.onnx")
    model = None
    try:
        model = onnx.load(model_path, load_external_data=False)
        r.supported, r.why_unsupported = classify(model, dsc_ops)
    except Exception as e:  # noqa: BLE001 - any parse failure
        r.supported, r.why_unsupported = False, f"onnx cannot load: {e}"[:200]

    cmd = [dsc, "import", "--no-loss", "--summary-json", model_path]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout)
        r.rc = p.returncode
        stdout = p.stdout.decode("utf-8", "replace")
        stderr = p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        r.rc, stdout, stderr = "timeout", "", ""
    except OSError as e:
        r.rc, stdout, stderr = "exec-failed", "", str(e)
    r.seconds = time.monotonic() - t0

    if r.rc == "timeout":
        r.outcome, r.detail = "crash", f"timeout after {timeout:g}s"
        return r
    if r.rc not in (0, 1):
        sig = ""
        if isinstance(r.rc, int) and r.rc < 0:
            sig = f" (signal {-r.rc})"
        r.outcome = "crash"
        r.detail = f"exit {r.rc}{sig}: {_first_error(stderr)}"
        return r

    if r.rc == 1:
        err = _error_line(stderr)
        if err is None:
            r.outcome = "fail"
            r.detail = ("exit 1 but no stderr line starts with 'error:': "
                        + _first_error(stderr))
        elif not r.supported:
            r.outcome, r.detail = "rejected", err
        elif r.allowed:
            r.outcome, r.detail = "allowed", err
        else:
            r.outcome, r.detail = "fail", err
        return r

    # exit 0
    r.imported = True
    if not r.supported:
        r.outcome = "fail"
        r.detail = f"imported although unsupported ({r.why_unsupported})"
        return r
    try:
        summary = json.loads(stdout)
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        r.outcome = "fail"
        r.detail = f"bad --summary-json output: {e}: {stdout[:120]!r}"
        return r
    compared, problems = check_outputs(model, test_dir, summary)
    if problems:
        r.outcome, r.detail = "fail", "; ".join(problems)[:400]
        return r
    r.shape_checked = compared > 0
    r.outcome = "pass"
    r.detail = f"{compared} output(s) checked"
    return r


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def get_dsc_ops(dsc, timeout):
    try:
        p = subprocess.run([dsc, "ops"], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        die(f"cannot run `{dsc} ops`: {e}")
    if p.returncode != 0:
        die(f"`{dsc} ops` exited {p.returncode}: "
            f"{p.stderr.decode('utf-8', 'replace').strip()[:300]}")
    ops = set()
    for line in p.stdout.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            ops.add(line)
    if not ops:
        die(f"`{dsc} ops` printed no op types")
    return ops


def read_allow(path):
    allow = {}
    if not path:
        return allow
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                entry, _, reason = line.partition("#")
                entry = entry.strip()
                if entry:
                    allow[entry] = reason.strip()
    except OSError as e:
        die(f"cannot read allow-list {path}: {e}")
    return allow


def discover(data, dirs, name_filter):
    work = []
    for d in dirs:
        root = os.path.join(data, d)
        if not os.path.isdir(root):
            continue
        for t in sorted(os.listdir(root)):
            if name_filter and not name_filter.search(f"{d}/{t}"):
                continue
            if os.path.isfile(os.path.join(root, t, "model.onnx")):
                work.append((d, t))
    return work


# ---------------------------------------------------------------------------
# reporting

COLUMNS = [
    ("dir", None),
    ("total", lambda rs: len(rs)),
    ("supported", lambda rs: sum(r.supported for r in rs)),
    ("imported", lambda rs: sum(r.supported and r.imported for r in rs)),
    ("shape-checked", lambda rs: sum(r.shape_checked for r in rs)),
    ("rejected", lambda rs: sum(r.outcome == "rejected" for r in rs)),
    ("allowed failures", lambda rs: sum(r.outcome == "allowed" for r in rs)),
    ("unexpected failures", lambda rs: sum(r.outcome == "fail" for r in rs)),
    ("crashes", lambda rs: sum(r.outcome == "crash" for r in rs)),
]


def table_rows(results, dirs):
    rows = []
    for d in dirs + ["total"]:
        rs = [r for r in results if d == "total" or r.dir == d]
        rows.append([d] + [str(fn(rs)) for _, fn in COLUMNS[1:]])
    return rows


def format_text_table(rows):
    header = [c for c, _ in COLUMNS]
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    fmt = lambda row: "  ".join(  # noqa: E731
        (c.ljust(w) if i == 0 else c.rjust(w))
        for i, (c, w) in enumerate(zip(row, widths)))
    lines = [fmt(header), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def format_md_table(rows):
    header = [c for c, _ in COLUMNS]
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def sections(results, allow, all_keys):
    """(title, [lines]) for the detail sections."""
    crashes = [r for r in results if r.outcome == "crash"]
    fails = [r for r in results if r.outcome == "fail"]
    now_pass = [r for r in results if r.allowed and r.outcome == "pass"]
    allowed = [r for r in results if r.outcome == "allowed"]
    allow_unsup = [r for r in results if r.allowed and not r.supported]
    unknown = sorted(k for k in allow if k not in all_keys)
    out = [
        ("Crashes", [f"{r.key}: {r.detail}" for r in crashes]),
        ("Unexpected failures",
         [f"{r.key}: {r.detail}" for r in fails]),
        ("Allow-listed models that now pass (remove them from the allow-list)",
         [r.key for r in now_pass]),
        ("Allow-listed models that are not supported (entry not needed)",
         [f"{r.key}: {r.why_unsupported}" for r in allow_unsup]),
        ("Allow-list entries that match no model", unknown),
        ("Allowed failures",
         [f"{r.key}: {r.detail}  [allow-list: {allow.get(r.key, '')}]"
          for r in allowed]),
    ]
    return out


def write_report(path, rows, secs, args, dsc_ops, elapsed):
    lines = ["# dsc ONNX backend model import report", "",
             f"- dsc: `{args.dsc}`", f"- data: `{args.data}`",
             f"- `dsc ops`: {len(dsc_ops)} op types",
             f"- supported = default-domain opset >= {MIN_OPSET}, all nodes in "
             "the default domain, all op types in `dsc ops`",
             f"- wall time: {elapsed:.1f}s, jobs: {args.jobs}", "",
             format_md_table(rows), ""]
    for title, items in secs:
        lines.append(f"## {title} ({len(items)})")
        lines.append("")
        lines += [f"- `{i.split(':', 1)[0]}`" +
                  (":" + i.split(":", 1)[1] if ":" in i else "")
                  for i in items] or ["none"]
        lines.append("")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Run `dsc import` over the ONNX backend test models.")
    ap.add_argument("--dsc", required=True, help="path to the dsc binary")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--allow", default=DEFAULT_ALLOW,
                    help="allow-list file ('' for none)")
    ap.add_argument("--report", help="write a Markdown report here")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0,
                    help="seconds per model before it counts as a crash")
    ap.add_argument("--dirs", default=",".join(REQUIRED_DIRS + OPTIONAL_DIRS),
                    help="comma-separated sub-directories of --data")
    ap.add_argument("--filter", help="regex on '<dir>/<test_name>'")
    ap.add_argument("--verbose", "-v", action="store_true",
                    help="print one line per model")
    args = ap.parse_args(argv)

    dsc = args.dsc
    if os.sep in dsc:
        dsc = os.path.abspath(dsc)
    if not os.path.isdir(args.data):
        die(f"data directory {args.data} not found")
    dirs = [d for d in args.dirs.split(",") if d]
    for d in dirs:
        if d in REQUIRED_DIRS and not os.path.isdir(os.path.join(args.data, d)):
            die(f"required directory {args.data}/{d} is missing")
    dirs = [d for d in dirs if os.path.isdir(os.path.join(args.data, d))]

    dsc_ops = get_dsc_ops(dsc, args.timeout)
    allow = read_allow(args.allow)
    name_filter = re.compile(args.filter) if args.filter else None
    work = discover(args.data, dirs, name_filter)

    t0 = time.monotonic()
    results = []
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futs = [pool.submit(run_one, dsc, args.data, d, t, dsc_ops, allow,
                            args.timeout) for d, t in work]
        for fut in concurrent.futures.as_completed(futs):
            r = fut.result()
            results.append(r)
            if args.verbose:
                print(f"{r.outcome:8s} {r.key}  "
                      f"[{'supported' if r.supported else r.why_unsupported}]"
                      f" rc={r.rc} {r.seconds:.2f}s  {r.detail}")
    elapsed = time.monotonic() - t0
    results.sort(key=lambda r: (dirs.index(r.dir), r.name))

    rows = table_rows(results, dirs)
    all_keys = {f"{d}/{t}" for d, t in discover(args.data, dirs, None)}
    secs = sections(results, allow, all_keys)
    print(format_text_table(rows))
    limit = None if args.verbose else 40
    for title, items in secs[:5]:
        if items:
            print(f"\n{title} ({len(items)}):")
            for i in items[:limit]:
                print(f"  {i}")
            if limit is not None and len(items) > limit:
                print(f"  ... {len(items) - limit} more"
                      + (f" (see {args.report})" if args.report else
                         " (use --verbose or --report)"))
    bad = sum(r.outcome in ("fail", "crash") for r in results)
    print(f"\n{len(results)} models in {elapsed:.1f}s; "
          f"{'FAILED' if bad else 'OK'}"
          + (f": {bad} unexpected failure(s)/crash(es)" if bad else ""))
    if args.report:
        write_report(args.report, rows, secs, args, dsc_ops, elapsed)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
