#!/usr/bin/env bash
# The twenty-sixth session's next call on the few-heads FP8 kernel: main as landed (1d5061b, `head`) and three builds,
# each one patch of this directory against it, all built with line information (D = docs/gpu-runs/2026-12-07):
#   MLA_VARIANT_FILES='dense_decode_mma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-a1 \
#     head@-lineinfo nob1=D/twentysixth-nob1.patch@-lineinfo qreg=D/twentysixth-qreg.patch@-lineinfo \
#     qnob=D/twentysixth-qnob.patch@-lineinfo
#   nob1  one CTA barrier a tile fewer: each warp publishes its reference (the running max, or its tile maxima if
#         larger) with P relative to it, and after the one barrier every warp scales P's A fragments by each writer's
#         2^(reference - new max) with the tokens' scales; P and the references in two buffers, tiles in turn
#         (254 / 212 registers at 32 / 16 heads, no spills)
#   qreg  16 heads: S by tokens (warp w: tokens [8 w, + 8) over all 576 dims) with all of Q's nope fragments in
#         registers (128), so no partial S and no third barrier; V from shared memory after the P barrier
#         (255 registers, 4 bytes spilled outside the loop)
#   qnob  qreg and nob1: one CTA barrier a tile at 16 heads (255 registers, 28 bytes spilled)
# One call carrying .mla-kit-a1.tgz: bash docs/gpu-runs/2026-12-07/twentysixth-next.sh
# Kit a2 (main at 42bec51, qreg landed, and one build), then KIT=.mla-kit-a2.tgz VARIANTS=p4 PROFILE=0 DURATIONS=1:
#   MLA_VARIANT_FILES='dense_decode_mma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-a2 \
#     head p4=D/twentysixth-p4.patch
#   p4    P stored once per scale tile, each token's P times its scale over the tile's reference (the S warp holds its
#         tokens' scales from S), so that P V reads its tile's P as it is: no per-token scale loads, selects and fp16
#         multiplies in every warp (248 / 225 registers at 16 / 32 heads, no spills)
# Kit a3: head and wg32 (twentysixth-wg32-probes.patch as below, probes off), run with KIT=.mla-kit-a3.tgz
#   VARIANTS=wg32 TEST_VARIANTS=wg32 PROFILE=0: the timing, the tests and the sanitizers on it.
# Kit a4 (the wgmma form at 32 heads, twentysixth-wg32-probes.patch against 1386d3f, and its probes):
#   MLA_VARIANT_FILES='dense_decode_mma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-a4 head \
#     wg32=D/twentysixth-wg32-probes.patch wgnos=D/twentysixth-wg32-probes.patch@-DFLASHCPP_WG_PROBE=1 \
#     wgnopv=D/twentysixth-wg32-probes.patch@-DFLASHCPP_WG_PROBE=2 wgnone=D/twentysixth-wg32-probes.patch@-DFLASHCPP_WG_PROBE=3
#   then KIT=.mla-kit-a4.tgz VARIANTS="wg32 wgnos wgnopv wgnone" TEST_VARIANTS="" PROFILE_BUILDS=wg32 PROFILE_HEADS=32
#   (PROFILE_BUILDS / PROFILE_HEADS: the builds and head counts profiled, default head and $TEST_VARIANTS, 16 and 32)
# Kit a5: head and sticky=D/twentysixth-sticky.patch (each scale tile's reference only grows over an item, so that
#   O's rescale is skipped once it settles), run with KIT=.mla-kit-a5.tgz VARIANTS=sticky TEST_VARIANTS=sticky PROFILE=0.
# Kit a6 (prepared, not run: the session's device time was spent): head (5aef622), w16=D/twentysixth-w16.patch and
#   w16h=D/twentysixth-w16h.patch:
#   w16   32 heads with 16 warps (4 a scheduler, 128 registers, 12 bytes spilled, two reloads a tile): each warp half
#         of an 8-warp warp's work a tile (partial S over 64 dims for 32 tokens; the reduction of one m-tile over 8
#         tokens; P V over 32 dims)
#   w16h  w16's form at 16 heads too (S split by dims, 127 registers, no spills) in place of Q in registers
#   Run: KIT=.mla-kit-a6.tgz VARIANTS="w16 w16h" PROFILE=0 (the tests on the faster, if faster than head).
# DURATIONS=1: Nsight Compute's duration of each kernel of the 16- and 32-head FP8 rows on head (the attention and
# the combine), to place the time between the attention kernel and the whole call.
# FlashMLA's dense suite rows "dense tp" (16 and 32 heads, b 128, s_k 8192) over head, the gather kernels and the
# builds in one process; then the tests (FewHeadsFp8Kernel, FlashMLA's dense grid on the kernel) and compute-sanitizer
# memcheck and racecheck on FewHeadsFp8KernelSanitizerCases for $TEST_VARIANTS (default: the fastest build, if it beats
# head); then (PROFILE=1, default) Nsight Compute on head and that build at 16 and 32 heads. Few files come back:
# device.txt, dense.txt, tests.txt, sanitize.txt, durations.txt, profile.txt and profile-sass.tgz.
set -u
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d)
tar xzf "${KIT:-.mla-kit-a1.tgz}" -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$k/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
variants=${VARIANTS:-nob1 qreg qnob}
more=""
for v in $variants; do more+=" $v=$k/$v/libflashcpp.so"; done
# shellcheck disable=SC2086
timeout "${BENCH_S:-150}" python3 bench/flashmla_side_by_side.py --op dense --iters 10 --no-host-time \
  --no-flashinfer --lib "$k/head/libflashcpp.so" --lib-b "$k/head/libflashcpp.so" \
  --lib-b-env FLASHCPP_MLA_DENSE_KERNEL=gather --filter "dense tp" --lib-more $more > "$out/dense.txt" 2>&1
echo "bench exit $?"
grep '^MLA_SUITE' "$out/dense.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    print(d["h_q"], d["kv"], "head", round(d["flashcpp_us"], 1), "gather", round(d.get("flashcpp_b_us", 0), 1),
          "fp8_speedup", round(d.get("fp8_speedup", 0), 3), "copy", round(d["copy_fraction"], 3),
          {k: round(v, 4) for k, v in d.items() if k.endswith("_speedup") or k.endswith("_diff")})'
if [[ -z ${TEST_VARIANTS+x} ]]; then
  TEST_VARIANTS=$(python3 docs/gpu-runs/2026-12-07/fastest-builds.py 1 --faster-only < "$out/dense.txt")
  echo "tested build (the fastest, if faster than head): ${TEST_VARIANTS:-none}"
fi
for tv in $TEST_VARIANTS; do
  LD_LIBRARY_PATH=$k/$tv:$k/lib timeout "${TEST_S:-200}" "$k/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.FewHeadsFp8Kernel' > "$k/tests-$tv-fewheads.txt" 2>&1 &
  LD_LIBRARY_PATH=$k/$tv:$k/lib FLASHCPP_MLA_DENSE_KERNEL=mma timeout "${TEST_S:-200}" "$k/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.FlashMlaCorrectnessGrid' > "$k/tests-$tv-grid.txt" 2>&1 &
  for tool in memcheck racecheck; do
    (LD_LIBRARY_PATH=$k/$tv:$k/lib timeout "${TEST_S:-200}" compute-sanitizer --tool $tool --error-exitcode 3 \
      "$k/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.FewHeadsFp8KernelSanitizerCases' \
      > "$k/sanitize-$tv-$tool.txt" 2>&1; echo "exit $?" >> "$k/sanitize-$tv-$tool.txt") &
  done
done
wait
for f in "$k"/tests-*.txt; do
  [[ -f $f ]] || continue
  { echo "== $(basename "$f")"; cat "$f"; } >> "$out/tests.txt"
  echo "== $(basename "$f"): $(grep -cE '^\[       OK' "$f") ok"; grep -E '^\[  (PASSED|FAILED)|FAILED \]' "$f" | head -5
done
for f in "$k"/sanitize-*.txt; do
  [[ -f $f ]] || continue
  { echo "== $(basename "$f")"; cat "$f"; } >> "$out/sanitize.txt"
  echo "== $(basename "$f"): $(tail -1 "$f")"; grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f"
done
if [[ ${DURATIONS:-0} == 1 ]]; then
  for h in 16 32; do
    timeout 120 ncu --clock-control none --cache-control all -f -o "$k/dur-h$h" \
      -k 'regex:dense_decode_mma_fp8|combine|dense_decode_plan' --section SpeedOfLight \
      python3 bench/flashmla_side_by_side.py --lib "$k/head/libflashcpp.so" --op dense \
      --filter "dense tp b 128 s_q 1 h_q $h s_k" --iters 2 --no-host-time --no-flashinfer > "$k/dur-run.txt" 2>&1
    echo "durations h$h (ncu exit $?)"
    ncu -i "$k/dur-h$h.ncu-rep" --page raw --csv --metrics gpu__time_duration.sum,launch__grid_size \
      > "$k/dur-h$h.csv" 2>&1
    { echo "==== h$h"; cat "$k/dur-h$h.csv"; } >> "$out/durations.txt"
    python3 -c '
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((r for r in rows if "Kernel Name" in r), None)
if hdr:
    ki, ti = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum")
    for r in rows[rows.index(hdr) + 2:]:
        if len(r) > ti: print("  ", r[ki][:70], r[ti])' "$k/dur-h$h.csv"
  done
fi
if [[ ${PROFILE:-1} == 1 ]]; then
  for b in ${PROFILE_BUILDS:-head $TEST_VARIANTS}; do
    for h in ${PROFILE_HEADS:-16 32}; do
      rep=$k/ncu-$b-h$h
      # the FP8 row launches the kernel for its check, then the timed runs: the second launch is warm
      timeout 150 ncu --clock-control none --cache-control all -f -o "$rep" -k regex:dense_decode_mma_fp8 \
        --launch-skip 1 --launch-count 1 --import-source yes \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats \
        --section SourceCounters --section Occupancy --section MemoryWorkloadAnalysis_Tables \
        python3 bench/flashmla_side_by_side.py --lib "$k/$b/libflashcpp.so" --op dense \
        --filter "dense tp b 128 s_q 1 h_q $h s_k" --iters 2 --no-host-time --no-flashinfer > "$k/ncu-run.txt" 2>&1
      echo "ncu $b h$h exit $?"
      { echo "==== $b h$h"; ncu -i "$rep.ncu-rep" --page details; } >> "$out/profile.txt" 2>&1
      ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$k/sass-$b-h$h.csv" 2>&1
      (root=$PWD && cd "$k" && python3 "$root/bench/ncu_source_summary.py" "sass-$b-h$h.csv") >> "$out/profile.txt" 2>&1
    done
  done
  (cd "$k" && tar czf "$out/profile-sass.tgz" sass-*.csv)
  grep -E "^==== |Duration|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Registers Per" "$out/profile.txt"
fi
