// The jit layer: public interface (flashcpp/jit.hpp) plus the internal pieces the tests exercise and the
// layer's files share: the template renderer, the per-family source generator and the compiler command lines.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashcpp/jit.hpp"

namespace flashcpp::jit {

/// FlashInfer's filename-safe dtype name ("f16", "bf16", "e4m3", "i32", ...); nullopt for dtypes its URIs
/// cannot name (f32, f64, i16, u16, bool).
std::optional<std::string_view> uri_dtype_name(DType) noexcept;
/// The C type FlashInfer's templates use ("half", "nv_bfloat16", "__nv_fp8_e4m3", "int32_t", ...).
std::optional<std::string_view> c_type_name(DType) noexcept;

// ---------------------------------------------------------------------------------------------
// Template rendering (the subset of Jinja2 FlashInfer's 0.6.3 .jinja files use)

/// Renders `{{ name }}` substitutions and `{% for v in [a, "b", ...] %} ... {% endfor %}` loops over
/// literal lists (nestable), with Jinja2's default whitespace rules (tags are removed, the text around
/// them is kept, and one trailing newline at the end of the template is dropped). An undefined variable
/// or any other construct throws Error(invalid_argument) naming it and `template_name`.
std::string render_template(std::string_view text, const std::map<std::string, std::string>& vars,
                            std::string_view template_name = "template");

// ---------------------------------------------------------------------------------------------
// Generation

/// A file the generator writes into the module's generated-source directory.
struct GeneratedFile {
  std::string name;     ///< file name (no directories)
  std::string content;
};

/// Everything needed to compile one module, as FlashInfer's generator would produce it.
struct ModulePlan {
  std::string uri;
  std::vector<GeneratedFile> files;          ///< rendered and copied files, written to `gen_dir`
  std::vector<std::filesystem::path> sources;  ///< compile order; absolute (gen_dir/... or csrc/...)
  std::vector<std::string> extra_cuda_flags;   ///< module flags appended after the common device flags
  std::vector<std::string> extra_cflags;       ///< module flags appended after the common host flags
  std::vector<std::string> extra_ldflags;
};

/// Generates the module's sources for `uri` in memory (nothing is written). `data_dir` is FlashInfer's
/// data/ directory (templates and copied sources are read from data/csrc). Throws invalid_argument for
/// an unknown URI or a variant FlashInfer's generator rejects, not_found for a missing template/source.
ModulePlan plan_module(const std::string& uri, const std::filesystem::path& data_dir,
                       const std::filesystem::path& gen_dir);

/// Writes `content` to `path` only when the file is missing or differs (keeps timestamps stable).
/// Returns true when it wrote. Writes through a temporary file and a rename.
bool write_if_different(const std::filesystem::path& path, std::string_view content);

// ---------------------------------------------------------------------------------------------
// Toolchain and flags

struct Toolchain {
  std::filesystem::path cuda_home;
  std::filesystem::path nvcc;
  std::string cxx;               ///< host compiler command (CXX or c++)
  std::string nvcc_version;      ///< "13.0" (release)
  std::string nvcc_version_full; ///< the whole `nvcc --version` banner's last line ("Build cuda_13.0...")
};
/// Finds CUDA (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda) and runs `nvcc --version` once
/// per process. Throws unsupported with what to set when nvcc is missing.
const Toolchain& toolchain();

/// Device flags of FlashInfer's gen_jit_spec + cpp_ext for a module with `extra_cuda_flags`
/// (without include dirs): -std, --threads, fast math, dtype defines, -O3, the global arch flags (dropped
/// when the module brings its own -gencode), then the module flags.
std::vector<std::string> device_flags(const BuildOptions&, const std::vector<std::string>& extra_cuda_flags,
                                      const Toolchain&);
/// Host (.cpp) flags.
std::vector<std::string> host_flags(const std::vector<std::string>& extra_cflags);
/// The include/define flags shared by both compilers (-isystem CUDA, tvm-ffi, dlpack, FlashInfer, CUTLASS, spdlog).
std::vector<std::string> common_flags(const BuildOptions&, const Toolchain&);
/// The cache key of a configuration (16 hex digits).
std::string cache_key(const BuildOptions&, const Toolchain&);
/// Throws not_found, saying what to set, when the FlashInfer sources or the tvm-ffi headers of `o` are missing.
void check_inputs(const BuildOptions& o);

/// The words of a list setting (CXX, FLASHCPP_CUDA_ARCH_LIST), separated by spaces, commas, semicolons or tabs.
std::vector<std::string> split_list(const std::string& s);
/// `s` in single quotes for a POSIX shell.
std::string shell_quote(const std::string& s);

}  // namespace flashcpp::jit
