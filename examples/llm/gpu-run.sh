#!/usr/bin/env bash
# flashcpp-llm on a GPU machine reached through the device tool: the GGUF (98 MB) is more than one call may carry
# (64 MiB with the working tree), so it travels in two halves, in two consecutive calls, into the ignored folder .llm/
# (which stays while the machine is warm); a third call runs the GPU tests, the verification against transformers and
# the benchmark.
#
#   here:            bash examples/llm/gpu-run.sh split MODEL.gguf        # .llm-part-a/, .llm-part-b/
#   device call 1:   bash examples/llm/gpu-run.sh place a                 # carry .llm-part-a
#   device call 2:   bash examples/llm/gpu-run.sh place b                 # carry .llm-part-b: .llm/model.gguf checked
#   device call 3:   bash examples/llm/gpu-run.sh run OUT_DIR             # carry build-gpu and .gpu (libs, modules, wheels)
#   (or)             bash examples/llm/gpu-run.sh profile OUT_DIR [OPTIONS] # only a decode step's kernel profile (ncu)
#
# `run` expects build-gpu/bin/flashcpp-llm, build-gpu/tests/llm/test_llm_gpu, .gpu/lib (the libraries they load and
# libtvm_ffi.so),
# .gpu/modules (the FlashInfer modules the model needs, from `flashcpp build`) and .gpu/wheels (the gguf package for
# transformers' GGUF loader).
set -euo pipefail
cd "$(dirname "$0")/../.."
readonly model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

# The carried binaries, libraries and modules, and the placed model.
use_carried() {
  test -f .llm/model.gguf || { echo "no .llm/model.gguf: run the two place calls first" >&2; exit 1; }
  # The carried library's links may not travel; the CUDA toolkit's lib64 has cuBLASLt.
  (cd build-gpu && ln -sf libflashcpp.so.0.1.0 libflashcpp.so.0.1 && ln -sf libflashcpp.so.0.1 libflashcpp.so)
  export LD_LIBRARY_PATH="$PWD/build-gpu:$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FLASHCPP_TVM_FFI_LIB="$PWD/.gpu/lib/libtvm_ffi.so" FLASHCPP_OFFLINE=1
  export FLASHCPP_MODULE_PATH="$PWD/.gpu/modules" FLASHCPP_JIT=off FLASHCPP_LLM_MODEL="$PWD/.llm/model.gguf"
  export FLASHCPP_GPU_TESTS=1
}

case "${1:-}" in
  split)
    src=${2:?usage: split MODEL.gguf}
    echo "$model_sha256  $src" | sha256sum -c --quiet
    rm -rf .llm-part-a .llm-part-b && mkdir -p .llm-part-a .llm-part-b
    half=$(( ($(stat -c %s "$src") + 1) / 2 ))
    head -c "$half" "$src" > .llm-part-a/part
    tail -c +"$((half + 1))" "$src" > .llm-part-b/part
    ;;
  place)
    mkdir -p .llm
    case "${2:?usage: place a|b}" in
      a) cp .llm-part-a/part .llm/part-a ;;
      b) cat .llm/part-a .llm-part-b/part > .llm/model.gguf.tmp
         echo "$model_sha256  .llm/model.gguf.tmp" | sha256sum -c --quiet
         mv .llm/model.gguf.tmp .llm/model.gguf && rm -f .llm/part-a
         echo "placed .llm/model.gguf" ;;
      *) echo "place a|b" >&2; exit 2 ;;
    esac
    ;;
  run)
    out=${2:?usage: run OUT_DIR}
    mkdir -p "$out"
    use_carried
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
    failed=0  # every step runs; the call fails at the end if one did
    build-gpu/tests/llm/test_llm_gpu 2>&1 | tee "$out/test_llm_gpu.txt" || failed=1
    pip_target=/tmp/llm-pydeps
    python3 -m pip install --quiet --no-index --no-deps --target "$pip_target" .gpu/wheels/*.whl
    verify() {  # verify DTYPE DIR
      PYTHONPATH="$pip_target${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 \
        python3 examples/llm/verify/verify.py --model .llm/model.gguf --engine build-gpu/bin/flashcpp-llm \
        --dtype "$1" --out-dir "$2" > "$2/verify.txt" 2>&1
      local rc=$?; grep LLM_VERIFY "$2/verify.txt"; return $rc
    }
    verify f16 "$out" || failed=1
    # bf16 for comparison only: its rounding alone parts from float32 by more than the verification allows (see
    # the transformers_bf16 control in its output).
    mkdir -p "$out/bf16" && { verify bf16 "$out/bf16" || true; }
    rm -f "$out/logits.f32" "$out/bf16/logits.f32"
    llm=(build-gpu/bin/flashcpp-llm bench --model .llm/model.gguf)
    "${llm[@]}" 2>&1 | tee "$out/bench.txt" || failed=1
    { "${llm[@]}" --no-prefill --dtype bf16
      "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 8 --no-pdl
      "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 8 --no-graphs
      "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 8 --no-fused; } 2>&1 | tee "$out/bench_variants.txt" || failed=1
    bash "$0" profile "$out" || failed=1
    bash "$0" profile "$out/unfused" --no-fused || failed=1
    exit "$failed"
    ;;
  profile)
    # One decode step's kernels, each timed alone by Nsight Compute (the prefill step and the first decode steps
    # skipped; step_profile.py cuts one whole step out of the profile). Expects the environment `run` sets.
    out=${2:?usage: profile OUT_DIR [BENCH OPTIONS...]}
    shift 2
    mkdir -p "$out"
    use_carried
    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base --launch-skip 900 \
      --launch-count 700 build-gpu/bin/flashcpp-llm bench --model .llm/model.gguf --no-prefill --decode-batch 1 \
      --steps 10 --no-graphs "$@" > "$out/profile.csv" 2> "$out/ncu.txt"
    python3 examples/llm/step_profile.py "$out/profile.csv" | tee "$out/profile.txt"
    ;;
  *) sed -n 2,17p "$0" >&2; exit 2 ;;
esac
