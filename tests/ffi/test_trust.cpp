// The trust rules of the ffi layer: the path rule checked before every dlopen (a hostile directory, a
// group-writable file, a foreign owner, symbolic links), the modes of what flashcpp creates whatever the umask,
// and the SHA-256 records of modules. A module whose constructor leaves a marker file shows that a refused
// load never ran any of its code (and the trusted case shows that the marker does appear when it runs).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ffi/ffi.hpp"
#include "ffi/trust.hpp"
#include "runtime/runtime_internal.hpp"

namespace fs = std::filesystem;
using namespace flashcpp;
using namespace flashcpp::ffi;

namespace {

constexpr uid_t kOtherUid = 65534;  // "nobody"

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class TrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_umask_ = ::umask(022);  // tests set the umask they mean; the real one does not matter
    std::string t = (fs::temp_directory_path() / "flashcpp-trust-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
    marker_ = dir_ / "constructor-ran";
    ::setenv("FLASHCPP_TEST_MARKER", marker_.c_str(), 1);
    Library::load(FLASHCPP_TVM_FFI_LIB);  // modules open only after libtvm_ffi
  }
  void TearDown() override {
    ::umask(saved_umask_);
    ::unsetenv("FLASHCPP_TEST_MARKER");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // A copy of the marker module at `dir`/marker/marker.so (the FLASHCPP_MODULE_PATH layout), mode 0755.
  fs::path place_marker(const fs::path& dir) {
    const fs::path so = dir / "marker" / "marker.so";
    fs::create_directories(so.parent_path());
    fs::copy_file(FLASHCPP_MARKER_MODULE, so, fs::copy_options::overwrite_existing);
    ::chmod(so.c_str(), 0755);
    return so;
  }
  // A directory created with exactly `mode` (the umask is cleared for it).
  fs::path make_dir(const fs::path& p, mode_t mode) {
    const mode_t old = ::umask(0);
    EXPECT_EQ(::mkdir(p.c_str(), mode), 0) << p;
    ::umask(old);
    return p;
  }
  // Opening `so` is refused as untrusted with `why` in the message, and the module's code never ran.
  void expect_refused(const fs::path& so, const std::string& why) {
    try {
      ModuleLibrary::open(so);
      ADD_FAILURE() << "loaded " << so;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::untrusted) << e.what();
      EXPECT_NE(e.message().find(why), std::string::npos) << e.what();
      EXPECT_NE(e.message().find("The rule:"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(marker_)) << "the refused module's constructor ran";
  }

  fs::path dir_, marker_;
  mode_t saved_umask_ = 022;
};

TEST_F(TrustTest, TrustedModuleLoadsAndItsConstructorLeavesTheMarker) {
  const fs::path so = place_marker(dir_);
  auto lib = ModuleLibrary::open(so);
  EXPECT_EQ(read_all(marker_), "constructor ran\n");
  EXPECT_NE(lib->find_symbol("flashcpp_marker_module_answer"), nullptr);
}

TEST_F(TrustTest, WorldWritableDirectoryIsRefused) {
  const fs::path cache = make_dir(dir_ / "cache", 0777);
  const fs::path so = place_marker(cache);
  expect_refused(so, "directory '" + cache.string() + "' is writable by group and others (mode 0777)");
}

TEST_F(TrustTest, GroupWritableModuleFileIsRefused) {
  const fs::path so = place_marker(dir_);
  ::chmod(so.c_str(), 0775);
  expect_refused(so, "file '" + so.string() + "' is writable by group (mode 0775)");
}

TEST_F(TrustTest, AnyDirectoryUpThePathCounts) {
  const fs::path top = make_dir(dir_ / "top", 0757);  // writable by others, three levels up
  const fs::path mid = make_dir(top / "mid", 0755);
  const fs::path so = place_marker(mid);
  expect_refused(so, "directory '" + top.string() + "' is writable by others (mode 0757)");
}

TEST_F(TrustTest, SymbolicLinksAreCheckedWhereTheyPointAndWhereTheyLie) {
  // A link in a private directory to a module in a world-writable one: the target's directory counts.
  const fs::path hostile = make_dir(dir_ / "hostile", 0777);
  const fs::path target = place_marker(hostile);
  fs::create_directories(dir_ / "safe" / "marker");
  fs::create_symlink(target, dir_ / "safe" / "marker" / "marker.so");
  expect_refused(dir_ / "safe" / "marker" / "marker.so", "directory '" + hostile.string() + "'");
  // A link that lies in a world-writable directory (anyone could re-point it) to a private module.
  const fs::path good = place_marker(dir_ / "good");
  fs::create_symlink(good.parent_path(), hostile / "link");
  expect_refused(hostile / "link" / "marker.so", "directory '" + hostile.string() + "'");
}

TEST_F(TrustTest, ForeignOwnerIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user (chown); running as uid " << ::geteuid();
  const fs::path so = place_marker(dir_ / "file-owner");
  ASSERT_EQ(::chown(so.c_str(), kOtherUid, kOtherUid), 0);
  expect_refused(so, "file '" + so.string() + "' is owned by uid 65534, not by you (uid 0) or root");
  const fs::path foreign = make_dir(dir_ / "foreign", 0755);
  ASSERT_EQ(::chown(foreign.c_str(), kOtherUid, kOtherUid), 0);
  expect_refused(place_marker(foreign), "directory '" + foreign.string() + "' is owned by uid 65534");
}

TEST_F(TrustTest, StickyDirectoryIsAcceptedOnlyWhenRootOwnsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make root- and other-owned sticky directories";
  const fs::path other_sticky = make_dir(dir_ / "other-sticky", 01777);
  ASSERT_EQ(::chown(other_sticky.c_str(), kOtherUid, kOtherUid), 0);
  expect_refused(place_marker(other_sticky), "directory '" + other_sticky.string() + "' is owned by uid 65534");
  const fs::path root_sticky = make_dir(dir_ / "root-sticky", 01777);  // like /tmp
  auto lib = ModuleLibrary::open(place_marker(root_sticky));
  EXPECT_TRUE(fs::exists(marker_));
}

TEST_F(TrustTest, RuntimeModulePathIsChecked) {
  const fs::path hostile = make_dir(dir_ / "module-path", 0777);
  place_marker(hostile);
  RuntimeOptions o;
  o.tvm_ffi_library = FLASHCPP_TVM_FFI_LIB;
  o.module_dirs = {hostile};
  o.use_artifacts = false;
  auto rt = Runtime::create(o);
  try {
    load_module(*rt, "marker");
    ADD_FAILURE() << "the runtime loaded a module from a world-writable FLASHCPP_MODULE_PATH entry";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::untrusted) << e.what();
    EXPECT_NE(e.message().find("writable by group and others"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(marker_));
  EXPECT_TRUE(rt->loaded_modules().empty());
}

TEST_F(TrustTest, LibtvmFfiInAWritableDirectoryIsRefusedBeforeAnythingElse) {
  const fs::path hostile = make_dir(dir_ / "lib", 0777);
  fs::copy_file(FLASHCPP_TVM_FFI_LIB, hostile / "libtvm_ffi.so");
  try {
    Library::load(hostile / "libtvm_ffi.so");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::untrusted) << e.what();
    EXPECT_NE(e.message().find("refusing to load libtvm_ffi"), std::string::npos) << e.what();
  }
}

TEST_F(TrustTest, CreatedDirectoriesHaveExactlyTheirModeWhateverTheUmask) {
  ::umask(0);
  create_directories(dir_ / "a" / "b" / "c", kPrivateDirMode);
  for (const fs::path& p : {dir_ / "a", dir_ / "a" / "b", dir_ / "a" / "b" / "c"}) EXPECT_EQ(mode_of(p), 0700u) << p;
  ::umask(077);
  create_directories(dir_ / "s" / "t", kSharedDirMode);
  EXPECT_EQ(mode_of(dir_ / "s"), 0755u);
  EXPECT_EQ(mode_of(dir_ / "s" / "t"), 0755u);
  create_directories(dir_ / "a", kSharedDirMode);  // an existing directory keeps its mode
  EXPECT_EQ(mode_of(dir_ / "a"), 0700u);
  std::ofstream(dir_ / "file") << "x";
  try {
    create_directories(dir_ / "file" / "sub", kSharedDirMode);
    ADD_FAILURE() << "created a directory below a file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    EXPECT_NE(e.message().find("cannot create '" + (dir_ / "file" / "sub").string() + "'"), std::string::npos) << e.what();
  }
}

TEST_F(TrustTest, RecordMatchesWithoutReadingAndCatchesASwappedModule) {
  const fs::path so = place_marker(dir_);
  EXPECT_EQ(check_module_record(so), RecordCheck::missing);
  const std::string sha = file_sha256(so);
  write_module_record(so, sha);
  EXPECT_EQ(mode_of(module_record_path(so)), 0644u);
  EXPECT_EQ(check_module_record(so), RecordCheck::matches);
  // Replaced by other bytes (a new file renamed over it): refused, both hashes and the rule named.
  const fs::path other = dir_ / "other.so";
  fs::copy_file(FLASHCPP_TEST_MODULE, other);
  const std::string other_sha = file_sha256(other);
  fs::rename(other, so);
  try {
    check_module_record(so);
    ADD_FAILURE() << "a swapped module matched its record";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::untrusted) << e.what();
    EXPECT_NE(e.message().find("its SHA-256 is " + other_sha + ", not the " + sha + " recorded"), std::string::npos)
        << e.what();
    EXPECT_NE(e.message().find("The rule:"), std::string::npos) << e.what();
  }
}

TEST_F(TrustTest, EditThatRestoresSizeAndMtimeIsStillCaught) {
  const fs::path so = place_marker(dir_);
  write_module_record(so, file_sha256(so));
  const auto mtime = fs::last_write_time(so);
  const auto size = fs::file_size(so);
  ::usleep(20000);  // past the file system's timestamp granularity (a clock tick)
  {
    std::fstream f(so, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    const char c = static_cast<char>(f.get());
    f.seekp(200);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  fs::last_write_time(so, mtime);
  ASSERT_EQ(fs::file_size(so), size);
  EXPECT_THROW(check_module_record(so), Error);
}

TEST_F(TrustTest, UnchangedBytesWithANewCtimeMatchAndTheRecordIsRefreshed) {
  const fs::path so = place_marker(dir_);
  write_module_record(so, file_sha256(so));
  const std::string before = read_all(module_record_path(so));
  ::usleep(20000);
  ::chmod(so.c_str(), 0750);  // moves the ctime, keeps the bytes
  EXPECT_EQ(check_module_record(so), RecordCheck::matches);
  const std::string after = read_all(module_record_path(so));
  EXPECT_NE(after, before);
  EXPECT_EQ(after.substr(0, 84), before.substr(0, 84));  // magic and hash kept, identity refreshed
}

TEST_F(TrustTest, MalformedRecordCountsAsMissing) {
  const fs::path so = place_marker(dir_);
  std::ofstream(module_record_path(so)) << "flashcpp-module-v1 not-a-hash size=1\n";
  EXPECT_EQ(check_module_record(so), RecordCheck::missing);
}

}  // namespace
