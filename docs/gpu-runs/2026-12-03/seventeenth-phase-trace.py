# Applies to 056cf17 (git apply); traced build: add -DFLASHCPP_MLA_TRACE to the fp8 TU. Driver: seventeenth-phase-trace.py LIB "CASE,..."
# Phase trace of one decode case (a build with -DFLASHCPP_MLA_TRACE): per CTA, clock64 at named points.
import ctypes, sys, statistics, torch
sys.path.insert(0, "bench")
import flashmla_side_by_side as fs
NAMES = {0: "entry", 1: "cluster sync", 2: "P item+idx issued", 3: "P Q issued", 4: "P tile0 L stored",
         5: "P tile0 R sent", 6: "P last tile sent", 7: "P end", 8: "C0 Q full", 9: "C0 tile0 L full",
         10: "C0 S0 done", 11: "C0 PV0 done", 12: "C0 last PV done", 13: "C0 rows written", 14: "C1 rows written", 18: "P max tile0 L stored", 19: "P max tile0 R stored", 20: "P max tile1 L stored", 21: "P tile0 L synced", 22: "P tile0 R synced", 23: "C0 tile0 R full", 24: "C0 tile1 R full", 25: "C0 S1 done", 26: "C0 tile1 L full", 27: "C0 P0 stored", 28: "C1 P0 ready", 29: "C1 PV0 done", 30: "C1 last PV done"}
def main(lib, labels, ghz, runs=5):
    f = fs.Flashcpp(lib)
    fn = f.lib.flashcpp_debug_mla_trace
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for c in fs.decode_cases():
        label = f"{c['name']} b {c['b']}"
        if label not in labels: continue
        inp = fs.decode_inputs(f, c)
        b, s_q, h_q = c["b"], c["s_q"], c["h_q"]
        main_, extra = inp["main"], inp["extra"]
        out = torch.empty((b, s_q, h_q, 512), dtype=torch.bfloat16, device="cuda")
        lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device="cuda")
        ours, split = f.prepare_decode(inp, inp["q"], main_["cache"], main_["indices"], main_["topk_length"], inp["sink"], out,
                                       lse.transpose(1, 2), extra and extra["cache"], extra and extra["indices"], extra and extra["topk_length"])
        per_slot = {}
        buf = (ctypes.c_longlong * (2048 * 32))()
        for r in range(runs + 1):
            flush.fill_(r & 0xff); torch.cuda.synchronize()
            assert fn(None, 0, 1) == 0
            ours(); torch.cuda.synchronize()
            assert fn(ctypes.addressof(buf), ctypes.sizeof(buf), 0) == 0
            if r == 0: continue
            rows = [buf[i * 32:(i + 1) * 32] for i in range(2048)]
            used = [x for x in rows if x[8] != 0]
            allc = [x for x in rows if x[0] != 0]
            g0 = min(x[16] for x in allc)
            cal = [(x[13] - x[0]) / (x[17] - x[16]) for x in used if x[17] > x[16]]
            if cal: ghz = statistics.median(cal)
            per_slot.setdefault("ghz", []).append(ghz)
            per_slot.setdefault("ctas", []).append((len(allc), len(used)))
            per_slot.setdefault("start spread ns", []).append(max(x[16] for x in allc) - g0)
            per_slot.setdefault("last C0 end (globaltimer) ns", []).append(max(x[17] for x in used) - g0)
            for s in NAMES:
                if s == 0: continue
                v = [(x[s] - x[0]) / ghz for x in used if x[s] != 0]
                if v: per_slot.setdefault(s, []).append((statistics.median(v), max(v)))
        print(f"## {label} split {split}; ctas (launched, working) {per_slot['ctas'][0]}; ns from each CTA's entry: median / max over working CTAs, median over {runs} runs")
        print(f"   SM clock from clock64 / globaltimer: {statistics.median(per_slot['ghz']):.3f} GHz")
        print(f"   start spread {statistics.median(per_slot['start spread ns']):.0f} ns; last consumer-0 end after first CTA entry {statistics.median(per_slot['last C0 end (globaltimer) ns']):.0f} ns")
        for s, name in sorted(NAMES.items(), key=lambda kv: statistics.median(x[0] for x in per_slot.get(kv[0], [(0, 0)]))):
            if s in per_slot:
                med = statistics.median(x[0] for x in per_slot[s]); mx = statistics.median(x[1] for x in per_slot[s])
                print(f"   {s:2d} {name:22s} {med:8.0f} {mx:8.0f}")
if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","), float(sys.argv[3]) if len(sys.argv) > 3 else 1.98)
