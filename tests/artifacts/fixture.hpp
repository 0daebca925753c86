// Shared fixture of the artifacts tests: a temp directory, a loopback server serving generated wheels, a user
// manifest pinning them and a Settings that never reaches beyond 127.0.0.1.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "artifacts/http_server.hpp"
#include "artifacts/wheel_builder.hpp"
#include "flashcpp/artifacts.hpp"

namespace flashcpp::testing {

namespace fs = std::filesystem;

struct TestWheel {
  std::string filename;
  std::string bytes;
  std::string sha256;
  fs::path local;  // the generated file
};

class ArtifactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "flashcpp-artifacts-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    tmp = tmpl;
    fs::create_directories(tmp / "gen");
    lib_bytes = random_bytes(600 * 1024, 1);
    norm_bytes = random_bytes(200 * 1024, 2);
    tvm = build("apache_tvm_ffi-0.1.9-cp311-cp311-manylinux_2_28_x86_64.whl",
                {{"tvm_ffi/__init__.py", "# test\n"},
                 {"tvm_ffi/lib/libtvm_ffi.so", lib_bytes},
                 {"tvm_ffi/include/tvm/ffi/c_api.h", "// c_api\n"},
                 {"tvm_ffi/include/dlpack/dlpack.h", "// dlpack\n"},
                 {"apache_tvm_ffi-0.1.9.dist-info/RECORD", ""}});
    jit = build("flashinfer_jit_cache-0.6.3+cu130-cp39-abi3-manylinux_2_28_x86_64.whl",
                {{"flashinfer_jit_cache/__init__.py", ""},
                 {"flashinfer_jit_cache/jit_cache/norm/norm.so", norm_bytes},
                 {"flashinfer_jit_cache/jit_cache/page/page.so", random_bytes(1000, 3)}});
    fip = build("flashinfer_python-0.6.3-py3-none-any.whl",
                {{"flashinfer/__init__.py", ""},
                 {"flashinfer/data/include/flashinfer/norm.cuh", "// norm\n"},
                 {"flashinfer/data/csrc/norm.cu", "// csrc\n"},
                 {"flashinfer/data/spdlog/include/spdlog/spdlog.h", "// spdlog\n"}});
    serve_index(tvm, "apache-tvm-ffi");
    serve_index(fip, "flashinfer-python");
    server.set(jit_path(), Route{jit.bytes});
    write_manifest();

    cfg.cache_dir = tmp / "cache";
    cfg.index_url = server.url("/simple/");
    cfg.index_url_source = "test";
    cfg.connect_timeout_s = 2;
    cfg.stall_timeout_s = 1;
    cfg.max_retries = 2;
    cfg.retry_backoff_s = 0.02;
    cfg.manifest_file = tmp / "manifest.json";
  }
  void TearDown() override {
    server.stop();
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }

  TestWheel build(const std::string& filename, const std::vector<WheelMember>& members) {
    TestWheel w;
    w.filename = filename;
    w.local = tmp / "gen" / filename;
    w.bytes = make_wheel(w.local, members);
    w.sha256 = sha256_hex(w.bytes);
    return w;
  }
  static std::string file_path(const TestWheel& w) { return "/files/" + w.filename; }
  std::string jit_path() const { return "/releases/download/v0.6.3/" + jit.filename; }
  void serve_index(const TestWheel& w, const std::string& project, const std::string& listed_sha = "") {
    const std::string sha = listed_sha.empty() ? w.sha256 : listed_sha;
    // Relative hrefs, as PEP 503 indexes commonly serve them.
    const std::string html = "<!DOCTYPE html><html><body>\n<a href=\"../../files/other-1.0.whl#sha256=" +
                             std::string(64, '0') + "\">other-1.0.whl</a>\n<a href=\"../../files/" + w.filename +
                             "#sha256=" + sha + "\" data-requires-python=\"&gt;=3.9\">" + w.filename + "</a>\n</body></html>\n";
    server.set("/simple/" + project + "/", Route{html, "", 200, "", "text/html"});
    server.set(file_path(w), Route{w.bytes});
  }
  void write_manifest(const std::string& tvm_sha = "", std::uint64_t tvm_size = 0, const std::string& jit_url = "") {
    nlohmann::json j;
    j["apache_tvm_ffi"] = {{"filename", tvm.filename}, {"sha256", tvm_sha.empty() ? tvm.sha256 : tvm_sha},
                           {"size", tvm_size ? tvm_size : tvm.bytes.size()}, {"project", "apache-tvm-ffi"}};
    j["flashinfer_jit_cache"] = {{"filename", jit.filename}, {"sha256", jit.sha256},
                                 {"url", jit_url.empty() ? server.url(jit_path()) : jit_url}};
    j["flashinfer_python"] = {{"filename", fip.filename}, {"sha256", fip.sha256}, {"project", "flashinfer-python"}};
    std::ofstream(tmp / "manifest.json") << j.dump(2);
  }
  // Files anywhere under the cache whose names mark them as partial or temporary.
  std::vector<fs::path> leftovers() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(cfg.cache_dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.find(".part") != std::string::npos || n.find(".tmp-") != std::string::npos || n.rfind(".staging", 0) == 0)
        out.push_back(it->path());
    }
    return out;
  }

  fs::path tmp;
  HttpServer server;
  std::string lib_bytes, norm_bytes;
  TestWheel tvm, jit, fip;
  artifacts::Settings cfg;
};

#define EXPECT_THROW_CODE(stmt, error_code, substr)                                                       \
  do {                                                                                                    \
    try {                                                                                                 \
      stmt;                                                                                               \
      ADD_FAILURE() << "expected flashcpp::Error(" #error_code ")";                                       \
    } catch (const ::flashcpp::Error& e__) {                                                              \
      EXPECT_EQ(e__.code(), ::flashcpp::ErrorCode::error_code) << e__.what();                             \
      EXPECT_NE(std::string(e__.what()).find(substr), std::string::npos) << "message: " << e__.what();    \
    }                                                                                                     \
  } while (0)

}  // namespace flashcpp::testing
