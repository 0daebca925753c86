# Pinned artifact manifest: picks the FlashInfer jit-cache, apache-tvm-ffi and flashinfer-python wheels
# for the detected CUDA toolkit (13.0 / 13.1) and target CPU arch, and generates
# ${CMAKE_BINARY_DIR}/generated/flashcpp/artifacts_manifest.hpp. A user manifest file (JSON, see
# docs/ARTIFACTS.md) can pin other versions at run time (FLASHCPP_MANIFEST).
#
# Overrides: -DFLASHCPP_CUDA_VERSION=13.0|13.1 and -DFLASHCPP_TARGET_ARCH=x86_64|aarch64.

set(FLASHCPP_CUDA_VERSION "" CACHE STRING "CUDA version the prebuilt modules are pinned for (13.0 or 13.1); empty = detect")
set(FLASHCPP_TARGET_ARCH "" CACHE STRING "CPU arch of the pinned wheels (x86_64 or aarch64); empty = detect")

if(FLASHCPP_CUDA_VERSION)
  set(_fc_cuda "${FLASHCPP_CUDA_VERSION}")
else()
  if(NOT CUDAToolkit_VERSION)
    message(FATAL_ERROR "flashcpp: no CUDA toolkit version was detected; set -DFLASHCPP_CUDA_VERSION=13.0 or 13.1")
  endif()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _fc_cuda "${CUDAToolkit_VERSION}")
endif()
if(_fc_cuda STREQUAL "13.0")
  set(_fc_cu cu130)
elseif(_fc_cuda STREQUAL "13.1")
  set(_fc_cu cu131)
else()
  message(FATAL_ERROR "flashcpp: the pinned FlashInfer modules exist for CUDA 13.0 and 13.1; this toolkit is "
                      "CUDA ${_fc_cuda}. Use a CUDA 13.0/13.1 toolkit, or pass -DFLASHCPP_CUDA_VERSION=13.0 "
                      "(or 13.1) to pin those modules anyway.")
endif()

if(FLASHCPP_TARGET_ARCH)
  set(_fc_arch "${FLASHCPP_TARGET_ARCH}")
else()
  string(TOLOWER "${CMAKE_SYSTEM_PROCESSOR}" _fc_arch)
endif()
if(_fc_arch MATCHES "^(x86_64|amd64|x64)$")
  set(_fc_arch x86_64)
elseif(_fc_arch MATCHES "^(aarch64|arm64)$")
  set(_fc_arch aarch64)
else()
  message(FATAL_ERROR "flashcpp: pinned wheels exist for x86_64 and aarch64; the target CPU is '${_fc_arch}'. "
                      "Pass -DFLASHCPP_TARGET_ARCH=x86_64|aarch64 to override.")
endif()

# FlashInfer 0.6.3 publishes one CUDA 13 jit-cache build (cu130); CUDA 13.1 uses the same wheel (minor-version
# compatibility). The wheel is on the FlashInfer project's GitHub release page.
set(_fc_fi_version 0.6.3)
set(_fc_fi_release "https://github.com/flashinfer-ai/flashinfer/releases/download/v${_fc_fi_version}")
set(_fc_jit_file_x86_64 "flashinfer_jit_cache-${_fc_fi_version}+cu130-cp39-abi3-manylinux_2_28_x86_64.whl")
set(_fc_jit_sha_x86_64 e5b0560aa02befa2964c76b8f9302959ed9fb2f558765b974753d68c4f8b4e1e)
set(_fc_jit_file_aarch64 "flashinfer_jit_cache-${_fc_fi_version}+cu130-cp39-abi3-manylinux_2_28_aarch64.whl")
set(_fc_jit_sha_aarch64 458fcf5a854334062503ce28bd6521c16029d2248246532421e824e8273b8a81)
# apache-tvm-ffi 0.1.9 (same pin as scripts/wheels.lock); libtvm_ffi.so does not depend on the Python version.
set(_fc_tvm_file_x86_64 "apache_tvm_ffi-0.1.9-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl")
set(_fc_tvm_sha_x86_64 21365abd2a2a1a6d3b4e6e4f048309651125becfa795440c3607f3cc27d30ac7)
set(_fc_tvm_size_x86_64 2307140)
set(_fc_tvm_file_aarch64 "apache_tvm_ffi-0.1.9-cp311-cp311-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl")
set(_fc_tvm_sha_aarch64 01ebb1308b2666c206aa9a4015eb48f03a5d98ea2e9cfb002bd5e2ca0b9c7ef3)
set(_fc_tvm_size_aarch64 2159854)
# flashinfer-python 0.6.3 (pure Python wheel; its flashinfer/data holds the sources the jit builder needs).
set(_fc_fip_file "flashinfer_python-${_fc_fi_version}-py3-none-any.whl")
set(_fc_fip_sha 0fe2de934a4b3690c543dafb03f38d7bb4a762431abe8ae4f7292d6fef10c65d)
set(_fc_fip_size 7636254)

set(FLASHCPP_MANIFEST_CUDA_TAG ${_fc_cu})
set(FLASHCPP_MANIFEST_ARCH ${_fc_arch})
set(FLASHCPP_MANIFEST_JIT_FILE "${_fc_jit_file_${_fc_arch}}")
set(FLASHCPP_MANIFEST_JIT_SHA "${_fc_jit_sha_${_fc_arch}}")
set(FLASHCPP_MANIFEST_JIT_URL "${_fc_fi_release}/${_fc_jit_file_${_fc_arch}}")
string(REPLACE "+" "%2B" FLASHCPP_MANIFEST_JIT_URL "${FLASHCPP_MANIFEST_JIT_URL}")
set(FLASHCPP_MANIFEST_TVM_FILE "${_fc_tvm_file_${_fc_arch}}")
set(FLASHCPP_MANIFEST_TVM_SHA "${_fc_tvm_sha_${_fc_arch}}")
set(FLASHCPP_MANIFEST_TVM_SIZE "${_fc_tvm_size_${_fc_arch}}")
set(FLASHCPP_MANIFEST_FIP_FILE "${_fc_fip_file}")
set(FLASHCPP_MANIFEST_FIP_SHA "${_fc_fip_sha}")
set(FLASHCPP_MANIFEST_FIP_SIZE "${_fc_fip_size}")
set(FLASHCPP_MANIFEST_FI_VERSION "${_fc_fi_version}")
string(REGEX MATCH "^apache_tvm_ffi-([^-]+)-" _fc_tvm_match "${FLASHCPP_MANIFEST_TVM_FILE}")
set(FLASHCPP_MANIFEST_TVM_VERSION "${CMAKE_MATCH_1}")
# What flashcpp::version() reports.
set(FLASHCPP_VERSION_LINE "flashcpp ${PROJECT_VERSION} (C ABI @ABI@, FlashInfer ${_fc_fi_version}, TVM-FFI ${FLASHCPP_MANIFEST_TVM_VERSION}, built with CUDA ${CUDAToolkit_VERSION})")
file(READ "${CMAKE_SOURCE_DIR}/include/flashcpp/c/common.h" _fc_common_h)
set(_fc_abi "")
foreach(_fc_part MAJOR MINOR PATCH)
  string(REGEX MATCH "#define FLASHCPP_C_ABI_VERSION_${_fc_part} ([0-9]+)u" _fc_abi_match "${_fc_common_h}")
  if(NOT _fc_abi_match)
    message(FATAL_ERROR "include/flashcpp/c/common.h: FLASHCPP_C_ABI_VERSION_${_fc_part} not found")
  endif()
  list(APPEND _fc_abi "${CMAKE_MATCH_1}")
endforeach()
# What flashcpp::version() reports as c_abi, packed as FLASHCPP_C_ABI_VERSION is (src/capi checks the two agree).
list(GET _fc_abi 0 _fc_abi_major)
list(GET _fc_abi 1 _fc_abi_minor)
list(GET _fc_abi 2 _fc_abi_patch)
math(EXPR FLASHCPP_C_ABI_VERSION_PACKED "${_fc_abi_major} * 10000 + ${_fc_abi_minor} * 100 + ${_fc_abi_patch}")
list(JOIN _fc_abi "." _fc_abi)
string(REPLACE "@ABI@" "${_fc_abi}" FLASHCPP_VERSION_LINE "${FLASHCPP_VERSION_LINE}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/include/flashcpp/c/common.h")
file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/generated/flashcpp/version_config.hpp" @ONLY CONTENT [=[
// Generated by cmake/Manifest.cmake. Do not edit.
#pragma once
#include <cstdint>

namespace flashcpp::generated {
inline constexpr const char* kLibraryVersion = "@PROJECT_VERSION@";
inline constexpr std::uint32_t kCAbiVersion = @FLASHCPP_C_ABI_VERSION_PACKED@u;  // FLASHCPP_C_ABI_VERSION (c/common.h)
inline constexpr const char* kFlashInferVersion = "@FLASHCPP_MANIFEST_FI_VERSION@";
inline constexpr const char* kTvmFfiVersion = "@FLASHCPP_MANIFEST_TVM_VERSION@";
inline constexpr const char* kCudaVersion = "@CUDAToolkit_VERSION@";
inline constexpr const char* kVersionLine = "@FLASHCPP_VERSION_LINE@";
}  // namespace flashcpp::generated
]=])
message(STATUS "flashcpp: artifact manifest for CUDA ${_fc_cuda} (${_fc_cu}), ${_fc_arch}")
file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/generated/flashcpp/artifacts_manifest.hpp" @ONLY CONTENT [=[
// Generated by cmake/Manifest.cmake from the pinned artifact table. Do not edit.
#pragma once
#include <cstdint>

namespace flashcpp::artifacts::generated {
inline constexpr const char* kCudaTag = "@FLASHCPP_MANIFEST_CUDA_TAG@";
inline constexpr const char* kArch = "@FLASHCPP_MANIFEST_ARCH@";
inline constexpr const char* kFlashInferVersion = "@FLASHCPP_MANIFEST_FI_VERSION@";

inline constexpr const char* kJitCacheFile = "@FLASHCPP_MANIFEST_JIT_FILE@";
inline constexpr const char* kJitCacheSha256 = "@FLASHCPP_MANIFEST_JIT_SHA@";
inline constexpr const char* kJitCacheUrl = "@FLASHCPP_MANIFEST_JIT_URL@";

inline constexpr const char* kTvmFfiFile = "@FLASHCPP_MANIFEST_TVM_FILE@";
inline constexpr const char* kTvmFfiSha256 = "@FLASHCPP_MANIFEST_TVM_SHA@";
inline constexpr std::uint64_t kTvmFfiSize = @FLASHCPP_MANIFEST_TVM_SIZE@u;

inline constexpr const char* kFlashInferPythonFile = "@FLASHCPP_MANIFEST_FIP_FILE@";
inline constexpr const char* kFlashInferPythonSha256 = "@FLASHCPP_MANIFEST_FIP_SHA@";
inline constexpr std::uint64_t kFlashInferPythonSize = @FLASHCPP_MANIFEST_FIP_SIZE@u;

// The build tree's unpacked pinned wheels (scripts/deps.sh): the last-resort Python prefix, so a
// program started from this build finds apache-tvm-ffi and flashinfer-python without a network.
inline constexpr const char* kBuildDepsDir = "@FLASHCPP_DEPS_DIR@";
}  // namespace flashcpp::artifacts::generated
]=])
