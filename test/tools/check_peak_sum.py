"""The report's breakdown of the arena at its peak adds up: the kept
values, the temporaries and the collective buffers sum to the peak
(within the rounding of the printed figures)."""
import re
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def size(text):
    value, unit = text.split()
    return float(value) * UNITS[unit]


peak, parts = None, []
for line in sys.stdin:
    m = re.match(r"arena at its peak: ([0-9.]+ \w+) alive", line)
    if m:
        peak = size(m.group(1))
    m = re.match(r"  (kept from forward for backward|temporaries|collective buffers)\s+([0-9.]+ \w+) in", line)
    if m:
        parts.append(size(m.group(2)))
if peak is None or not parts:
    sys.exit("no peak breakdown in the report")
if abs(sum(parts) - peak) > 0.01 * peak:
    sys.exit(f"parts {sum(parts):.0f} B do not add up to the peak {peak:.0f} B")
print(f"peak {peak:.0f} B = {' + '.join(f'{p:.0f}' for p in parts)}")
