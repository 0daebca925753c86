#!/usr/bin/env bash
# The thirty-third session's third call: FlashMLA's dense-decode suite with our bf16 decode also planned for other
# SM counts (the split schedule's parts: SM count / (s_q x head groups)), every plan and FlashMLA in one rotation on
# the same tensors (`--num-sms`, contenders flashcpp_sms<n>_us). Carry .mla-kit-n.tgz (thirtythird-call1.sh) and
# .flashmla-kit.tgz (the package the first call returned):
#   bash docs/gpu-runs/2026-12-07/thirtythird-call3.sh
set -u
out=${OUT:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
k=$(mktemp -d)
tar xzf .mla-kit-n.tgz -C "$k" && tar xzf .flashmla-kit.tgz -C "$k"
export PYTHONPATH=$k/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH} FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$k/head:$k/lib
timeout "${DENSE_S:-400}" python3 bench/flashmla_side_by_side.py --lib "$k/head/libflashcpp.so" --op dense --iters 10 \
  --no-host-time --no-flashinfer --num-sms ${NUM_SMS:-264 198 152 120 100} > "$out/dense-num-sms.txt" 2>&1 ||
  echo "(exit $?)"
grep '^MLA_SUITE' "$out/dense-num-sms.txt" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l[10:])
    if r.get("kv") != "bf16":
        continue
    sms = sorted((k for k in r if k.startswith("sms") and k.endswith("_speedup")), key=lambda k: int(k[3:-8]))
    print("%-9s s_q %d h_q %3d s_k %5d causal %-5s ours %8.1f FlashMLA / ours %.3f | " % (
        r["case"], r["s_q"], r["h_q"], r["s_k"], r["causal"], r["flashcpp_us"], r.get("ratio") or 0) +
        " ".join("%s %.3f (diff %.1e)" % (k[:-8], r[k], r[k[:-8] + "_max_abs_diff"]) for k in sms))
'
tail -2 "$out/dense-num-sms.txt"
