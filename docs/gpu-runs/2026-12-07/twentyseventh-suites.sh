#!/usr/bin/env bash
# The twenty-seventh session's refresh of FlashMLA's three suites beside main, in one process on the same tensors:
# main's MLA kernels (kit s: main's stripped library, test binary and golden cases, as nineteenth-call3-suite.sh says)
# and FlashMLA main@9241ae3's Python package built on the CPU machine (kit .flashmla-kit.tgz, ignored; never
# committed: the flash_mla package and its extension for sm_90a, built against the GPU image's torch version; its
# BUILD.txt says how). One device call carrying both kits:
#   bash docs/gpu-runs/2026-12-07/twentyseventh-suites.sh
# OPS (default "decode prefill dense"; also prefill_fp8), ITERS (10), and per-op limits DECODE_S / PREFILL_S / DENSE_S /
# PREFILL_FP8_S (s). Each op's
# output comes back as <op>.txt (MLA_SUITE lines), and summary.txt has one line a case (ratio = FlashMLA / ours).
set -u
out=${OUT:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
k=$(mktemp -d)
tar xzf .mla-kit-s.tgz -C "$k"
tar xzf .flashmla-kit.tgz -C "$k"
export PYTHONPATH=$k/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$k/.mla-kit-s/head:$k/.mla-kit-s/lib
python3 -c 'import torch, flash_mla; print("flash_mla from", flash_mla.__file__.rsplit("/", 2)[-2], "torch", torch.__version__)' 2>&1 |
  tail -3 | tee -a "$out/device.txt"
lib=$k/.mla-kit-s/head/libflashcpp.so
for op in ${OPS:-decode prefill dense}; do
  case $op in decode) lim=${DECODE_S:-170} ;; prefill) lim=${PREFILL_S:-200} ;; prefill_fp8) lim=${PREFILL_FP8_S:-200} ;;
  *) lim=${DENSE_S:-170} ;; esac
  echo "== $op (limit $lim s)"
  timeout "$lim" python3 bench/flashmla_side_by_side.py --lib "$lib" --op "$op" --iters "${ITERS:-10}" --no-flashinfer \
    > "$out/$op.txt" 2>&1 || echo "   ($op exit $?)"
  grep -v '^MLA_SUITE' "$out/$op.txt" | tail -3
done
cat "$out"/{decode,prefill,dense}.txt 2>/dev/null | grep '^MLA_SUITE' | python3 -c '
import json, math, sys
rows = [r for r in (json.loads(l[10:]) for l in sys.stdin) if "flashcpp_us" in r]
by = {}
for r in rows:
    ratio = r.get("ratio")
    tag = "%s %s" % (r["op"], r.get("kv", ""))
    print("%-20s %-44s ours %9.1f  FlashMLA %9s  ratio %6s  host %s / %s" % (tag, r["case"] + " " + " ".join(
        "%s %s" % (k, r[k]) for k in ("b", "s_q", "h_q", "s_k", "s_kv", "topk") if k in r), r["flashcpp_us"],
        "%.1f" % r["flashmla_us"] if r.get("flashmla_us") else "-", "%.3f" % ratio if ratio else "-",
        "%.1f" % r["host_us"] if r.get("host_us") else "-",
        "%.1f" % r["flashmla_host_us"] if r.get("flashmla_host_us") else "-"))
    if ratio: by.setdefault(tag, []).append(ratio)
for tag, v in by.items():
    print("%s: %d cases, geometric mean %.3f, least %.3f" % (tag, len(v), math.exp(sum(map(math.log, v)) / len(v)), min(v)))
' | tee "$out/summary.txt" | tail -8
