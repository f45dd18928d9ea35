"""The report's breakdown of the arena at its peak adds up: the kept
values, the temporaries and the collective buffers sum to the peak
(within the rounding of the printed figures), and the values alive at once
fit in the arena the plan placed them in (overlapping live values would
not)."""
import re
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def size(text):
    value, unit = text.split()
    return float(value) * UNITS[unit]


peak, parts, arena = None, [], None
for line in sys.stdin:
    m = re.search(r"\+ arena ([0-9.]+ \w+) \(activations", line)
    if m:
        arena = size(m.group(1))
    m = re.match(r"arena at its peak: ([0-9.]+ \w+) alive", line)
    if m:
        peak = size(m.group(1))
    m = re.match(r"  (kept from forward for backward|temporaries|collective buffers)\s+([0-9.]+ \w+) in", line)
    if m:
        parts.append(size(m.group(2)))
if peak is None or not parts or arena is None:
    sys.exit("no peak breakdown or arena size in the report")
if peak > arena * 1.005:
    sys.exit(f"{peak:.0f} B alive at once exceed the arena's {arena:.0f} B")
if abs(sum(parts) - peak) > 0.01 * peak:
    sys.exit(f"parts {sum(parts):.0f} B do not add up to the peak {peak:.0f} B")
print(f"peak {peak:.0f} B = {' + '.join(f'{p:.0f}' for p in parts)}")
