# The whole test_mla_gpu on main's build (kit b's head, aeb8728), four shards at once.
k=$(mktemp -d); tar xzf .mla-kit-b.tgz -C $k ./head ./lib ./test_mla_gpu ./golden
export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 FLASHCPP_GOLDEN_DIR=$k/golden LD_LIBRARY_PATH=$k/head:$k/lib
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
for s in 0 1 2 3; do GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout 330 $k/test_mla_gpu > $OUT/tests-$s.txt 2>&1 & done
wait
grep -hE "OK \]|FAILED|SKIPPED \]" $OUT/tests-*.txt | sort | uniq -c | sort -rn | head -40
grep -hE "^\[  (PASSED|FAILED)|tests ran" $OUT/tests-*.txt
