#!/usr/bin/env python3
"""Warp-state samples of a warp-specialized kernel, split by warpgroup role.

Input: the per-instruction source page of an Nsight Compute report, as
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > source.csv
(the report needs `--section SourceCounters`). A role's code starts at its `USETMAXREG` instruction (the
register split each warpgroup makes on entry: sparse_attention_wgmma.cuh gives consumer 0 192, consumer 1
160 and the producer 152 registers), so the samples between two of them belong to one role; the ones before
the first are the prologue, those after the function's last EXIT the cold blocks every role branches to (the
retry loops of mbarrier waits). Prints, per role, its share of all samples, its stall reasons, and the
instructions where it spends the most samples.

Usage: python3 scripts/ncu-roles.py source.csv [--top N] [--roles 192=consumer0,160=consumer1,152=producer]
"""
import argparse
import collections
import csv
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source_csv")
    ap.add_argument("--top", type=int, default=8, help="instructions listed per role")
    ap.add_argument("--roles", default="192=consumer0,160=consumer1,152=producer",
                    help="register count of a role's USETMAXREG = its name")
    args = ap.parse_args()
    names = dict(item.split("=") for item in args.roles.split(","))

    rows = list(csv.reader(open(args.source_csv, newline="")))
    header_at = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    header, body = rows[header_at], rows[header_at + 1:]
    src = header.index("Source")
    samples = header.index("Warp Stall Sampling (All Samples)")
    stalls = [i for i, c in enumerate(header) if c.startswith("stall_") and "Not Issued" not in c]

    setmaxnreg = re.compile(r"USETMAXREG\.\S+\s+(?:UP\d+,\s*)?0x([0-9a-f]+)")
    # ptxas places the retry loops of mbarrier waits (and other cold blocks) after the function's last EXIT, where
    # every role branches to them: their samples are no role's own.
    exits = [i for i, row in enumerate(body) if len(row) > src and row[src].strip().startswith("EXIT")]
    out_of_line = exits[-1] + 1 if exits else len(body)
    role = "prologue"
    per_role = collections.defaultdict(lambda: {"samples": 0.0, "reasons": collections.Counter(), "top": []})
    for index, row in enumerate(body):
        if len(row) <= max(stalls + [samples, src]):
            continue
        m = setmaxnreg.search(row[src])
        if m:
            role = names.get(str(int(m.group(1), 16)), f"regs{int(m.group(1), 16)}")
        if index == out_of_line:
            role = "out of line (wait retries of any role)"
        entry = per_role[role]
        n = number(row[samples])
        entry["samples"] += n
        for i in stalls:
            entry["reasons"][header[i][len("stall_"):]] += number(row[i])
        entry["top"].append((n, index, row[src].strip()))

    total = sum(e["samples"] for e in per_role.values()) or 1.0
    for name, entry in per_role.items():
        reasons = entry["reasons"]
        rsum = sum(reasons.values()) or 1.0
        print(f"{name}: {entry['samples']:.0f} samples ({100 * entry['samples'] / total:.1f}% of all)")
        print("  stalls: " + ", ".join(f"{k} {100 * v / rsum:.0f}%" for k, v in reasons.most_common(6)))
        for n, index, text in sorted(entry["top"], reverse=True)[:args.top]:
            if n <= 0:
                break
            print(f"  {n:7.0f} ({100 * n / max(entry['samples'], 1):4.1f}%) #{index:<5d} {text[:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
