#!/usr/bin/env bash
# After thirtyfirst-call1.sh's shard 3 was cut by its 400 s limit (thirty-second session): every MLA GPU test but those
# named in DONE (a gtest negative filter), one after another, kit a carried as there. Meant as shard 3's rest, but
# --gtest_list_tests ignores the sharding variables, so the list is the whole suite: DONE names what already passed.
set -u
k=$(mktemp -d)
tar xzf .mla-kit-a.tgz -C "$k"
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden LD_LIBRARY_PATH=$k/head:$k/lib
tests=$("$k/test_mla_gpu" --gtest_list_tests |
  awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}' | paste -sd: -)
echo "tests: $tests"
timeout "${SHARD_S:-500}" "$k/test_mla_gpu" --gtest_filter="$tests-${DONE:-}" 2>&1 |
  grep -E '^\[  (PASSED|FAILED|SKIPPED)|FAILED \]|^\[       OK|^\[  SKIPPED|^\[ RUN'
echo "exit ${PIPESTATUS[0]}"
