#!/usr/bin/env bash
# The twenty-ninth session's first call. Kit .mla-kit-b9.tgz (ignored): main at ce51b10 (`head`, the landed pair
# cluster) and four builds of twentyninth-whole.patch (D = docs/gpu-runs/2026-12-07, P = D/twentyninth-whole.patch):
#   bash scripts/mla-variants.sh build build-gpu-full .mla-kit-b9 head nm=P@-DFLASHCPP_EXP_WHOLE=1 \
#     nmf=P@-DFLASHCPP_EXP_WHOLE=2 pab=P@-DFLASHCPP_EXP_ATOM_BARS=1 "pabnm=P@-DFLASHCPP_EXP_ATOM_BARS=1 -DFLASHCPP_EXP_WHOLE=1"
#   nm     the pair cluster's consumers skip the mask on a whole dense tile (the producer flags its slots 2), as
#          FlashMLA masks only a token's last blocks
#   nmf    nm, and in the pair cluster S stays unscaled: the row maxima are scaled, each exponent one FFMA
#   pab    the pair cluster's tiles get a full barrier per atom (9 a tile), on which a whole tile's TMA box
#          completes, and the S GEMMs wait per atom (FlashMLA's dense kernel waits per 64 columns); the half barriers
#          carry only the producer's arrivals then
#   pabnm  pab and nm
# with FlashMLA's package (.flashmla-kit.tgz, ignored, never committed; twentyseventh-next.sh says how it was built).
# Steps: the three builds on FlashMLA's dense suite beside FlashMLA (both orders); an Nsight Compute profile of head's
# pair cluster beside FlashMLA's dense kernel (b 128, s_q 2, h_q 128, s_k 8K; per-instruction source counters); then
# the dense tests owed since the twenty-eighth session on head, nmf's dense grid, pabnm's grid, tile counts and
# graph replay, and compute-sanitizer on the graph replay (memcheck and racecheck on head, racecheck on pabnm).
#   bash docs/gpu-runs/2026-12-07/twentyninth-call1.sh      (carry .mla-kit-b9.tgz and .flashmla-kit.tgz)
# Under $OUT: device.txt, dense-summary.txt and raw.tgz (mla-variants.sh run), prof.tgz, tests.tgz.
set -u
out=${OUT:-$(mktemp -d)}
fm=$(mktemp -d)
tar xzf .flashmla-kit.tgz -C "$fm"
export PYTHONPATH=$fm/.flashmla-kit${PYTHONPATH:+:$PYTHONPATH}
OUT=$out MLA_VARIANTS_BUDGET_S=${TIME_S:-170} bash scripts/mla-variants.sh run .mla-kit-b9.tgz dense head nm nmf pab pabnm -- none
mkdir -p "$out/prof"
OUT=$out/prof MLA_VARIANTS_BUDGET_S=${PROF_S:-120} MLA_VARIANTS_NCU_LAUNCHES=4 bash scripts/mla-variants.sh profile \
  .mla-kit-b9.tgz head dense "dense b 128 s_q 2 h_q 128 s_k 8192 causal False" | tail -5
(cd "$out" && tar czf prof.tgz prof && rm -rf prof)
k=$(mktemp -d)
tar xzf .mla-kit-b9.tgz -C "$k"
t=$(mktemp -d)
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 LD_LIBRARY_PATH=$k/head:$k/lib
T=${TEST_S:-240}
b=$k/test_mla_gpu
timeout "$T" "$b" --gtest_filter='MlaGpuDenseDecode.*:-MlaGpuDenseDecode.FlashMlaCorrectnessGrid' > "$t/tests-head.txt" 2>&1 &
LD_LIBRARY_PATH=$k/nmf:$k/lib timeout "$T" "$b" --gtest_filter='MlaGpuDenseDecode.FlashMlaCorrectnessGrid' \
  > "$t/tests-nmf.txt" 2>&1 &
LD_LIBRARY_PATH=$k/pabnm:$k/lib timeout "$T" "$b" --gtest_filter='MlaGpuDenseDecode.FlashMlaCorrectnessGrid:MlaGpuDenseDecode.EveryTileCountAndCut:MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' \
  > "$t/tests-pabnm.txt" 2>&1 &
LD_LIBRARY_PATH=$k/pabnm:$k/lib timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 "$b" \
  --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$t/racecheck-pabnm.txt" 2>&1 &
( for tool in memcheck racecheck; do
    timeout 115 compute-sanitizer --tool $tool --error-exitcode 3 "$b" \
      --gtest_filter='MlaGpuDenseDecode.CudaGraphReplayWithNewLengths' > "$t/$tool.txt" 2>&1
    echo "$tool exit $?" >> "$t/$tool.txt"
  done ) &
wait
for f in tests-head tests-nmf tests-pabnm memcheck racecheck racecheck-pabnm; do
  echo "== $f"; grep -E '^\[  (PASSED|FAILED)|FAILED \]|^\[       OK|exit|SUMMARY' "$t/$f.txt" | tail -14
done
for f in racecheck racecheck-pabnm; do
  echo "$f: hazards in the sparse kernel (pair cluster included): $(grep -c 'Race reported.*sparse_attention_wgmma' "$t/$f.txt")"
done
(cd "$t" && tar czf "$out/tests.tgz" .)
