#!/usr/bin/env python3
"""Draws the ratio (FlashMLA time / flashcpp time) of every case in `MLA_SUITE` lines as a bar chart.

Usage: python3 bench/plot_mla_suite.py OUT.png FILE [FILE ...]
Each FILE holds the output of bench/flashmla_side_by_side.py; lines that do not start with "MLA_SUITE " are skipped.
Cases appear in file order, decode first, then prefill and dense decode (its bf16 rows, which carry the ratio); the line
at 1.0 is parity.
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(r):
    if r["op"] == "prefill":
        return f"{r['case']} s_kv {r['s_kv'] // 1024}K"
    if r["op"] == "dense_decode":
        return f"{r['case']} b {r['b']} s_q {r['s_q']} h {r['h_q']} s_k {r['s_k'] // 1024}K{' causal' if r['causal'] else ''}"
    extra = f"+{r['extra_topk']}" if r.get("extra_topk") else ""
    return f"{r['case']} b {r['b']} s_q {r['s_q']} h {r['h_q']} d {r['d_qk']} k {r['topk']}{extra}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    recs = []
    for path in sys.argv[2:]:
        with open(path) as f:
            recs += [json.loads(line[len("MLA_SUITE "):]) for line in f if line.startswith("MLA_SUITE ")]
    recs = [r for r in recs if "ratio" in r]
    if not recs:
        sys.exit("no MLA_SUITE line with a ratio")
    recs.sort(key=lambda r: r["op"] != "decode")
    fig, ax = plt.subplots(figsize=(10, 0.28 * len(recs) + 1.5))
    ys = range(len(recs))
    colors = ["tab:green" if r["ratio"] >= 1.0 else ("tab:orange" if r["ratio"] >= 0.95 else "tab:red") for r in recs]
    ax.barh(list(ys), [r["ratio"] for r in recs], color=colors)
    ax.set_yticks(list(ys), [f"{r['op']}: {label(r)}" for r in recs], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    for y, r in zip(ys, recs):
        ax.text(r["ratio"] + 0.01, y, f"{r['ratio']:.2f}", va="center", fontsize=6)
    for op in ("decode", "prefill", "dense_decode"):
        rs = [r["ratio"] for r in recs if r["op"] == op]
        if rs:
            gm = math.exp(sum(map(math.log, rs)) / len(rs))
            ax.plot([], [], " ", label=f"{op}: geometric mean {gm:.3f} ({len(rs)} cases)")
    ax.legend(loc="lower right", fontsize=7)
    ax.set_xlabel("FlashMLA time / flashcpp time (same process, same tensors; > 1: flashcpp faster)")
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    main()
