#!/usr/bin/env python3
"""Summarizes `MLA_SUITE` lines of bench/flashmla_side_by_side.py runs, and ranks builds timed in the same runs.

Usage: python3 bench/mla_suite_summary.py FILE[:NAME[,B_NAME]] [FILE[:NAME[,B_NAME]] ...]
NAME labels the file's --lib build (default "main"), B_NAME its --lib-b build (default "b"); its --lib-more builds
keep their names. Prints, per file and op (dense decode per KV format): the cases, the ratio to FlashMLA (its time / ours:
geometric mean, least case, cases at or above 1.0) and each other build's time over the --lib build's (geometric
mean, range) with the largest output difference it had from it. Then, over all files, each build's time over the
first file's --lib build, case by case from the runs that timed both (their geometric mean across runs, so two runs
in opposite library orders cancel the order effect), and each build's ratio to FlashMLA where FlashMLA ran.
"""
import json
import math
import sys
from collections import defaultdict

# The fields that name a case; everything else in a record is a result.
CASE_FIELDS = ("op", "case", "kv", "b", "s_q", "h_q", "d_qk", "topk", "extra_topk", "s_kv", "s_k", "causal",
               "block_size", "extra_block_size", "topk_length", "extra_topk_length")


def gmean(xs):
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def group_of(r):
    return r["op"] + (f" ({r['kv']})" if "kv" in r else "")


def case_key(r):
    return tuple((k, r[k]) for k in CASE_FIELDS if k in r)


def label(key):
    d = dict(key)
    return " ".join(str(v) if k == "case" else f"{k} {v}" for k, v in d.items()
                    if k not in ("op", "kv") and v not in (False, 0))


def builds_of(r, names):
    """{build name: its time in µs} of one record; names: (the --lib build's, the --lib-b build's)."""
    base, b_name = names
    times = {base: r["flashcpp_us"]}
    for k, v in r.items():
        if k.startswith("flashcpp_") and k.endswith("_us") and k != "flashcpp_us":
            name = k[len("flashcpp_"):-len("_us")]
            times[b_name if name == "b" else name] = v
    return times


def field(name, names, suffix):
    """A record's field of build `name` (max_abs_diff, nonfinite_mismatch), b_* for the --lib-b build."""
    return f"{'b' if name == names[1] else name}_{suffix}"


def read(spec):
    path, _, labels = spec.partition(":")
    base, _, b_name = labels.partition(",")
    with open(path) as f:
        recs = [json.loads(line[len("MLA_SUITE "):]) for line in f if line.startswith("MLA_SUITE ")]
    return path, (base or "main", b_name or "b"), [r for r in recs if "flashcpp_us" in r]


def summarize_file(path, names, recs):
    base = names[0]
    print(f"== {path} (--lib: {base})")
    by_group = defaultdict(list)
    for r in recs:
        by_group[group_of(r)].append(r)
    for group, rs in by_group.items():
        line = f"  {group}: {len(rs)} cases"
        ratios = [(r["ratio"], r) for r in rs if "ratio" in r]
        if ratios:
            least = min(ratios, key=lambda x: x[0])
            line += (f"; FlashMLA / ours {gmean(x for x, _ in ratios):.3f}, least {least[0]:.3f} "
                     f"({label(case_key(least[1]))}), {sum(x >= 1.0 for x, _ in ratios)} at or above 1.0")
        print(line)
        others = sorted({n for r in rs for n in builds_of(r, names)} - {base})
        for name in others:
            rel = [builds_of(r, names)[name] / r["flashcpp_us"] for r in rs if name in builds_of(r, names)]
            diff = max((r.get(field(name, names, "max_abs_diff"), 0.0) for r in rs), default=0.0)
            bad = sum(r.get(field(name, names, "nonfinite_mismatch"), 0) for r in rs)
            print(f"    {name} / {base}: {gmean(rel):.4f} (range {min(rel):.3f} - {max(rel):.3f}); output max |diff| "
                  f"{diff:.3g}{f', {bad} non-finite mismatches' if bad else ''}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    runs = [read(spec) for spec in sys.argv[1:]]
    for path, names, recs in runs:
        summarize_file(path, names, recs)
    if len(runs) < 2:
        return
    ref = runs[0][1][0]
    # rel[group][build][case] = [time / ref time in each run that timed both]; vs_fm[group][build][case] likewise.
    rel = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    vs_fm = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for _, names, recs in runs:
        for r in recs:
            times = builds_of(r, names)
            g, key = group_of(r), case_key(r)
            for name, t in times.items():
                if ref in times:
                    rel[g][name][key].append(t / times[ref])
                if "flashmla_us" in r:
                    vs_fm[g][name][key].append(r["flashmla_us"] / t)
    print(f"== all runs: time / {ref}'s time, case by case over the runs that timed both (< 1: faster)")
    for g in rel:
        for name in sorted(rel[g], key=lambda n: (n != ref, n)):
            per_case = [gmean(v) for v in rel[g][name].values()]
            runs_per_case = sorted({len(v) for v in rel[g][name].values()})
            fm = [gmean(v) for v in vs_fm[g][name].values()]
            fm_text = f"; FlashMLA / it {gmean(fm):.3f} (least {min(fm):.3f})" if fm else ""
            print(f"  {g}: {name}: {gmean(per_case):.4f} over {len(per_case)} cases (runs per case {runs_per_case})"
                  f"{fm_text}")


if __name__ == "__main__":
    main()
