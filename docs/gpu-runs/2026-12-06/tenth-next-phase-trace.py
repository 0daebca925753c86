# Phase trace of decode cases on a build with tenth-next-phase-trace.patch (-DFLASHCPP_MLA_TRACE): per CTA, clock64
# at named points, L2 flushed (256 MiB) before each of RUNS eager calls; medians over the working CTAs.
# Usage (repository root, GPU machine): python3 docs/gpu-runs/2026-12-06/tenth-next-phase-trace.py LIB "V4 config 2 b 2,V3.2 b 1"
import ctypes, statistics, sys

import torch

sys.path.insert(0, "bench")
import flashmla_side_by_side as fs  # noqa: E402

NAMES = {1: "barriers ready", 2: "P item+idx issued", 3: "P Q issued", 4: "P tile0 L stored", 5: "P tile0 R published",
         6: "P last tile published", 7: "P end", 8: "C0 Q full", 9: "C0 tile0 L full",
         10: "C0 S0 done", 11: "C0 PV0 done", 12: "C0 last PV done", 13: "C0 rows written", 14: "C1 rows written"}


def main(lib, labels, runs=5):
    f = fs.Flashcpp(lib)
    fn = f.lib.flashcpp_debug_mla_trace
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    buf = (ctypes.c_longlong * (2048 * 32))()
    for c in fs.decode_cases():
        label = f"{c['name']} b {c['b']}"
        if label not in labels:
            continue
        inp = fs.decode_inputs(f, c)
        out = torch.empty((c["b"], c["s_q"], c["h_q"], 512), dtype=torch.bfloat16, device="cuda")
        lse = torch.empty((c["b"], c["h_q"], c["s_q"]), dtype=torch.float32, device="cuda")
        ours, split = fs.prepare_ours(f, inp, out, lse)
        stats = {}
        for r in range(runs + 1):
            flush.fill_(r & 0xFF)
            torch.cuda.synchronize()
            assert fn(None, 0, 1) == 0
            ours()
            torch.cuda.synchronize()
            assert fn(ctypes.addressof(buf), ctypes.sizeof(buf), 0) == 0
            if r == 0:
                continue  # the first call loads the module
            rows = [buf[i * 32:(i + 1) * 32] for i in range(2048)]
            launched = [x for x in rows if x[0] != 0]
            used = [x for x in rows if x[8] != 0]
            g0 = min(x[16] for x in launched)
            ghz = statistics.median((x[13] - x[0]) / (x[17] - x[16]) for x in used if x[17] > x[16])
            stats.setdefault("ghz", []).append(ghz)
            stats.setdefault("ctas", []).append((len(launched), len(used)))
            stats.setdefault("spread", []).append(max(x[16] for x in launched) - g0)
            stats.setdefault("end", []).append(max(x[17] for x in used) - g0)
            for s in NAMES:
                v = [(x[s] - x[0]) / ghz for x in used if x[s] != 0]
                if v:
                    stats.setdefault(s, []).append((statistics.median(v), max(v)))
        print(f"## {label} split {split}; CTAs (launched, working) {stats['ctas'][0]}; ns after each CTA's entry, "
              f"median / max over working CTAs, median over {runs} runs")
        print(f"   SM clock {statistics.median(stats['ghz']):.3f} GHz; entry spread {statistics.median(stats['spread']):.0f}"
              f" ns; last consumer-0 end {statistics.median(stats['end']):.0f} ns after the first entry")
        order = sorted((s for s in NAMES if s in stats), key=lambda s: statistics.median(x[0] for x in stats[s]))
        for s in order:
            med = statistics.median(x[0] for x in stats[s])
            mx = statistics.median(x[1] for x in stats[s])
            print(f"   {s:2d} {NAMES[s]:22s} {med:8.0f} {mx:8.0f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]) if len(sys.argv) > 3 else 5)
