#!/usr/bin/env python3
"""Where a persistent decode step's time goes, from decode_step_bench --trace (an experiment build).

usage: decode_step_trace.py TRACE_FILE [LAYERS]

The file holds, per step size (1, 2, 4 tokens), u64 globaltimer values [phase][start, marks 1-4, end][block]: a phase
starts for a block when its barrier wait returns and ends when the block arrives; the marks are points inside the phase
(decode_step.cu lists them; 0: not reached by the block's first warp). Per kind of phase, mean over layers, in µs:
span (first start to last arrival), the slowest block's work and the median block's, the barrier after the phase (the
last arrival to the first start of the next phase) and the spread of those starts; then, for the block that arrives
last, its marks and its arrival after its own start.
"""
import sys

import numpy as np

KINDS = ["qkv", "attention", "o", "gate_up", "down"]
SLOTS = 6


def main(path, layers):
    raw = np.fromfile(path, dtype=np.uint64).astype(np.int64)
    phases = 5 * layers + 1
    blocks = raw.size // (3 * SLOTS * phases)  # three step sizes
    per_step = SLOTS * phases * blocks
    for k, tokens in enumerate((1, 2, 4)):
        a = raw[k * per_step:(k + 1) * per_step].reshape(phases, SLOTS, blocks)
        start, end = a[:, 0, :], a[:, SLOTS - 1, :]
        ticks = np.diff(np.unique(a[a > 0]))
        total = (end[-1].max() - start[0].min()) / 1e3
        print(f"## tokens {tokens}: {total:.1f} us from the first start to the last arrival ({blocks} blocks; "
              f"smallest timer step {ticks[ticks > 0].min()} ns)")
        print(f"{'phase':10s} {'span':>7s} {'slowest':>7s} {'median':>7s} {'barrier':>7s} {'spread':>7s} |"
              f" last block: {'m1':>5s} {'m2':>5s} {'m3':>5s} {'m4':>5s} {'end':>5s}  (us)")
        rows = {}
        for p in range(phases):
            kind = "lm_head" if p == phases - 1 else KINDS[p % 5]
            work = (end[p] - start[p]) / 1e3
            span = (end[p].max() - start[p].min()) / 1e3
            if p + 1 < phases:
                barrier = (start[p + 1].min() - end[p].max()) / 1e3
                spread = (start[p + 1].max() - start[p + 1].min()) / 1e3
            else:
                barrier = spread = 0.0
            last = int(end[p].argmax())
            marks = [(a[p, s, last] - start[p, last]) / 1e3 if a[p, s, last] > 0 else np.nan for s in range(1, SLOTS)]
            rows.setdefault(kind, []).append([span, work.max(), float(np.median(work)), barrier, spread] + marks)
        sums = np.zeros(5)
        for kind in KINDS + ["lm_head"]:
            m = np.nanmean(np.array(rows[kind], dtype=float), axis=0)
            n = len(rows[kind])
            sums += m[:5] * n
            print(f"{kind:10s} " + " ".join(f"{v:7.2f}" for v in m[:5]) + " |             " +
                  " ".join(f"{v:5.2f}" for v in m[5:]) + f"   x{n}")
        print(f"{'all':10s} {sums[0]:7.1f} {'':7s} {'':7s} {sums[3]:7.1f}   (sums of span and barrier)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30)
