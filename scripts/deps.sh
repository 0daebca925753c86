#!/usr/bin/env bash
# Installs what flashcpp needs on a fresh Debian machine that has the CUDA toolkit:
# Debian packages (when run as root and they are missing) and the pinned wheels,
# downloaded through pip's configured index with their SHA-256 checked and unpacked
# into the build tree (build/_deps/<name>). Idempotent: a second run does nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="${FLASHCPP_DEPS_DIR:-$root/build/_deps}"

apt_packages=(cmake ninja-build g++ pkg-config unzip zip python3 python3-pip
  libcurl4-openssl-dev libssl-dev libzip-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev curl clang libclang-rt-dev)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "deps: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$deps/wheels"
stamp="$deps/wheels/.lock.sha256"
want=$(sha256sum "$root/scripts/wheels.lock" | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "deps: downloading pinned wheels"
  python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform any \
    -r "$root/scripts/wheels.lock" -d "$deps/wheels"
  for w in "$deps"/wheels/*.whl; do
    name=$(basename "$w" | cut -d- -f1)
    rm -rf "$deps/$name.tmp" && mkdir -p "$deps/$name.tmp"
    unzip -q "$w" -d "$deps/$name.tmp"
    rm -rf "$deps/$name" && mv "$deps/$name.tmp" "$deps/$name"
  done
  echo "$want" > "$stamp"
fi
echo "deps: ready in $deps"
