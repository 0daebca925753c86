// Resolution order, configuration, manifest, path-safe extraction and cache maintenance.
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>

#include "artifacts/fixture.hpp"
#include "flashcpp/artifacts_manifest.hpp"

namespace flashcpp::testing {
namespace {

using namespace flashcpp::artifacts;

// Sets environment variables for one test and restores them afterwards.
class EnvGuard {
 public:
  void set(const char* name, const std::string& value) {
    save(name);
    ::setenv(name, value.c_str(), 1);
  }
  void unset(const char* name) {
    save(name);
    ::unsetenv(name);
  }
  ~EnvGuard() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }

 private:
  void save(const char* name) {
    const char* v = std::getenv(name);
    saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

const char* const kAllVars[] = {"FLASHCPP_CACHE_DIR", "XDG_CACHE_HOME", "FLASHCPP_JIT_CACHE", "FLASHCPP_TVM_FFI",
                                "FLASHCPP_FLASHINFER_PYTHON", "FLASHCPP_PYTHON_PREFIXES", "VIRTUAL_ENV", "CONDA_PREFIX",
                                "FLASHCPP_NO_BUILD_DEPS", "FLASHCPP_OFFLINE", "FLASHCPP_INDEX_URL", "PIP_INDEX_URL",
                                "PIP_CONFIG_FILE", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "FLASHCPP_CONNECT_TIMEOUT",
                                "FLASHCPP_STALL_TIMEOUT", "FLASHCPP_RETRIES", "FLASHCPP_MANIFEST",
                                "FLASHCPP_DOWNLOAD_DEADLINE", "FLASHCPP_MIN_RATE", "FLASHCPP_MIN_RATE_TIME",
                                "FLASHCPP_MAX_WHEEL_BYTES", "FLASHCPP_MIN_FREE_BYTES", "FLASHCPP_MAX_EXTRACT_BYTES",
                                "FLASHCPP_MAX_COMPRESSION_RATIO", "FLASHCPP_LOCK_TIMEOUT"};

void clear_all(EnvGuard& env) {
  for (const char* v : kAllVars) env.unset(v);
}

TEST_F(ArtifactsTest, UnsafeWheelMembersAreRejected) {
  const std::vector<std::pair<std::string, WheelMember>> cases = {
      {"dotdot", {"tvm_ffi/lib/../../../evil.so", "x"}},
      {"absolute", {"/tmp/flashcpp-evil-absolute.so", "x"}},
      {"symlink", {"tvm_ffi/lib/link.so", "/etc/passwd", true}},
      {"backslash", {"tvm_ffi\\..\\evil.so", "x"}},
  };
  for (const auto& [label, bad] : cases) {
    SCOPED_TRACE(label);
    const TestWheel w = build(label + ".whl", {{"tvm_ffi/lib/libtvm_ffi.so", "lib"}, bad});
    const fs::path dest = tmp / ("dest-" + label);
    EXPECT_THROW_CODE(extract_from_wheel(cfg, w.local, "tvm_ffi/lib/libtvm_ffi.so", dest), integrity_error, bad.name);
    EXPECT_FALSE(fs::exists(dest / "tvm_ffi"));
    EXPECT_FALSE(fs::exists(tmp / "evil.so"));
  }
  EXPECT_FALSE(fs::exists("/tmp/flashcpp-evil-absolute.so"));
  // Through the download path as well: the wheel downloads and verifies, but nothing is extracted.
  const TestWheel evil = build(tvm.filename, {{"tvm_ffi/lib/libtvm_ffi.so", "lib"}, {"tvm_ffi/../x.so", "x"}});
  serve_index(evil, "apache-tvm-ffi");
  tvm = evil;
  write_manifest();
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), integrity_error, "unsafe member 'tvm_ffi/../x.so'");
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(ArtifactsTest, OversizeMemberIsRejected) {
  cfg.max_member_bytes = 1000;
  EXPECT_THROW_CODE(extract_from_wheel(cfg, tvm.local, "tvm_ffi/lib/libtvm_ffi.so", tmp / "dest"), integrity_error,
                    "over the limit");
  EXPECT_FALSE(fs::exists(tmp / "dest" / "tvm_ffi"));
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(ArtifactsTest, MissingMemberIsAClearError) {
  const TestWheel nolib = build(tvm.filename, {{"tvm_ffi/__init__.py", ""}});
  serve_index(nolib, "apache-tvm-ffi");
  tvm = nolib;
  write_manifest();
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), not_found, "has no member 'tvm_ffi/lib/libtvm_ffi.so'");
  EXPECT_THROW_CODE(extract_from_wheel(cfg, nolib.local, "tvm_ffi/include", tmp / "d"), not_found, "tvm_ffi/include");
  // A module the jit-cache wheel does not hold is "not prebuilt" (nullopt), not an error.
  EXPECT_FALSE(resolve_prebuilt_module(cfg, "batch_prefill_with_kv_cache_dtype_q_f16_sm90").has_value());
  EXPECT_FALSE(resolve_prebuilt_module(cfg, "batch_prefill_with_kv_cache_dtype_q_f16_sm90").has_value());
  EXPECT_EQ(server.requests(jit_path()), 1);
}

TEST_F(ArtifactsTest, BadModuleUriIsInvalidArgument) {
  for (const char* uri : {"", "../norm", "a/b", "..", "norm;rm"})
    EXPECT_THROW_CODE(resolve_prebuilt_module(cfg, uri), invalid_argument, "'uri'");
  EXPECT_EQ(server.requests(jit_path()), 0);
}

TEST_F(ArtifactsTest, NoIndexConfiguredSaysWhatToSet) {
  cfg.index_url.clear();
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), not_found, "set FLASHCPP_INDEX_URL (or PIP_INDEX_URL");
}

TEST_F(ArtifactsTest, OfflineWithColdCacheSaysWhatToSet) {
  cfg.offline = true;
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), not_found, "FLASHCPP_OFFLINE=1");
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), not_found, "FLASHCPP_TVM_FFI");
  EXPECT_FALSE(resolve_prebuilt_module(cfg, "norm").has_value());
  EXPECT_EQ(server.requests(file_path(tvm)) + server.requests(jit_path()), 0);
  // Not remembered as missing: going online brings it.
  cfg.offline = false;
  EXPECT_TRUE(resolve_prebuilt_module(cfg, "norm").has_value());
}

TEST_F(ArtifactsTest, OverridesWinOverEverything) {
  // A package directory.
  const fs::path pkg = tmp / "pkg" / "tvm_ffi";
  fs::create_directories(pkg / "lib");
  std::ofstream(pkg / "lib" / "libtvm_ffi.so") << "override";
  cfg.tvm_ffi_override = pkg;
  EXPECT_EQ(resolve_tvm_ffi_library(cfg), pkg / "lib" / "libtvm_ffi.so");
  // A prefix holding the package.
  cfg.tvm_ffi_override = tmp / "pkg";
  EXPECT_EQ(resolve_tvm_ffi_library(cfg), pkg / "lib" / "libtvm_ffi.so");
  EXPECT_THROW_CODE(resolve_tvm_ffi_include_dir(cfg), not_found, "FLASHCPP_TVM_FFI");
  // A wheel file: extracted into the cache, never downloaded.
  cfg.tvm_ffi_override = tvm.local;
  const fs::path lib = resolve_tvm_ffi_library(cfg);
  EXPECT_EQ(read_file(lib), lib_bytes);
  EXPECT_TRUE(fs::exists(resolve_tvm_ffi_include_dir(cfg) / "tvm/ffi/c_api.h"));
  cfg.jit_cache_override = jit.local;
  EXPECT_EQ(read_file(*resolve_prebuilt_module(cfg, "norm")), norm_bytes);
  EXPECT_FALSE(resolve_prebuilt_module(cfg, "absent").has_value());
  // A jit_cache directory.
  fs::create_directories(tmp / "jc" / "norm");
  std::ofstream(tmp / "jc" / "norm" / "norm.so") << "dir";
  cfg.jit_cache_override = tmp / "jc";
  EXPECT_EQ(*resolve_prebuilt_module(cfg, "norm"), tmp / "jc" / "norm" / "norm.so");
  cfg.tvm_ffi_override = tmp / "nothing-here";
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), not_found, "neither a directory nor a .whl");
  EXPECT_EQ(server.requests(file_path(tvm)) + server.requests(jit_path()), 0);
}

TEST_F(ArtifactsTest, InstalledPackagesUnderPythonPrefixes) {
  const fs::path site = tmp / "venv" / "lib" / "python3.12" / "site-packages";
  fs::create_directories(site / "tvm_ffi" / "lib");
  fs::create_directories(site / "tvm_ffi" / "include" / "tvm" / "ffi");
  fs::create_directories(site / "tvm_ffi" / "include" / "dlpack");
  std::ofstream(site / "tvm_ffi" / "lib" / "libtvm_ffi.so") << "installed";
  std::ofstream(site / "tvm_ffi" / "include" / "tvm" / "ffi" / "c_api.h") << "";
  std::ofstream(site / "tvm_ffi" / "include" / "dlpack" / "dlpack.h") << "";
  fs::create_directories(site / "flashinfer_jit_cache" / "jit_cache" / "norm");
  std::ofstream(site / "flashinfer_jit_cache" / "jit_cache" / "norm" / "norm.so") << "installed";
  cfg.python_prefixes = {tmp / "empty-prefix", tmp / "venv"};
  EXPECT_EQ(resolve_tvm_ffi_library(cfg), site / "tvm_ffi" / "lib" / "libtvm_ffi.so");
  EXPECT_EQ(resolve_tvm_ffi_include_dir(cfg), site / "tvm_ffi" / "include");
  EXPECT_EQ(*resolve_prebuilt_module(cfg, "norm"), site / "flashinfer_jit_cache" / "jit_cache" / "norm" / "norm.so");
  EXPECT_EQ(server.requests(file_path(tvm)) + server.requests(jit_path()), 0);
}

TEST_F(ArtifactsTest, BuildTreeInstallationWorksOffline) {
  EnvGuard env;
  clear_all(env);
  env.set("FLASHCPP_CACHE_DIR", (tmp / "c").string());
  env.set("FLASHCPP_OFFLINE", "1");
  const Settings c = Settings::from_env();
  ASSERT_FALSE(c.python_prefixes.empty());
  EXPECT_EQ(c.python_prefixes.back(), fs::path(artifacts::generated::kBuildDepsDir));
  const fs::path lib = resolve_tvm_ffi_library(c);
  EXPECT_TRUE(fs::is_regular_file(lib)) << lib;
  EXPECT_EQ(lib.filename(), "libtvm_ffi.so");
  EXPECT_TRUE(fs::exists(resolve_tvm_ffi_include_dir(c) / "tvm" / "ffi" / "c_api.h"));
  EXPECT_TRUE(fs::exists(resolve_flashinfer_sources(c) / "include"));
  EXPECT_FALSE(fs::exists(tmp / "c" / "wheels"));  // nothing came from the cache
  env.set("FLASHCPP_NO_BUILD_DEPS", "1");
  EXPECT_TRUE(Settings::from_env().python_prefixes.empty());
}

TEST_F(ArtifactsTest, ConfigFromEnvironment) {
  EnvGuard env;
  clear_all(env);
  env.set("HOME", (tmp / "home").string());
  Settings c = Settings::from_env();
  EXPECT_EQ(c.cache_dir, tmp / "home" / ".cache" / "flashcpp");
  EXPECT_FALSE(c.offline);
  env.set("XDG_CACHE_HOME", (tmp / "xdg").string());
  EXPECT_EQ(Settings::from_env().cache_dir, tmp / "xdg" / "flashcpp");
  env.set("FLASHCPP_CACHE_DIR", (tmp / "explicit").string());
  EXPECT_EQ(Settings::from_env().cache_dir, tmp / "explicit");

  // Index URL: pip configuration files, then PIP_INDEX_URL, then FLASHCPP_INDEX_URL (highest).
  fs::create_directories(tmp / "home" / ".config" / "pip");
  std::ofstream(tmp / "home" / ".config" / "pip" / "pip.conf") << "[global]\ntimeout = 60\nindex-url = http://user-conf.invalid/simple\n";
  c = Settings::from_env();
  EXPECT_EQ(c.index_url, "http://user-conf.invalid/simple");
  EXPECT_NE(c.index_url_source.find("pip.conf"), std::string::npos);
  std::ofstream(tmp / "explicit.conf") << "[install]\nindex_url=http://explicit-conf.invalid/simple\n";
  env.set("PIP_CONFIG_FILE", (tmp / "explicit.conf").string());
  EXPECT_EQ(Settings::from_env().index_url, "http://explicit-conf.invalid/simple");
  env.set("PIP_INDEX_URL", "http://pip-env.invalid/simple");
  EXPECT_EQ(Settings::from_env().index_url, "http://pip-env.invalid/simple");
  env.set("FLASHCPP_INDEX_URL", "http://flashcpp-env.invalid/simple");
  c = Settings::from_env();
  EXPECT_EQ(c.index_url, "http://flashcpp-env.invalid/simple");
  EXPECT_EQ(c.index_url_source, "FLASHCPP_INDEX_URL");

  env.set("FLASHCPP_OFFLINE", "1");
  env.set("FLASHCPP_RETRIES", "7");
  env.set("FLASHCPP_STALL_TIMEOUT", "2.5");
  env.set("FLASHCPP_PYTHON_PREFIXES", "/a:/b");
  env.set("FLASHCPP_TVM_FFI", "/x/tvm.whl");
  env.set("FLASHCPP_MANIFEST", "/x/m.json");
  c = Settings::from_env();
  EXPECT_TRUE(c.offline);
  EXPECT_EQ(c.max_retries, 7);
  EXPECT_DOUBLE_EQ(c.stall_timeout_s, 2.5);
  ASSERT_GE(c.python_prefixes.size(), 2u);
  EXPECT_EQ(c.python_prefixes[0], "/a");
  EXPECT_EQ(c.python_prefixes[1], "/b");
  EXPECT_EQ(c.tvm_ffi_override, "/x/tvm.whl");
  EXPECT_EQ(c.manifest_file, "/x/m.json");
  env.set("FLASHCPP_RETRIES", "many");
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_RETRIES");
  env.set("FLASHCPP_RETRIES", "1");
  env.set("FLASHCPP_CONNECT_TIMEOUT", "-1");
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_CONNECT_TIMEOUT");
  env.unset("FLASHCPP_CONNECT_TIMEOUT");

  // Bounds: on by default, each configurable.
  c = Settings::from_env();
  EXPECT_GT(c.deadline_s, 0);
  EXPECT_GT(c.min_rate_bytes_per_s, 0u);
  EXPECT_GT(c.max_wheel_bytes, 0u);
  EXPECT_GT(c.max_extract_bytes, 0u);
  EXPECT_GT(c.lock_timeout_s, c.deadline_s);  // a waiter outlasts a holder's download
  env.set("FLASHCPP_DOWNLOAD_DEADLINE", "90");
  env.set("FLASHCPP_MIN_RATE", "2K");
  env.set("FLASHCPP_MIN_RATE_TIME", "15");
  env.set("FLASHCPP_MAX_WHEEL_BYTES", "3G");
  env.set("FLASHCPP_MIN_FREE_BYTES", "0");
  env.set("FLASHCPP_MAX_EXTRACT_BYTES", "123456");
  env.set("FLASHCPP_MAX_COMPRESSION_RATIO", "50");
  env.set("FLASHCPP_LOCK_TIMEOUT", "7.5");
  c = Settings::from_env();
  EXPECT_DOUBLE_EQ(c.deadline_s, 90);
  EXPECT_EQ(c.min_rate_bytes_per_s, 2048u);
  EXPECT_DOUBLE_EQ(c.min_rate_window_s, 15);
  EXPECT_EQ(c.max_wheel_bytes, std::uint64_t{3} << 30);
  EXPECT_EQ(c.min_free_bytes, 0u);
  EXPECT_EQ(c.max_extract_bytes, 123456u);
  EXPECT_DOUBLE_EQ(c.max_compression_ratio, 50);
  EXPECT_DOUBLE_EQ(c.lock_timeout_s, 7.5);
  env.set("FLASHCPP_MAX_WHEEL_BYTES", "0");
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_MAX_WHEEL_BYTES");
  env.set("FLASHCPP_MAX_WHEEL_BYTES", "9999999T");
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_MAX_WHEEL_BYTES");
  env.set("FLASHCPP_MAX_WHEEL_BYTES", "12X");
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_MAX_WHEEL_BYTES");
  env.set("FLASHCPP_MAX_WHEEL_BYTES", "1G");
  env.set("FLASHCPP_MAX_COMPRESSION_RATIO", "0.5");
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_MAX_COMPRESSION_RATIO");
  env.set("FLASHCPP_MAX_COMPRESSION_RATIO", "50");
  env.set("FLASHCPP_LOCK_TIMEOUT", "forever");
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_LOCK_TIMEOUT");
}

TEST_F(ArtifactsTest, SwitchesAreZeroOrOneAndTheCacheDirIsADirectory) {
  EnvGuard env;
  clear_all(env);
  env.set("FLASHCPP_CACHE_DIR", (tmp / "cache").string());
  env.set("FLASHCPP_OFFLINE", "0");
  EXPECT_FALSE(Settings::from_env().offline);
  for (const char* v : {"yes", "false", "true", "on", "01"}) {
    SCOPED_TRACE(v);
    env.set("FLASHCPP_OFFLINE", v);
    EXPECT_THROW_CODE(Settings::from_env(), invalid_argument,
                      std::string("environment variable FLASHCPP_OFFLINE must be one of 0, 1; got '") + v + "'");
  }
  env.unset("FLASHCPP_OFFLINE");
  env.set("FLASHCPP_NO_BUILD_DEPS", "yes");
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_NO_BUILD_DEPS must be one of 0, 1");
  env.unset("FLASHCPP_NO_BUILD_DEPS");
  const fs::path file = tmp / "a-file";
  std::ofstream(file) << "x";
  env.set("FLASHCPP_CACHE_DIR", file.string());
  EXPECT_THROW_CODE(Settings::from_env(), invalid_argument, "FLASHCPP_CACHE_DIR must be a directory");
}

TEST_F(ArtifactsTest, BuiltinManifestIsPinned) {
  const Manifest m = Manifest::builtin();
  EXPECT_TRUE(m.cuda_tag == "cu130" || m.cuda_tag == "cu131") << m.cuda_tag;
  EXPECT_TRUE(m.arch == "x86_64" || m.arch == "aarch64") << m.arch;
  for (const WheelPin* p : m.all()) {
    SCOPED_TRACE(p->name);
    EXPECT_EQ(p->sha256.size(), 64u);
    EXPECT_EQ(p->sha256.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_NE(p->filename.find(".whl"), std::string::npos);
    EXPECT_TRUE(!p->url.empty() || !p->project.empty());
  }
  EXPECT_EQ(m.jit_cache.url.rfind("https://github.com/flashinfer-ai/flashinfer/releases/download/v0.6.3/", 0), 0u);
  EXPECT_NE(m.jit_cache.filename.find(m.arch), std::string::npos);
  if (m.arch == "x86_64") {
    EXPECT_EQ(m.jit_cache.sha256, "e5b0560aa02befa2964c76b8f9302959ed9fb2f558765b974753d68c4f8b4e1e");
    EXPECT_EQ(m.tvm_ffi.sha256, "21365abd2a2a1a6d3b4e6e4f048309651125becfa795440c3607f3cc27d30ac7");
  }
  EXPECT_TRUE(m.tvm_ffi.url.empty());  // only through the configured index
  EXPECT_EQ(m.tvm_ffi.project, "apache-tvm-ffi");
}

TEST_F(ArtifactsTest, UserManifestIsValidated) {
  const Manifest m = Manifest::load(cfg.manifest_file);
  EXPECT_EQ(m.tvm_ffi.sha256, tvm.sha256);
  EXPECT_EQ(m.tvm_ffi.size, tvm.bytes.size());
  EXPECT_EQ(m.jit_cache.url, server.url(jit_path()));
  std::ofstream(tmp / "bad.json") << R"({"apache_tvm_ffi": {"filename": "x.whl", "sha256": "ABC"}})";
  EXPECT_THROW_CODE(Manifest::load(tmp / "bad.json"), invalid_argument, "sha256");
  std::ofstream(tmp / "bad2.json") << "{not json";
  EXPECT_THROW_CODE(Manifest::load(tmp / "bad2.json"), invalid_argument, "not valid JSON");
  EXPECT_THROW_CODE(Manifest::load(tmp / "missing.json"), not_found, "missing.json");
  std::ofstream(tmp / "bad3.json") << R"({"apache_tvm_ffi": {"filename": "../x.whl", "sha256": ")" << tvm.sha256 << "\"}}";
  EXPECT_THROW_CODE(Manifest::load(tmp / "bad3.json"), invalid_argument, "filename");
  // Found by fuzzing (docs/FUZZING.md): a value of the wrong JSON type escaped as nlohmann-json's type_error
  // (FLASHCPP_INTERNAL through the C ABI) and a negative size wrapped to 2^64 - 1.
  std::ofstream(tmp / "bad4.json") << R"({"cuda_tag": 130})";
  EXPECT_THROW_CODE(Manifest::load(tmp / "bad4.json"), invalid_argument, "'cuda_tag' must be a string");
  std::ofstream(tmp / "bad5.json") << R"({"arch": ["x86_64"]})";
  EXPECT_THROW_CODE(Manifest::load(tmp / "bad5.json"), invalid_argument, "'arch' must be a string");
  for (const char* size : {"-1", "1.5", "\"12\""}) {
    std::ofstream(tmp / "bad6.json") << R"({"apache_tvm_ffi": {"filename": "x.whl", "sha256": ")" << tvm.sha256
                                     << R"(", "project": "p", "size": )" << size << "}}";
    EXPECT_THROW_CODE(Manifest::load(tmp / "bad6.json"), invalid_argument, "size' must be a non-negative whole number");
  }
}

// A pip configuration file that is a FIFO is refused (it used to hang Settings::from_env, so every command); a missing
// one is skipped as pip skips it.
TEST_F(ArtifactsTest, PipConfigFileThatIsAFifoIsRefusedNotWaitedOn) {
  EnvGuard env;
  clear_all(env);
  env.set("HOME", (tmp / "home").string());
  const fs::path fifo = tmp / "pip.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  env.set("PIP_CONFIG_FILE", fifo.string());
  EXPECT_THROW_CODE((void)Settings::from_env(), invalid_argument,
                    "pip configuration file '" + fifo.string() + "' must be a regular file (not a FIFO)");
  env.set("PIP_CONFIG_FILE", (tmp / "absent.conf").string());
  EXPECT_NO_THROW((void)Settings::from_env());
}

// FLASHCPP_MANIFEST names a file a user controls: a FIFO (which used to hang every command reading it), a directory,
// a file above 16 MiB and JSON nested deeper than 64 levels (100,000 deep overflowed the stack) are refused, typed.
TEST_F(ArtifactsTest, UserManifestMustBeASmallRegularFileOfShallowJson) {
  const fs::path fifo = tmp / "manifest.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW_CODE(Manifest::load(fifo), invalid_argument, "FLASHCPP_MANIFEST file '" + fifo.string() +
                                                               "' must be a regular file (not a FIFO)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_THROW_CODE(Manifest::load(tmp), invalid_argument, "must be a regular file (not a directory)");
  {
    std::ofstream big(tmp / "big.json");
    big << "{\"cuda_tag\": \"" << std::string((16u << 20) + 1, 'x') << "\"}";
  }
  EXPECT_THROW_CODE(Manifest::load(tmp / "big.json"), invalid_argument, "must be at most 16777216 bytes");
  for (const int depth : {65, 100000}) {
    std::ofstream(tmp / "deep.json") << "{\"a\": " << std::string(depth - 1, '[') << std::string(depth - 1, ']') << "}";
    EXPECT_THROW_CODE(Manifest::load(tmp / "deep.json"), invalid_argument, "nests arrays and objects more than 64 levels deep");
  }
  std::ofstream(tmp / "deep.json") << "{\"a\": " << std::string(63, '[') << std::string(63, ']') << "}";
  EXPECT_NO_THROW(Manifest::load(tmp / "deep.json"));  // 64 levels: read (the unknown key is ignored)
  // The same rules through Settings::manifest() (what `doctor` and `fetch` call).
  Settings c = cfg;
  c.manifest_file = fifo;
  EXPECT_THROW_CODE((void)c.manifest(), invalid_argument, "not a FIFO");
}

TEST_F(ArtifactsTest, CacheListVerifyPrune) {
  ASSERT_TRUE(resolve_prebuilt_module(cfg, "norm"));
  resolve_tvm_ffi_library(cfg);
  // A stray partial download of an unpinned wheel and a stale temporary.
  const fs::path stray = cfg.cache_dir / "wheels" / std::string(64, 'c');
  fs::create_directories(stray);
  std::ofstream(stray / "old.whl.part") << "partial";
  std::ofstream(cfg.cache_dir / "extract" / (tvm.sha256) / "x.tmp-1-0") << "tmp";
  auto ls = cache_list(cfg);
  int wheels = 0, partial = 0, temporary = 0, extracted = 0;
  for (const auto& e : ls) {
    wheels += e.kind == "wheel";
    partial += e.kind == "partial";
    temporary += e.kind == "temporary";
    extracted += e.kind == "extracted";
    if (e.kind == "wheel") {
      EXPECT_TRUE(e.verified) << e.path;
      EXPECT_TRUE(e.pinned) << e.path;
    }
  }
  EXPECT_EQ(wheels, 2);
  EXPECT_EQ(partial, 1);
  EXPECT_EQ(temporary, 1);
  EXPECT_EQ(extracted, 2);
  for (const auto& e : cache_verify(cfg)) EXPECT_TRUE(e.verified) << e.path;
  const auto removed = cache_prune(cfg, false, false);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_TRUE(leftovers().empty());
  EXPECT_TRUE(fs::exists(cached_wheel_path(cfg, cfg.manifest().tvm_ffi)));
  // Pruning unpinned entries: after switching the pin away, the old wheel goes.
  write_manifest(std::string(64, 'd'));
  cache_prune(cfg, true, false);
  EXPECT_FALSE(fs::exists(cfg.cache_dir / "wheels" / tvm.sha256));
  EXPECT_TRUE(fs::exists(cfg.cache_dir / "wheels" / jit.sha256));
  cache_prune(cfg, false, true);
  EXPECT_TRUE(cache_list(cfg).empty());
}

}  // namespace
}  // namespace flashcpp::testing
