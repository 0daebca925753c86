#!/usr/bin/env bash
# The twenty-sixth session's second call: Nsight Compute on the few-heads FP8 dense decode kernel as landed (1d5061b,
# S split by dims, movmatrix V at 16 heads), FlashMLA's dense suite rows "dense tp" (b 128, s_q 1, s_k 8192) at 16
# and 32 heads, FP8 cache: speed of light, warp states, instruction mix and per-instruction / per-line stall samples.
# Kit (here): MLA_VARIANT_FILES='dense_decode_mma_fp8' bash scripts/mla-variants.sh build build-gpu-full \
#   .mla-kit-prof li@-lineinfo   (the same SASS, with line information; its lib/ serves)
# One call carrying .mla-kit-prof.tgz: bash docs/gpu-runs/2026-12-07/twentysixth-profile.sh
set -u
out=${OUT:-$(mktemp -d)}
k=$(mktemp -d)
tar xzf .mla-kit-prof.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$k/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
for h in 16 32; do
  rep=$k/ncu-h$h
  # the case's FP8 row launches the kernel for its reference check, then the timed runs: the second launch is warm
  timeout 200 ncu --clock-control none --cache-control all -f -o "$rep" -k regex:dense_decode_mma_fp8 \
    --launch-skip 1 --launch-count 1 --import-source yes \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
    --section Occupancy \
    python3 bench/flashmla_side_by_side.py --lib "$k/li/libflashcpp.so" --op dense \
    --filter "dense tp b 128 s_q 1 h_q $h s_k" --iters 2 --no-host-time --no-flashinfer > "$out/ncu-h$h-run.txt" 2>&1
  echo "h$h ncu exit $?"
  ncu -i "$rep.ncu-rep" --page details > "$out/ncu-h$h-details.txt" 2>&1
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$k/sass-h$h.csv" 2>&1
  ncu -i "$rep.ncu-rep" --page source --csv --print-source cuda > "$k/cuda-h$h.csv" 2>&1
  python3 bench/ncu_source_summary.py "$k/sass-h$h.csv" > "$out/ncu-h$h-summary.txt" 2>&1
  tar czf "$out/ncu-h$h-source.tgz" -C "$k" "sass-h$h.csv" "cuda-h$h.csv"
  grep -E "Duration|Throughput|Warp Cycles Per Issued|Issued Ipc|Registers" "$out/ncu-h$h-details.txt" | head -20
  tail -12 "$out/ncu-h$h-summary.txt"
done
