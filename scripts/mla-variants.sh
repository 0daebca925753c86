#!/usr/bin/env bash
# Kernel experiments ranked in one device call: builds of libflashcpp whose MLA kernel translation units
# (src/mla/*wgmma*.cu) are recompiled with a patch and/or extra nvcc flags, timed side by side with the unchanged
# build (and FlashMLA, when its package is importable there) on the same tensors in one process
# (bench/flashmla_side_by_side.py --lib-more), then their MLA GPU tests.
#
# On the CPU machine, from a configured and built tree of HEAD (e.g. build-gpu-full, with compile_commands.json):
#   bash scripts/mla-variants.sh build BUILD_DIR KIT_DIR SPEC...
#     SPEC is NAME (BUILD_DIR's own library), NAME=PATCH, NAME@FLAGS or NAME=PATCH@FLAGS, e.g.
#     head  pf=docs/gpu-runs/2026-12-05/seventh-next-l2-prefetch.patch@-DFLASHCPP_EXP_L2_PREFETCH=2
#   MLA_VARIANT_FILES (a Python regular expression on the file names under src/mla, .cu and .cpp, default "wgmma")
#   picks the translation units a variant recompiles, e.g. 'wgmma|combine|simple|mma_sm90' for a patch to the
#   combine, or 'mla_decode\.cpp|wgmma' for one to the decode launches too.
#   Writes KIT_DIR/<NAME>/ (stripped libraries), KIT_DIR/lib (their non-system dependencies), test_mla_gpu, the
#   golden data when FLASHCPP_GOLDEN_DIR names it, FlashMLA's Python package when FLASHMLA_PKG names a built one
#   (this script never builds it), and KIT_DIR.tgz to carry (a device call carries 64 MiB at most).
# On the GPU machine, with the kit carried:
#   bash scripts/mla-variants.sh run KIT_TGZ OPS BASE NAME... [-- GTEST_FILTER]   (default MlaGpuPrefill.*:MlaGpuDecode*;
#     none: no tests)
#     OPS: comma-separated ops of flashmla_side_by_side.py (decode, prefill, dense); each is timed twice, BASE first
#     and then the last NAME first (the order effect), FlashMLA in turn when present; bench/mla_suite_summary.py
#     ranks the builds over both runs. Under $OUT: device.txt, one <op>-summary.txt per op and raw.tgz (every run's
#     and test's output, repacked after each step), so that a call the device tool stops at its limit still returns
#     what ran, in few files (it returns at most 8). A step that would start with under 20 s of MLA_VARIANTS_BUDGET_S
#     (default 540) left is skipped, and each step's timeout is cut to what is left.
#     MLA_VARIANTS_GATE (a gtest filter, e.g. 'MlaGpuDenseDecode.EveryTileCountAndCut'): first every NAME's tests of
#     it, all at once (MLA_VARIANTS_GATE_S each, default 90); a build that fails, hangs or runs no test is not timed.
#   bash scripts/mla-variants.sh profile KIT_TGZ NAME OP CASE [-- ARGS...]
#     Nsight Compute on one case of flashmla_side_by_side.py (OP; CASE: its --filter, e.g. "dense b 128 s_q 2 h_q
#     128 s_k 8192 causal False"), build NAME with FlashMLA in the same process: every launch of FlashMLA's and our sm90
#     MLA kernels (speed of light, compute and memory workload, warp states, scheduler, instruction mix, occupancy,
#     per-instruction source counters, the memory chart: L1 / L2 hit rates and bytes between the units), clocks left
#     alone, caches flushed. ARGS go to flashmla_side_by_side.py, @KIT@
#     standing for the unpacked kit (e.g. --lib-env FLASHCPP_MLA_DENSE_KERNEL=gather --lib-b @KIT@/head/libflashcpp.so).
#     Under $OUT: ncu-details.txt, ncu-source.csv.gz, ncu-summary.txt (bench/ncu_source_summary.py), ncu-run.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

die() { echo "mla-variants: $*" >&2; exit 2; }

# One variant library: the MLA objects (src/mla/*.cu and *.cpp whose names match MLA_VARIANT_FILES, a Python regular
# expression, default "wgmma") recompiled (patch applied to the working tree for the compile, then
# reverted) and linked with BUILD_DIR's other objects.
build_variant() {
  local build=$1 out=$2 patch=$3 flags=$4
  local obj=$out/obj
  mkdir -p "$obj"
  if [[ -n $patch ]]; then
    git apply --check "$patch" || die "$patch does not apply to the working tree"
    git apply "$patch"
    applied_patch=$patch
  fi
  python3 - "$build" "$obj" "$flags" "${MLA_VARIANT_FILES:-wgmma}" > "$out/compile.sh" <<'PY'
import json, shlex, sys, os, re
build, obj, flags, files = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4]
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    if "/src/mla/" in e["file"] and re.search(files, os.path.basename(e["file"])) and e["file"].endswith((".cu", ".cpp")):
        cmd = e["command"]
        target = e.get("output") or cmd.split(" -o ")[1].split()[0]
        cmd = cmd.replace(" -o " + target, " -o " + shlex.quote(os.path.join(obj, os.path.basename(target))))
        cmd = cmd.replace(" -c ", f" {flags} -c ", 1)
        print(f"(cd {shlex.quote(e['directory'])} && {cmd}) &")
print("wait")
PY
  bash "$out/compile.sh"
  revert_patch
  local n objs
  n=$(grep -c '&$' "$out/compile.sh")
  objs=$(compgen -G "$obj/*.o" | wc -l)
  [[ $n -gt 0 && $objs -eq $n ]] || die "compiling the kernels of $out failed ($objs of $n objects)"
  local link
  link=$(ninja -C "$build" -t commands flashcpp | grep -- '-o libflashcpp.so.[0-9.]*' | tail -1)
  [[ -n $link ]] || die "no link command for libflashcpp in $build"
  for o in "$obj"/*.o; do
    link=${link// CMakeFiles\/flashcpp.dir\/src\/mla\/$(basename "$o") / $(realpath "$o") }
  done
  local so
  so=$(sed -E 's/.* -o (libflashcpp\.so\.[0-9.]+) .*/\1/' <<<"$link")
  link=${link// -o $so / -o $(realpath "$out")/$so }
  (cd "$build" && eval "$link")
  ln -sf "$so" "$out/libflashcpp.so"
}

applied_patch=""
revert_patch() {  # the working tree back to HEAD's sources after a variant's compile (also on any exit)
  if [[ -n $applied_patch ]]; then git apply -R "$applied_patch"; applied_patch=""; fi
}
trap revert_patch EXIT

stage_lib() {  # stage_lib SRC_DIR DST_DIR: the library, stripped, with its soname links
  local src=$1 dst=$2 real
  real=$(basename "$(readlink -f "$src/libflashcpp.so")")
  mkdir -p "$dst"
  cp "$src/$real" "$dst/" && strip --strip-debug "$dst/$real"
  ln -sf "$real" "$dst/libflashcpp.so"
  local soname
  soname=$(objdump -p "$dst/$real" | awk '/SONAME/ {print $2}')
  [[ -n $soname && $soname != "$real" ]] && ln -sf "$real" "$dst/$soname"
  return 0
}

cmd_build() {
  [[ $# -ge 3 ]] || die "build BUILD_DIR KIT_DIR SPEC..."
  local build kit
  build=$(realpath "$1"); kit=$2; shift 2
  [[ -f $build/compile_commands.json ]] || die "$build has no compile_commands.json (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)"
  git diff --quiet -- src || die "src/ has uncommitted changes: variants are built against HEAD"
  ninja -C "$build" flashcpp test_mla_gpu >/dev/null
  rm -rf "$kit" && mkdir -p "$kit/lib"
  for spec in "$@"; do
    local name=${spec%%[=@]*} rest patch="" flags=""
    rest=${spec#"$name"}
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ && $name != b ]] || die "bad variant name in $spec (an identifier, not b)"
    if [[ $rest == =* ]]; then patch=${rest#=}; patch=${patch%%@*}; fi
    if [[ $rest == *@* ]]; then flags=${rest#*@}; fi
    if [[ -z $patch && -z $flags ]]; then
      stage_lib "$build" "$kit/$name"
    else
      echo "== $name: patch '${patch:-none}', flags '${flags:-none}'"
      local work
      work=$(mktemp -d)
      build_variant "$build" "$work" "$patch" "$flags"
      stage_lib "$work" "$kit/$name"
      rm -rf "$work"
    fi
  done
  cp "$build/tests/gpu/test_mla_gpu" "$kit/" && strip --strip-debug "$kit/test_mla_gpu"
  for l in "$build"/tests/libflashcpp_test_hooks.so*; do
    if [[ -e $l ]]; then cp -P "$l" "$kit/lib/"; fi
  done
  ldd "$build/libflashcpp.so" "$build/tests/gpu/test_mla_gpu" | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libflashcpp|libc|libm|libdl|librt|libpthread|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart)\.so' |
    while read -r l; do cp -L "$l" "$kit/lib/"; done
  if [[ -n ${FLASHCPP_GOLDEN_DIR:-} ]]; then cp -r "$FLASHCPP_GOLDEN_DIR" "$kit/golden"; fi
  if [[ -n ${FLASHMLA_PKG:-} ]]; then mkdir -p "$kit/py" && cp -r "$FLASHMLA_PKG" "$kit/py/"; fi
  tar czf "$kit.tgz" -C "$kit" .
  du -sh "$kit.tgz"
}

# Unpacks kit $1 into the directory $2 and points the process at it: offline, no JIT, GPU tests on, its golden data,
# FlashMLA's package and the builds' dependencies.
use_kit() {
  tar xzf "$1" -C "$2"
  export FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_GPU_TESTS=1 PYTHONUNBUFFERED=1
  if [[ -d $2/golden ]]; then export FLASHCPP_GOLDEN_DIR=$2/golden; fi
  if [[ -d $2/py ]]; then export PYTHONPATH=$2/py${PYTHONPATH:+:$PYTHONPATH}; fi
  export LD_LIBRARY_PATH=$2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

cmd_run() {
  [[ $# -ge 4 ]] || die "run KIT_TGZ OPS BASE NAME... [-- GTEST_FILTER]"
  local tgz=$1 ops=$2 base=$3; shift 3
  local names=() filter='MlaGpuPrefill.*:MlaGpuDecode*'
  while [[ $# -gt 0 ]]; do
    if [[ $1 == -- ]]; then filter=${2:-$filter}; break; fi
    names+=("$1"); shift
  done
  local out=${OUT:-$root/out} kit raw
  kit=$(mktemp -d)
  raw=$(mktemp -d)
  mkdir -p "$out"
  use_kit "$tgz" "$kit"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
  local budget=${MLA_VARIANTS_BUDGET_S:-540} start=$SECONDS want_s limit
  # A step's timeout: want_s, or what is left of the budget; fails (the step is skipped) under 20 s.
  step_limit() {
    local left=$((budget - (SECONDS - start)))
    if ((left < 20)); then echo "   (skipped: ${left} s of the budget left)" >&2; return 1; fi
    echo $((want_s < left ? want_s : left))
  }
  pack() { tar czf "$out/raw.tgz.part" -C "$raw" . && mv "$out/raw.tgz.part" "$out/raw.tgz"; }
  more() { local first=$1 n; shift; for n in "$@"; do [[ $n != "$first" ]] && printf '%s=%s ' "$n" "$kit/$n/libflashcpp.so"; done; }
  if [[ -n ${MLA_VARIANTS_GATE:-} ]]; then
    local n passed=()
    for n in "${names[@]}"; do
      LD_LIBRARY_PATH=$kit/$n:$LD_LIBRARY_PATH timeout "${MLA_VARIANTS_GATE_S:-90}" "$kit/test_mla_gpu" \
        --gtest_filter="$MLA_VARIANTS_GATE" > "$raw/gate-$n.txt" 2>&1 &
    done
    wait
    for n in "${names[@]}"; do
      if grep -Eq '^\[  PASSED  \] [1-9][0-9]* tests?\.' "$raw/gate-$n.txt" && ! grep -q '^\[  FAILED  \]' "$raw/gate-$n.txt"; then
        passed+=("$n"); echo "gate: $n passes"
      else
        echo "gate: $n FAILED, not timed"; tail -4 "$raw/gate-$n.txt"
      fi
    done
    pack
    names=("${passed[@]}")
    if ((${#names[@]} == 0)); then rm -rf "$raw" "$kit"; return 0; fi
  fi
  local last=${names[${#names[@]}-1]} op
  for op in ${ops//,/ }; do
    for first in "$base" "$last"; do
      echo "== $op, $first first"
      want_s=280
      limit=$(step_limit) || continue
      # shellcheck disable=SC2046
      timeout "$limit" python3 bench/flashmla_side_by_side.py --lib "$kit/$first/libflashcpp.so" --op "$op" --iters 10 \
        --no-host-time --no-flashinfer --lib-more $(more "$first" "$base" "${names[@]}") > "$raw/$op-$first-first.txt" 2>&1 ||
        echo "   (exit $?)"
      grep '^#' "$raw/$op-$first-first.txt" | tail -2 || true
      pack
    done
    python3 bench/mla_suite_summary.py "$raw/$op-$base-first.txt:$base" "$raw/$op-$last-first.txt:$last" \
      > "$out/$op-summary.txt" 2>&1 || true
    sed -n '/^== all runs/,$p' "$out/$op-summary.txt"
  done
  if [[ $filter == none ]]; then names=(); fi
  for n in "${names[@]}"; do
    echo "== tests of $n ($filter)"
    want_s=200
    limit=$(step_limit) || continue
    LD_LIBRARY_PATH=$kit/$n:$LD_LIBRARY_PATH timeout "$limit" "$kit/test_mla_gpu" --gtest_filter="$filter" \
      > "$raw/tests-$n.txt" 2>&1 || echo "   (exit $?)"
    grep -E '^\[  (PASSED|FAILED)|FAILED \]' "$raw/tests-$n.txt" || tail -3 "$raw/tests-$n.txt"
    pack
  done
  rm -rf "$raw"
  rm -rf "$kit"
}

cmd_profile() {
  [[ $# -ge 4 ]] || die "profile KIT_TGZ NAME OP CASE [-- ARGS...]"
  local tgz=$1 name=$2 op=$3 case_label=$4 kit arg args=()
  shift 4
  [[ ${1:-} == -- ]] && shift
  local out=${OUT:-$root/out}
  kit=$(mktemp -d)
  mkdir -p "$out"
  use_kit "$tgz" "$kit"
  [[ -f $kit/$name/libflashcpp.so ]] || die "the kit has no build '$name'"
  for arg in "$@"; do args+=("${arg//@KIT@/$kit}"); done
  local rep=$kit/ncu-report
  timeout "${MLA_VARIANTS_BUDGET_S:-400}" ncu --clock-control none --cache-control all -f -o "$rep" \
    -k 'regex:flash_fwd_splitkv_mla|sparse_attn_fwd|sparse_attention_wgmma' \
    --launch-count "${MLA_VARIANTS_NCU_LAUNCHES:-30}" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
    --section Occupancy --section MemoryWorkloadAnalysis_Chart \
    python3 bench/flashmla_side_by_side.py --lib "$kit/$name/libflashcpp.so" --op "$op" --filter "$case_label" \
    --iters 2 --no-host-time --no-flashinfer "${args[@]}" > "$out/ncu-run.txt" 2>&1 || echo "   (ncu exit $?)"
  ncu -i "$rep.ncu-rep" --page details > "$out/ncu-details.txt" 2>&1 || true
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$kit/ncu-source.csv" 2>&1 || true
  python3 bench/ncu_source_summary.py "$kit/ncu-source.csv" > "$out/ncu-summary.txt" 2>&1 || true
  gzip -c "$kit/ncu-source.csv" > "$out/ncu-source.csv.gz"
  grep -E '^  [^ ]' "$out/ncu-details.txt" | cut -c1-120 | sort | uniq -c || true
  rm -rf "$kit"
}

case ${1:-} in
  build) shift; cmd_build "$@" ;;
  run) shift; cmd_run "$@" ;;
  profile) shift; cmd_profile "$@" ;;
  *) sed -n '2,29p' "$0"; exit 2 ;;
esac
