#!/usr/bin/env python3
"""Reduces Nsight Compute source-counter exports to what they say about each kernel's code and stalls.

Input: the CSV of `ncu -i REPORT --page source --csv --print-source sass` for a report collected with
`--section SourceCounters` (and `--section WarpStateStats`). Per kernel (the first launch of each name):
  - SASS instructions, distinct instructions executed (the code a cold start fetches, in KB at 16 B each),
    instructions executed in all;
  - warp stall samples and the share of each stall reason (the top ten).
With --lines SASS (nvdisasm -g of the same kernel built with -lineinfo; its SASS must match the profiled one,
instruction for instruction), --function (a substring of its mangled name there) and --kernel (a substring of its
demangled name in the CSV), it also attributes executed instructions and stall samples
to source lines, and barrier / long-scoreboard stalls at wait sites to the nearest enclosing line of the files
named by --context (the warp role: which consumer or producer phase waited).

Used for docs/PERFORMANCE.md, "The code-footprint hypothesis tested" (2026-12-05): our sparse decode and prefill
kernels against FlashMLA's, on FlashMLA's suite cases (bench/flashmla_side_by_side.py --profile-order for decode).
"""
import argparse
import collections
import csv
import re
import sys


def kernels_of(path):
    """[(kernel name, [row dicts])] in file order: each kernel's block starts with a "Kernel Name" row."""
    kernels, header = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                kernels.append((row[1], []))
                header = None
            elif row[0] == "Address":
                header = row
            elif header and kernels:
                kernels[-1][1].append(dict(zip(header, row)))
    return kernels


def num(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def short_name(name):
    base = name.split("(")[0]
    base = re.sub(r"<.*", "", base)
    return base.split("::")[-1] if "::" in base else base


def summary(name, rows):
    executed = [r for r in rows if num(r.get("Instructions Executed")) > 0]
    reasons = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h] if rows else []
    totals = {r: sum(num(x[r]) for x in rows) for r in reasons}
    samples = sum(totals.values())
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:10]
    print(f"{short_name(name)}: {len(rows)} SASS instructions, {len(executed)} distinct executed "
          f"({len(executed) * 16 / 1024:.1f} KB), {sum(num(r.get('Instructions Executed')) for r in rows):.0f} executed; "
          f"{samples:.0f} stall samples: " + " ".join(f"{r[6:]} {100 * v / max(samples, 1):.1f}%" for r, v in top))


def source_lines(sass_path, kernel):
    """[(offset, (file, line))] of the function whose name contains `kernel`, from nvdisasm -g output."""
    seq, current, inside = [], None, False
    for line in open(sass_path):
        if line.startswith(".text."):
            inside, current = kernel in line, None
            continue
        if not inside:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            current = (m.group(1).rsplit("/", 1)[-1], int(m.group(2)))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/", line)
        if m and current:
            seq.append((int(m.group(1), 16), current))
    return seq


def attribute(rows, seq, context_files, top):
    where = dict(seq)
    enclosing, last = {}, None
    for offset, src in seq:
        if src[0] in context_files:
            last = src
        enclosing[offset] = last
    base = int(rows[0]["Address"], 16)
    executed, stalls, waits = collections.Counter(), collections.Counter(), collections.Counter()
    total_exec = total_samples = 0.0
    for r in rows:
        offset = int(r["Address"], 16) - base
        src = where.get(offset, ("?", 0))
        e, s = num(r.get("Instructions Executed")), num(r.get("Warp Stall Sampling (All Samples)"))
        executed[src] += e
        stalls[src] += s
        total_exec += e
        total_samples += s
        waited = num(r.get("stall_barrier")) + num(r.get("stall_long_sb"))
        if waited:
            waits[(src, enclosing.get(offset))] += waited
    print("instructions executed by source line:")
    for src, v in executed.most_common(top):
        print(f"  {100 * v / max(total_exec, 1):5.1f}%  {src[0]}:{src[1]}")
    print("stall samples by source line:")
    for src, v in stalls.most_common(top):
        print(f"  {100 * v / max(total_samples, 1):5.1f}%  {src[0]}:{src[1]}")
    print("barrier + long-scoreboard stalls by site, with the enclosing line of the --context files:")
    for (src, ctx), v in waits.most_common(top):
        ctx_text = f"{ctx[0]}:{ctx[1]}" if ctx else "?"
        print(f"  {100 * v / max(total_samples, 1):5.1f}%  {src[0]}:{src[1]}  in {ctx_text}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--lines", help="nvdisasm -g output of the kernel built with -lineinfo")
    ap.add_argument("--kernel", help="substring of the demangled kernel name in the CSV to attribute")
    ap.add_argument("--function", help="substring of its mangled name in --lines")
    ap.add_argument("--context", nargs="*", default=["sparse_attention_wgmma_consumer.cuh",
                                                     "sparse_attention_wgmma_producer.cuh"],
                    help="source files whose lines name the warp role around a wait")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    for path in args.csv:
        print(f"== {path}")
        seen = set()
        for name, rows in kernels_of(path):
            if name in seen or not rows:
                continue
            seen.add(name)
            summary(name, rows)
        if args.lines and args.kernel and args.function:
            matching = [(n, r) for n, r in kernels_of(path) if args.kernel in n and r]
            if not matching:
                print(f"no kernel named like {args.kernel!r} in {path}", file=sys.stderr)
                continue
            seq = source_lines(args.lines, args.function)
            if len(seq) != len(matching[0][1]):
                print(f"warning: {len(seq)} instructions in {args.lines}, {len(matching[0][1])} profiled: the builds "
                      "differ, attribution is unreliable", file=sys.stderr)
            attribute(matching[0][1], seq, set(args.context), args.top)


if __name__ == "__main__":
    main()
