#!/usr/bin/env bash
# The twenty-fourth session's second call on the few-heads FP8 kernel (prepared, not run: no device time was left):
# where its time goes and changes to it, each a build with one patch of this directory (a full diff against main at
# 1d5dd12). Kit y, built here from a configured and built tree (D = docs/gpu-runs/2026-12-07):
#   MLA_VARIANT_FILES='dense_decode_mma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-y \
#     lean=D/twentyfourth-lean.patch pidx=D/twentyfourth-pidx.patch pv2=D/twentyfourth-pidx-vearly.patch \
#     bits=D/twentyfourth-bits.patch st5=D/twentyfourth-st5.patch vearly=D/twentyfourth-vearly.patch \
#     nopv=D/twentyfourth-nopv.patch nos=D/twentyfourth-nos.patch none=D/twentyfourth-none.patch \
#     twogroup=D/twentyfourth-twogroup.patch
# and kit x (main's own build) as twentyfourth-fewheads.sh says. The builds:
#   bits  the e4m3 pairs converted by integer operations (value * 2^-8, exact) instead of cvt.rn.f16x2.e4m3x2
#   st5   five stages instead of four (16 heads)      vearly  V's loads and conversions before the P barrier
#   pidx  the producer loads a tile's first index a tile ahead      pv2  pidx with vearly
#   lean  pv2 with fewer instructions a tile (from the SASS: the conversions' high halves read in place, not shifted;
#         S's ldmatrix addresses as four bases and immediates; V's rows masked only in a partial tile; O's rescale
#         skipped when every factor of the warp is 1): 916 instructions in the 16-head tile loop against 1030
#   twogroup  lean with two groups of 8 warps at 16 heads taking an item's tiles in turn (each its own softmax state,
#         P and O, merged at the item's end; thread 0 issues the copies, a stage refilled once its reader's warps
#         released it): one group's barriers and latencies under the other's work. 128 registers, 12 bytes spilled.
#   nopv  probe: P V skipped (wrong output: time only)      nos   probe: S skipped      none  probe: both skipped
# Kits y and z are packed without pidx, vearly and pv2 (lean carries them) and without their own lib/ and test binary
# (kit x's serve), so that the three (44 MB) and the tree (18 MB) travel in one call's 64 MiB:
#   tar czf .mla-kit-y.tgz .mla-kit-y/{twogroup,lean,bits,st5,nopv,nos,none}
#   tar czf .mla-kit-z.tgz .mla-kit-z/{mixv,mixk,s8,dsplit,dsmixv,dsmovm,dsmovmk}
# One call carrying .mla-kit-x.tgz, .mla-kit-y.tgz and .mla-kit-z.tgz:
#   bash docs/gpu-runs/2026-12-07/twentyfourth-fewheads-probe.sh
# Then, beside each other: CornerCases on kit x with FLASHCPP_MLA_DENSE_KERNEL=mma (its h_q 1 FP8 cases run the
# kernel) and FewHeadsFp8Kernel on `bits` (CORNER=0: neither), FewHeadsFp8Kernel and FlashMLA's dense grid on each
# of $TEST_VARIANTS (default: the two fastest builds of the run), and compute-sanitizer memcheck and racecheck on
# FewHeadsFp8KernelSanitizerCases (main's build and $TEST_VARIANTS). About 4 minutes with CORNER=0 TEST_S=130.
set -u
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d)
tar xzf .mla-kit-x.tgz -C "$k"
tar xzf .mla-kit-y.tgz -C "$k"
x=$k/.mla-kit-x y=$k/.mla-kit-y  # (the kits as tarred here; mla-variants.sh's own tgz has no folder:)
[[ -d $x ]] || { mkdir "$k/x" && tar xzf .mla-kit-x.tgz -C "$k/x" && x=$k/x; }
[[ -d $y ]] || { mkdir "$k/y" && tar xzf .mla-kit-y.tgz -C "$k/y" && y=$k/y; }
# Kit z (twenty-fifth session, when carried; D = docs/gpu-runs/2026-12-07):
#   MLA_VARIANT_FILES='dense_decode_mma_fp8' bash scripts/mla-variants.sh build build-gpu-full .mla-kit-z \
#     mixv=D/twentyfifth-mixv.patch mixk=D/twentyfifth-mixk.patch s8=D/twentyfifth-s8.patch \
#     dsplit=D/twentyfifth-dsplit.patch dsmixv=D/twentyfifth-dsmixv.patch dsmovm=D/twentyfifth-dsmovm.patch \
#     dsmovmk=D/twentyfifth-dsmovmk.patch
#   (twentyfifth-s8mixv.patch, s8 with mixv, is not in the kit: room)
#   mixv / mixk  lean with V's / K's conversions by integer operations (four a pair, exact, value * 2^-8), so that the
#         conversion pipe (16 results a clock an SM, if it has the CUDA guide's rate for most conversions) and the
#         integer pipe share the work
#   s8    lean with every warp computing S for all 32 heads over 8 tokens (32 heads; 16 heads: lean's code): each K
#         byte converted once instead of twice, Q's fragments loaded twice (K conversions a tile 1,536 -> 1,024 warp
#         instructions an SM)      s8mixv  s8 with mixv's V conversions
#   dsplit  s8 with S split by dims: warp w keeps Q's dims [64 w, + 64) in registers (no per-tile reload of Q's
#         fragments, 147 KB of shared-memory reads a tile at 16 heads), writes its partial S of all 64 tokens (fp32)
#         into Q's staging room, and after a third barrier sums its 8 tokens' partials with their scales and RoPE;
#         32 heads in 3 stages. 184 / 224 registers, no spills      dsmixv  dsplit with mixv's V conversions
#   dsmovm  dsplit where at 16 heads V's fragments are K's converted ones (the same bytes: a warp's dims of every
#         token) transposed by movmatrix, kept in registers from S to P V: half the conversions, no V loads or byte
#         permutes (F2FP 178 -> 130, MOVM 64, LDS 119 -> 103 in the kernel's SASS; 221 registers, no spills)
#   dsmovmk  dsmovm with K's conversions by integer operations (mixk's): at 16 heads no conversion on that pipe
z=""
if [[ -f .mla-kit-z.tgz ]]; then
  tar xzf .mla-kit-z.tgz -C "$k"; z=$k/.mla-kit-z
  [[ -d $z ]] || { mkdir "$k/z" && tar xzf .mla-kit-z.tgz -C "$k/z" && z=$k/z; }
fi
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
more=""
for v in ${VARIANTS:-twogroup lean bits st5 nopv nos none}; do more+=" $v=$y/$v/libflashcpp.so"; done
[[ -n $z ]] && for v in ${Z_VARIANTS:-mixv mixk s8 dsplit dsmixv dsmovm dsmovmk}; do more+=" $v=$z/$v/libflashcpp.so"; done
# shellcheck disable=SC2086
FLASHCPP_MLA_DENSE_KERNEL=mma LD_LIBRARY_PATH=$x/lib timeout "${BENCH_S:-200}" python3 bench/flashmla_side_by_side.py \
  --op dense --iters 10 --no-host-time --no-flashinfer --lib "$x/x/libflashcpp.so" --lib-b "$x/x/libflashcpp.so" \
  --lib-b-env FLASHCPP_MLA_DENSE_KERNEL=gather --filter "dense tp" --lib-more $more > "$out/dense.txt" 2>&1
echo "bench exit $?"
grep '^MLA_SUITE' "$out/dense.txt" | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line.split(" ", 1)[1])
    if d["kv"] != "fp8": continue
    print(d["h_q"], "ours", round(d["flashcpp_us"], 1), "gather", round(d.get("flashcpp_b_us", 0), 1),
          "fp8_speedup", round(d.get("fp8_speedup", 0), 3), "copy", round(d["copy_fraction"], 3),
          {k: round(v, 4) for k, v in d.items() if k.endswith("_speedup") or k.endswith("_diff")})'
tail -3 "$out/dense.txt"
if [[ ${CORNER:-1} == 1 ]]; then  # CornerCases takes over 200 s
  LD_LIBRARY_PATH=$x/x:$x/lib FLASHCPP_MLA_DENSE_KERNEL=mma timeout "${TEST_S:-300}" "$x/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.CornerCases' > "$out/tests-corner.txt" 2>&1 &
  LD_LIBRARY_PATH=$y/bits:$x/lib timeout "${TEST_S:-300}" "$x/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.FewHeadsFp8Kernel' > "$out/tests-bits-fewheads.txt" 2>&1 &
fi
# The builds tested: $TEST_VARIANTS, else the two fastest on the FP8 rows (geometric mean of <name>_speedup, a time
# ratio to main's: lower is faster; the probes that skip work excluded), else lean and twogroup.
if [[ -z ${TEST_VARIANTS+x} ]]; then
  TEST_VARIANTS=$(python3 docs/gpu-runs/2026-12-07/fastest-builds.py 2 --exclude nos nopv none < "$out/dense.txt")
  TEST_VARIANTS=${TEST_VARIANTS:-lean twogroup}
  echo "tested builds (the two fastest): $TEST_VARIANTS"
fi
for tv in ${TEST_VARIANTS:-lean twogroup}; do
  vd=$y/$tv; [[ -d $vd ]] || vd=$z/$tv
  LD_LIBRARY_PATH=$vd:$x/lib timeout "${TEST_S:-300}" "$x/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.FewHeadsFp8Kernel' > "$out/tests-$tv-fewheads.txt" 2>&1 &
  LD_LIBRARY_PATH=$vd:$x/lib FLASHCPP_MLA_DENSE_KERNEL=mma timeout "${TEST_S:-300}" "$x/test_mla_gpu" \
    --gtest_filter='MlaGpuDenseDecode.FlashMlaCorrectnessGrid' > "$out/tests-$tv-grid.txt" 2>&1 &
done
# compute-sanitizer on the kernel's small cases (main's build and $TEST_VARIANT), beside the tests (SANITIZE=0: not)
if [[ ${SANITIZE:-1} == 1 ]]; then
  for lib in x ${TEST_VARIANTS:-lean twogroup}; do
    for tool in memcheck racecheck; do
      d=$([[ $lib == x ]] && echo "$x/x" || echo "$y/$lib"); [[ -d $d ]] || d=$z/$lib
      (LD_LIBRARY_PATH=$d:$x/lib timeout "${TEST_S:-300}" compute-sanitizer --tool $tool --error-exitcode 3 \
        "$x/test_mla_gpu" --gtest_filter='MlaGpuDenseDecode.FewHeadsFp8KernelSanitizerCases' \
        > "$out/sanitize-$lib-$tool.txt" 2>&1; echo "exit $?" >> "$out/sanitize-$lib-$tool.txt") &
    done
  done
fi
wait
for f in "$out"/sanitize-*.txt; do echo "== $(basename "$f"): $(tail -1 "$f")"; grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f"; done
for f in "$out"/tests-*.txt; do
  echo "== $(basename "$f"): $(grep -cE '^\[       OK' "$f") ok"
  grep -E '^\[  (PASSED|FAILED)|FAILED \]|Failure' "$f" | head -10
done
