#!/usr/bin/env python3
"""Per-part summary of the clocks and power bench/device_run.sh samples.

usage: smi_summary.py SMI_CSV PARTS_TXT

SMI_CSV is nvidia-smi's --format=csv,noheader output of timestamp,
clocks.sm, clocks.mem, power.draw, temperature.gpu and
clocks_throttle_reasons.active, one line per 200 ms; PARTS_TXT has one
"YYYY/MM/DD HH:MM:SS part" line per part as it starts. For each part, over
the samples where the card was busy (power above a third of the call's
highest draw): the SM clock's median and lowest value, the median and
highest power, the highest temperature and the throttle reasons seen, so a
step slower than the sum of its kernels can be told from a card held below
its boost clock.
"""
import datetime
import statistics
import sys

REASONS = {0x1: "idle", 0x2: "app-clocks", 0x4: "sw-power-cap", 0x8: "hw-slowdown",
           0x10: "sync-boost", 0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "hw-power-brake"}


def when(text):
    text = text.strip()
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.datetime.strptime(text, fmt)
        except ValueError:
            pass
    return None


def number(text):
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def samples(path):
    rows = []
    for line in open(path, errors="replace"):
        f = line.split(",")
        if len(f) < 6:
            continue
        t, sm, power, temp = when(f[0]), number(f[1]), number(f[3]), number(f[4])
        try:
            reasons = int(f[5].strip(), 16)
        except ValueError:
            reasons = 0
        if t and sm is not None and power is not None:
            rows.append((t, sm, power, temp or 0.0, reasons))
    return rows


def parts(path):
    out = []
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and when(f[0] + " " + f[1]):
            out.append((when(f[0] + " " + f[1]), f[2]))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows, marks = samples(sys.argv[1]), parts(sys.argv[2])
    if not rows or not marks:
        print("smi_summary: no samples or no parts")
        return
    busy = max(r[2] for r in rows) / 3
    print("part                 busy-samples  sm-MHz(median/min)  power-W(median/max)  max-C  throttle")
    for i, (start, name) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else datetime.datetime.max
        sel = [r for r in rows if start <= r[0] < end and r[2] >= busy]
        if not sel:
            print(f"{name:20s} 0")
            continue
        seen = 0
        for r in sel:
            seen |= r[4]
        why = ",".join(v for k, v in REASONS.items() if seen & k) or "none"
        sm = [r[1] for r in sel]
        pw = [r[2] for r in sel]
        print(f"{name:20s} {len(sel):12d}  {statistics.median(sm):7.0f}/{min(sm):<7.0f}     "
              f"{statistics.median(pw):6.0f}/{max(pw):<6.0f}        {max(r[3] for r in sel):5.0f}  {why}")


if __name__ == "__main__":
    main()
