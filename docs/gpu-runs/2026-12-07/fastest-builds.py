#!/usr/bin/env python3
"""The fastest builds of a bench/flashmla_side_by_side.py run over its FP8 dense rows, for the few-heads scripts here.

Usage: fastest-builds.py COUNT [--faster-only] [--exclude NAME ...] < run output
Ranks the --lib-more builds by the geometric mean of their <name>_speedup fields (a time over the --lib build's:
lower is faster) over the MLA_SUITE lines with kv "fp8", leaving out "b" (the --lib-b build), "fp8" and the names
excluded; prints the COUNT fastest, space-separated (with --faster-only, only those faster than the --lib build).
"""
import argparse
import json
import math
import sys

ap = argparse.ArgumentParser()
ap.add_argument("count", type=int)
ap.add_argument("--faster-only", action="store_true")
ap.add_argument("--exclude", nargs="*", default=[])
args = ap.parse_args()
logs = {}
for line in sys.stdin:
    if not line.startswith("MLA_SUITE "):
        continue
    d = json.loads(line.split(" ", 1)[1])
    if d.get("kv") != "fp8":
        continue
    for k, v in d.items():
        name = k[: -len("_speedup")]
        if k.endswith("_speedup") and name not in ["b", "fp8", *args.exclude] and v > 0:
            logs.setdefault(name, []).append(math.log(v))
ranked = sorted(logs, key=lambda n: sum(logs[n]) / len(logs[n]))
if args.faster_only:
    ranked = [n for n in ranked if sum(logs[n]) < 0]
print(" ".join(ranked[: args.count]))
