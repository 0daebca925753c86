#!/usr/bin/env bash
# Prepared in the thirtieth session for the next device time (not run): the pair launch's host time with its tensor map
# cached (thirtieth-next-tmap-cache.patch, `tm`: the map re-encoded only when the cache's address, row count or row
# stride changes, per thread), against main. Kit .mla-kit-t.tgz (ignored):
#   bash scripts/mla-variants.sh build build-gpu-full .mla-kit-t head \
#     tm=docs/gpu-runs/2026-12-07/thirtieth-next-tmap-cache.patch@-DFLASHCPP_EXP_TMAP_CACHE
# Steps: tm's dense tile counts and graph replay (a gate), then the dense suite's 128-head cases with host time on,
# each build as --lib in turn (host_us is --lib's; the kernels are the same, so only host_us should move), FlashMLA's
# package (.flashmla-kit.tgz, ignored) in the same process.
#   bash docs/gpu-runs/2026-12-07/thirtieth-next.sh   (carry .mla-kit-t.tgz and .flashmla-kit.tgz)
set -u
out=${OUT:-$(mktemp -d)}
fm=$(mktemp -d); tar xzf .flashmla-kit.tgz -C "$fm"
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
k=$(mktemp -d); tar xzf .mla-kit-t.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 PYTHONUNBUFFERED=1
LD_LIBRARY_PATH=$k/tm:$k/lib timeout 120 "$k/test_mla_gpu" \
  --gtest_filter='MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$out/gate-tm.txt" 2>&1
grep -q '^\[  PASSED  \] 2 tests' "$out/gate-tm.txt" || { echo "tm failed its gate"; tail -5 "$out/gate-tm.txt"; exit 1; }
for round in 1 2; do
  for n in head tm; do
    LD_LIBRARY_PATH=$k/lib timeout 150 python3 bench/flashmla_side_by_side.py --lib "$k/$n/libflashcpp.so" --op dense \
      --filter "h_q 128 s_k 8192" --iters 10 --no-flashinfer > "$out/dense-$n-$round.txt" 2>&1 || echo "($n exit $?)"
    grep '^MLA_SUITE' "$out/dense-$n-$round.txt" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l[10:])
    print("%s %-5s s_q %d causal %-5s %s: ours %.1f us, host %.1f us (FlashMLA %s)" % (sys.argv[1], r["kv"], r["s_q"],
          r["causal"], r.get("ratio") and "ratio %.3f" % r["ratio"] or "", r["flashcpp_us"], r.get("host_us", 0),
          r.get("flashmla_host_us", "-")))' "$n/$round"
  done
done
