# Third-party dependencies. System packages come from Debian (scripts/deps.sh);
# pinned wheels are unpacked under FLASHCPP_DEPS_DIR.
find_package(CUDAToolkit REQUIRED)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(CURL REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
pkg_check_modules(LIBZIP REQUIRED IMPORTED_TARGET libzip)

set(FLASHCPP_TVM_FFI_DIR "${FLASHCPP_DEPS_DIR}/apache_tvm_ffi/tvm_ffi")
set(FLASHCPP_FLASHINFER_DIR "${FLASHCPP_DEPS_DIR}/flashinfer_python/flashinfer")
set(FLASHCPP_CUTLASS_DIR "${FLASHCPP_DEPS_DIR}/nvidia_cutlass/cutlass_library/source")
foreach(p "${FLASHCPP_TVM_FFI_DIR}/include/tvm/ffi/c_api.h" "${FLASHCPP_TVM_FFI_DIR}/lib/libtvm_ffi.so"
          "${FLASHCPP_CUTLASS_DIR}/include/cute/tensor.hpp")
  if(NOT EXISTS "${p}")
    message(FATAL_ERROR "flashcpp: ${p} is missing. Run scripts/deps.sh first (it installs the pinned wheels "
                        "into ${FLASHCPP_DEPS_DIR}), or set FLASHCPP_DEPS_DIR.")
  endif()
endforeach()

# DLPack: the header the pinned apache-tvm-ffi wheel ships (DLPack 1.x). Our own code uses only this
# header from the wheel; tvm-ffi's own headers are used only to build test modules.
add_library(dlpack_headers INTERFACE)
add_library(dlpack::headers ALIAS dlpack_headers)
file(MAKE_DIRECTORY "${CMAKE_BINARY_DIR}/staged/dlpack")
configure_file("${FLASHCPP_TVM_FFI_DIR}/include/dlpack/dlpack.h" "${CMAKE_BINARY_DIR}/staged/dlpack/dlpack.h" COPYONLY)
set_property(TARGET dlpack_headers PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_BINARY_DIR}/staged")

add_library(cutlass_headers INTERFACE)
add_library(cutlass::headers ALIAS cutlass_headers)
target_include_directories(cutlass_headers SYSTEM INTERFACE "${FLASHCPP_CUTLASS_DIR}/include"
                           "${FLASHCPP_CUTLASS_DIR}/tools/util/include" "${CUDAToolkit_INCLUDE_DIRS}/cccl")
