#!/usr/bin/env python3
"""Counts the func.call results of a dsc IR file that nothing reads.

  check_call_results.py IR.mlir

Prints "calls N results R unread U" (FileCheck reads it) and exits 1 naming
the first unread result: after the whole `dsc compile` pipeline, a returned
value is computed into its caller's storage and held across the call, so
one nobody reads only costs memory (dsc-drop-unused-results removes them).
Uses are looked for in the calling function's body only (SSA names repeat
across functions).
"""

import re
import sys

CALL = re.compile(r"^\s*(%[\w.$-]+)(?::(\d+))? = (?:func\.)?call @(\w+)", re.M)


def functions(text):
    """The text of each func.func, from its header to its closing brace."""
    starts = [m.start() for m in re.finditer(r"^\s*func\.func ", text, re.M)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def main(path):
    calls = results = unread = 0
    first = None
    for body in functions(open(path).read()):
        for name, count, callee in CALL.findall(body):
            calls += 1
            n = int(count) if count else 1
            results += n
            for i in range(n):
                # A result of several is read as NAME#i; a lone one as NAME,
                # whose definition is then one occurrence.
                use = re.escape(name) + (f"#{i}\\b" if count else r"\b(?![#:])")
                if len(re.findall(use, body)) < (1 if count else 2):
                    unread += 1
                    first = first or f"{name}#{i} of @{callee}"
    print(f"calls {calls} results {results} unread {unread}")
    if first:
        sys.exit(f"error: {first} is returned but never read")


if __name__ == "__main__":
    main(sys.argv[1])
