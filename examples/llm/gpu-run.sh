#!/usr/bin/env bash
# flashcpp-llm on a GPU machine reached through the device tool: the GGUF (98 MB) is more than one call may carry
# (64 MiB of disk use with the working tree, itself about 20 MiB), so it travels in three parts, in consecutive calls,
# into the ignored folder .llm/ (which stays while the machine is warm); the third call, which carries the last part
# beside the staged binaries, runs the GPU tests, the verification against transformers and the benchmark.
#
#   here:            bash examples/llm/gpu-run.sh split MODEL.gguf        # .llm-part-a/ (42 MB), -b/ (42 MB), -c/
#   here:            bash examples/llm/gpu-run.sh modules BUILD CACHE     # the FlashInfer modules the model needs
#   here:            bash examples/llm/gpu-run.sh stage BUILD CACHE GGUF_WHEEL   # .llm-stage/run.tgz (what `run` needs)
#   device call 1:   bash examples/llm/gpu-run.sh place a                 # carry .llm-part-a
#   device call 2:   bash examples/llm/gpu-run.sh place b                 # carry .llm-part-b
#   device call 3:   bash examples/llm/gpu-run.sh place c && bash examples/llm/gpu-run.sh run OUT_DIR
#                                                    # carry .llm-part-c and .llm-stage: .llm/model.gguf checked
#   (or)             bash examples/llm/gpu-run.sh profile OUT_DIR [OPTIONS] # only a decode step's kernel profile (ncu)
#
# `run` expects build-gpu/bin/flashcpp-llm, build-gpu/tests/llm/test_llm_gpu, .gpu/lib (the libraries they load and
# libtvm_ffi.so), .gpu/modules (the FlashInfer modules the model needs, from `flashcpp build`) and .gpu/wheels (the
# gguf package for transformers' GGUF loader); `stage` packs them from a build tree (BUILD, e.g. build-gpu-full after
# scripts/gpu-prepare.sh), a module cache (CACHE, filled by `modules`) and the gguf wheel into one compressed file
# that `run` unpacks (the loose files are more than one call may carry).
set -euo pipefail
cd "$(dirname "$0")/../.."
readonly model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

# The carried binaries, libraries and modules, and the placed model.
use_carried() {
  test -f .llm/model.gguf || { echo "no .llm/model.gguf: run the three place calls first" >&2; exit 1; }
  # The carried library's links may not travel; the CUDA toolkit's lib64 has cuBLASLt.
  (cd build-gpu && ln -sf libflashcpp.so.0.1.0 libflashcpp.so.0.1 && ln -sf libflashcpp.so.0.1 libflashcpp.so)
  export LD_LIBRARY_PATH="$PWD/build-gpu:$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FLASHCPP_TVM_FFI_LIB="$PWD/.gpu/lib/libtvm_ffi.so" FLASHCPP_OFFLINE=1
  export FLASHCPP_MODULE_PATH="$PWD/.gpu/modules" FLASHCPP_JIT=off FLASHCPP_LLM_MODEL="$PWD/.llm/model.gguf"
  export FLASHCPP_GPU_TESTS=1
}

# The modules SmolLM2 needs (head_dim 64, 9 query and 3 KV heads), for both 16-bit types the engine runs: decode,
# prefill on the Hopper path, and the fa2 prefill kernel that decode attention runs with split-KV off (--decode-unsplit).
llm_module_uris() {
  echo norm page rope sampling silu_and_mul
  local dt
  for dt in f16 bf16; do
    echo "batch_decode_with_kv_cache_dtype_q_${dt}_dtype_kv_${dt}_dtype_o_${dt}_dtype_idx_i32_head_dim_qk_64_head_dim_vo_64_posenc_0_use_swa_False_use_logits_cap_False"
    echo "batch_prefill_with_kv_cache_dtype_q_${dt}_dtype_kv_${dt}_dtype_o_${dt}_dtype_idx_i32_head_dim_qk_64_head_dim_vo_64_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False_sm90"
    echo "batch_prefill_with_kv_cache_dtype_q_${dt}_dtype_kv_${dt}_dtype_o_${dt}_dtype_idx_i32_head_dim_qk_64_head_dim_vo_64_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False"
  done
}

case "${1:-}" in
  modules)
    build=${2:?usage: modules BUILD CACHE}
    cache=${3:?usage: modules BUILD CACHE}
    args=()
    for u in $(llm_module_uris); do args+=(--uri "$u"); done
    FLASHCPP_OFFLINE=1 "$build/bin/flashcpp" build "${args[@]}" --arch 9.0a --cache-dir "$cache" --jobs "$(nproc)"
    ;;
  stage)
    build=${2:?usage: stage BUILD CACHE GGUF_WHEEL}
    cache=${3:?usage: stage BUILD CACHE GGUF_WHEEL}
    wheel=${4:?usage: stage BUILD CACHE GGUF_WHEEL}
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/build-gpu/bin" "$tmp/build-gpu/tests/llm" "$tmp/.gpu/lib" "$tmp/.gpu/modules" "$tmp/.gpu/wheels"
    cp "$build/bin/flashcpp-llm" "$tmp/build-gpu/bin/"
    cp "$build/tests/llm/test_llm_gpu" "$tmp/build-gpu/tests/llm/"
    cp -L "$build/libflashcpp.so.0.1.0" "$tmp/build-gpu/"
    strip --strip-debug "$tmp/build-gpu/bin/flashcpp-llm" "$tmp/build-gpu/tests/llm/test_llm_gpu" "$tmp/build-gpu/libflashcpp.so.0.1.0"
    # Every library they load but the C runtime, CUDA and cuBLASLt (the GPU image has its own).
    ldd "$build/bin/flashcpp-llm" "$build/tests/llm/test_llm_gpu" | awk '$3 ~ /^\// {print $3}' | sort -u |
      grep -v -E '/(libflashcpp|libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas[^/]*)\.so' |
      while read -r lib; do cp -L "$lib" "$tmp/.gpu/lib/"; done
    cp -L build/_deps/apache_tvm_ffi/tvm_ffi/lib/libtvm_ffi.so "$tmp/.gpu/lib/"
    for m in $(llm_module_uris); do
      dir=$(find "$cache/jit" -mindepth 2 -maxdepth 2 -type d -name "$m" | head -1)
      [[ -n $dir ]] || { echo "stage: module $m not in $cache (run: gpu-run.sh modules)" >&2; exit 1; }
      cp -r "$dir" "$tmp/.gpu/modules/"
    done
    cp "$wheel" "$tmp/.gpu/wheels/"
    mkdir -p .llm-stage
    tar czf .llm-stage/run.tgz -C "$tmp" build-gpu .gpu
    du -h .llm-stage/run.tgz
    ;;
  split)
    src=${2:?usage: split MODEL.gguf}
    echo "$model_sha256  $src" | sha256sum -c --quiet
    rm -rf .llm-part-a .llm-part-b .llm-part-c && mkdir -p .llm-part-a .llm-part-b .llm-part-c
    part=42000000  # with the tree's ~20 MiB under a call's 64 MiB; the last part travels beside .llm-stage (~22 MiB)
    copy_part() {  # copy_part NAME SKIP [COUNT]: bytes SKIP.. of the model (COUNT of them, else to the end)
      dd if="$src" of=".llm-part-$1/part" bs=1M iflag=skip_bytes,count_bytes skip="$2" ${3:+count="$3"} status=none
    }
    copy_part a 0 "$part"
    copy_part b "$part" "$part"
    copy_part c "$((2 * part))"
    ;;
  place)
    # Each call adds its part; the model is whole once the parts so far, in order, have its hash.
    p=${2:?usage: place a|b|c}
    [[ $p == [abc] ]] || { echo "place a|b|c" >&2; exit 2; }
    mkdir -p .llm
    cp ".llm-part-$p/part" ".llm/part-$p"
    cat .llm/part-? > .llm/model.gguf.tmp
    if echo "$model_sha256  .llm/model.gguf.tmp" | sha256sum -c --quiet > /dev/null 2>&1; then
      mv .llm/model.gguf.tmp .llm/model.gguf && rm -f .llm/part-?
      echo "placed .llm/model.gguf"
    else
      rm -f .llm/model.gguf.tmp
      have=$(cat .llm/part-? | wc -c)
      if [[ $p == c ]]; then  # the last part: the earlier ones are missing (the machine went back between calls?)
        echo "place c: the parts on this machine ($have bytes) are not the model; place a and b again, then c" >&2
        exit 1
      fi
      echo "placed part $p ($have bytes so far); place the next part in the next call"
    fi
    ;;
  run)
    out=${2:?usage: run OUT_DIR}
    mkdir -p "$out"
    if [[ -f .llm-stage/run.tgz ]]; then tar xzf .llm-stage/run.tgz; fi
    use_carried
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
    failed=0  # every step runs; the call fails at the end if one did
    # LLM_RUN_STEPS picks steps (default all): tests verify verify-bf16 bench variants profile profile-unfused.
    steps=" ${LLM_RUN_STEPS:-tests verify verify-bf16 bench variants profile profile-unfused} "
    has() { [[ $steps == *" $1 "* ]]; }
    if has tests; then build-gpu/tests/llm/test_llm_gpu 2>&1 | tee "$out/test_llm_gpu.txt" || failed=1; fi
    pip_target=/tmp/llm-pydeps
    python3 -m pip install --quiet --no-index --no-deps --target "$pip_target" .gpu/wheels/*.whl
    verify() {  # verify DTYPE DIR
      PYTHONPATH="$pip_target${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 \
        python3 examples/llm/verify/verify.py --model .llm/model.gguf --engine build-gpu/bin/flashcpp-llm \
        --dtype "$1" --out-dir "$2" > "$2/verify.txt" 2>&1
      local rc=$?; grep LLM_VERIFY "$2/verify.txt"; return $rc
    }
    if has verify; then verify f16 "$out" || failed=1; fi
    # bf16 for comparison only: its rounding alone parts from float32 by more than the verification allows (see
    # the transformers_bf16 control in its output).
    if has verify-bf16; then mkdir -p "$out/bf16" && { verify bf16 "$out/bf16" || true; }; fi
    rm -f "$out/logits.f32" "$out/bf16/logits.f32"
    llm=(build-gpu/bin/flashcpp-llm bench --model .llm/model.gguf)
    if has bench; then "${llm[@]}" 2>&1 | tee "$out/bench.txt" || failed=1; fi
    if has variants; then
      { "${llm[@]}" --no-prefill --dtype bf16
        "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 8 --no-pdl --no-persistent-decode
        "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 8 --no-graphs --no-persistent-decode
        "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 8 --no-fused --no-persistent-decode
        "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 8 --decode-unsplit --no-persistent-decode
        "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 2 --decode-batch 4 --no-persistent-decode
        "${llm[@]}" --no-prefill --decode-batch 1 --decode-batch 2 --decode-batch 4; } 2>&1 |
        tee "$out/bench_variants.txt" || failed=1
    fi
    if has profile; then bash "$0" profile "$out" --no-persistent-decode || failed=1; fi  # the 5-kernel step
    if has profile-unfused; then bash "$0" profile "$out/unfused" --no-fused --no-persistent-decode || failed=1; fi
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
  *) sed -n 2,23p "$0" >&2; exit 2 ;;
esac
