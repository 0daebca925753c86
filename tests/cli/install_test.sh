#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, moves the prefix, and from the moved copy runs the CLI and
# builds and runs a CMake consumer (find_package, no C++ standard of its own) and a C consumer (pkg-config).
# Neither the build tree nor a cache may help: FLASHCPP_NO_BUILD_DEPS=1, an empty cache, offline.
set -euo pipefail
build_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "install test FAILED: $*" >&2; exit 1; }
expect() {  # expect <what> <extended regex> <text>
  grep -Eq -- "$2" <<<"$3" || fail "$1: expected /$2/ in:"$'\n'"$3"
  echo "ok: $1"
}

cmake --install "$build_dir" --prefix "$work/staging" >/dev/null
mv "$work/staging" "$work/prefix"
prefix=$work/prefix
export FLASHCPP_NO_BUILD_DEPS=1 FLASHCPP_OFFLINE=1 FLASHCPP_CACHE_DIR=$work/cache
lib=$(ls "$prefix"/lib*/libflashcpp.so.*.*.* 2>/dev/null | head -1)
[[ -n $lib ]] || fail "no versioned libflashcpp.so.X.Y.Z under $prefix"
libdir=$(dirname "$lib")
expect "versioned SONAME" 'SONAME.*\[libflashcpp\.so\.[0-9]+\.[0-9]+\]' "$(readelf -d "$lib")"
expect "CLI RUNPATH" 'RUNPATH.*\$ORIGIN/\.\./lib' "$(readelf -d "$prefix/bin/flashcpp")"
[[ -f $libdir/libtvm_ffi.so ]] || fail "libtvm_ffi.so is not installed beside libflashcpp"
expect "pkg-config file" '^Version: [0-9.]+' "$(cat "$libdir/pkgconfig/flashcpp.pc")"

cli=$prefix/bin/flashcpp
version_re='^flashcpp [0-9]+\.[0-9]+\.[0-9]+ \(C ABI [0-9]+\.[0-9]+\.[0-9]+, FlashInfer 0\.6\.3, TVM-FFI 0\.1\.9, built with CUDA 1[0-9]\.[0-9.]+\)$'
expect "flashcpp --version" "$version_re" "$("$cli" --version)"
expect "CLI demo from the moved prefix" 'reference backend: done' "$("$cli" demo --cpu --batch 1 --context 16 --seed 3)"
expect "doctor finds libtvm_ffi beside libflashcpp" "^libtvm_ffi: +$libdir/libtvm_ffi\.so " "$("$cli" doctor)"

cmake -S "$here/consumer" -B "$work/cmake-consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-consumer" >/dev/null
out=$("$work/cmake-consumer/consumer")
expect "CMake consumer (C++20 from the target)" 'bf16\[0, 4\] cpu, C ABI version [0-9]+' "$out"
expect "CMake consumer: flashcpp::version_string()" '^version: flashcpp [0-9.]+ \(C ABI' "$out"
expect "CMake consumer: Runtime loads the installed libtvm_ffi" "^libtvm_ffi: $libdir/libtvm_ffi\.so \(0\.1\.9\)" "$out"

flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs flashcpp)
cc -o "$work/pc-consumer" "$here/pkgconfig_consumer/main.c" $flags
expect "pkg-config consumer (C)" '^pkg-config consumer: flashcpp [0-9.]+ \(C ABI [0-9]+\.[0-9]+\.[0-9]+' "$("$work/pc-consumer")"
echo "install test: all checks passed"
