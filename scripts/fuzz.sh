#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang, ASan + UBSan) in build-fuzz/ and runs each for N seconds
# from its committed seed corpus. Fails on any crash, sanitizer report, leak, timeout or out-of-memory.
#   scripts/fuzz.sh [seconds per harness, default 30] [harness names...; default all]
# Environment: FLASHCPP_DEPS_DIR (the unpacked pinned wheels, default build/_deps), FUZZ_JOBS (build jobs),
# FUZZ_RUNS (instead of a time limit: that many inputs per harness from seed 1, a reproducible run; CI uses it).
# New inputs go to build-fuzz/corpus/<name>/, crashing inputs to build-fuzz/artifacts/ (docs/FUZZING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
export PATH="$PATH:/usr/local/cuda/bin"

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DFLASHCPP_FUZZ=ON -DFLASHCPP_BUILD_TESTS=OFF -DFLASHCPP_BUILD_BENCH=OFF \
  -DFLASHCPP_BUILD_EXAMPLES=OFF -DFLASHCPP_DEPS_DIR="${FLASHCPP_DEPS_DIR:-$PWD/build/_deps}" >/dev/null
cmake --build build-fuzz -j "${FUZZ_JOBS:-$(nproc)}" --target fuzz_harnesses

limit=(-max_total_time="$seconds")
[ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS" -seed=1)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=($(ls tests/fuzz/corpus))
mkdir -p build-fuzz/artifacts
failed=()
for name in "${harnesses[@]}"; do
  work=build-fuzz/corpus/$name
  mkdir -p "$work"
  echo "== fuzz_$name: ${limit[*]}"
  # The first corpus directory receives new inputs; the committed seeds stay as they are.
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      build-fuzz/tests/fuzz/fuzz_"$name" "$work" "tests/fuzz/corpus/$name" "${limit[@]}" -timeout=20 \
      -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name-" \
      2>build-fuzz/fuzz_"$name".log; then
    tail -n 60 build-fuzz/fuzz_"$name".log
    failed+=("$name")
  fi
  grep -a -E "^stat::(number_of_executed_units|peak_rss_mb)|^Done" build-fuzz/fuzz_"$name".log || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]} (inputs in build-fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzzing: ${#harnesses[@]} harnesses ran (${limit[*]}) without a finding"
