// The ffi layer against the real libtvm_ffi and a module built with the real tvm-ffi headers.
#include <gtest/gtest.h>

#include <atomic>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "core/elf_symbols.hpp"
#include "ffi/ffi.hpp"

namespace fs = std::filesystem;
using namespace flashcpp;
using namespace flashcpp::ffi;
namespace fabi = flashcpp::ffi::abi;

namespace {

class FfiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Library::load(FLASHCPP_TVM_FFI_LIB);
    module_ = ModuleLibrary::open(FLASHCPP_TEST_MODULE);
  }
  static void TearDownTestSuite() { module_.reset(); }
  static fabi::SafeCall fn(const char* name) { return module_->function(name); }
  static inline std::shared_ptr<ModuleLibrary> module_;
};

TEST_F(FfiTest, LibraryReportsA01Version) {
  const Library& lib = Library::instance();
  EXPECT_EQ(lib.version().major, 0u);
  EXPECT_EQ(lib.version().minor, 1u);
  EXPECT_EQ(lib.version_string().rfind("0.1.", 0), 0u);
}

// The module's one-time setup flag is found by name in its .dynsym, and clearing it through the
// address dlsym gives makes the module run its setup again (gdn.cpp relies on exactly this).
TEST_F(FfiTest, ModuleStateFoundInDynsymAndClearedFromOutside) {
  const auto names = elf_dynamic_symbols_containing(module_->path(), "14is_initializedEbE11initialized");
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0], "_ZZN13flashcpp_test9OnceSetupIiE14is_initializedEbE11initialized");
  EXPECT_TRUE(elf_dynamic_symbols_containing(module_->path(), "no_such_symbol_fragment").empty());
  auto* flag = static_cast<bool*>(module_->find_symbol(names[0]));
  ASSERT_NE(flag, nullptr);
  EXPECT_EQ(module_->find_symbol("no_such_symbol"), nullptr);

  Any r;
  call(fn("once_setup"), {}, &r, nullptr);  // the first call runs the setup
  EXPECT_FALSE(r.as_bool());
  EXPECT_TRUE(*flag);
  call(fn("once_setup"), {}, &r, nullptr);
  EXPECT_TRUE(r.as_bool());
  *flag = false;  // re-arm
  call(fn("once_setup"), {}, &r, nullptr);
  EXPECT_FALSE(r.as_bool()) << "the module did not see the cleared flag";
}

// A file that is not ELF has no dynamic symbols; a vanished file is an io_error naming it.
TEST(FfiModuleSymbols, NonElfAndMissingFiles) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("flashcpp-syms-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto copy = dir / "module.so";
  std::filesystem::copy_file(FLASHCPP_TEST_MODULE, copy, std::filesystem::copy_options::overwrite_existing);
  Library::load(FLASHCPP_TVM_FFI_LIB);
  auto m = ModuleLibrary::open(copy);
  // Replaced, not rewritten: the loaded mapping keeps the old file.
  { std::ofstream(dir / "other", std::ios::trunc) << "not an ELF file"; }
  std::filesystem::rename(dir / "other", copy);
  EXPECT_TRUE(elf_dynamic_symbols_containing(m->path(), "initialized").empty());
  std::filesystem::remove(copy);
  try {
    (void)elf_dynamic_symbols_containing(m->path(), "initialized");
    ADD_FAILURE() << "expected io_error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    EXPECT_NE(std::string(e.what()).find("module.so"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST_F(FfiTest, ScalarRoundTrips) {
  Any r;
  Arg a1[] = {Arg(int64_t{-1234567890123})};
  call(fn("echo_int"), a1, &r, nullptr);
  EXPECT_EQ(r.as_int(), -1234567890123);

  Arg a2[] = {Arg(true)};
  call(fn("echo_bool"), a2, &r, nullptr);
  EXPECT_EQ(r.type_index(), fabi::kBool);
  EXPECT_TRUE(r.as_bool());
  Arg a2b[] = {Arg(false)};
  call(fn("echo_bool"), a2b, &r, nullptr);
  EXPECT_FALSE(r.as_bool());

  Arg a3[] = {Arg(3.25e-7)};
  call(fn("echo_float"), a3, &r, nullptr);
  EXPECT_DOUBLE_EQ(r.as_float(), 3.25e-7);

  int anchor = 0;
  Arg a4[] = {Arg::opaque_ptr(&anchor)};
  call(fn("echo_ptr"), a4, &r, nullptr);
  EXPECT_EQ(r.as_opaque_ptr(), &anchor);
  Arg a4n[] = {Arg(nullptr)};  // None converts to a null void*
  call(fn("echo_ptr"), a4n, &r, nullptr);
  EXPECT_EQ(r.as_opaque_ptr(), nullptr);

  Arg a5[] = {Arg::dtype(DType::bf16)};
  call(fn("echo_dtype"), a5, &r, nullptr);
  EXPECT_EQ(r.as_string(), "4:16:1");
  Arg a5b[] = {Arg::dtype(DType::e4m3)};
  call(fn("echo_dtype"), a5b, &r, nullptr);
  EXPECT_EQ(r.as_string(), "10:8:1");

  Arg a6[] = {Arg::device(Device::cuda(3))};
  call(fn("echo_device"), a6, &r, nullptr);
  EXPECT_EQ(r.as_int(), 203);

  // Short strings come back as SmallStr, long ones as a String object (owned, released by Any).
  Arg a7[] = {Arg("hi")};
  call(fn("echo_string"), a7, &r, nullptr);
  EXPECT_EQ(r.as_string(), "hi");
  const std::string long_text(100, 'x');
  Arg a8[] = {Arg(long_text.c_str())};
  call(fn("echo_string"), a8, &r, nullptr);
  EXPECT_EQ(r.type_index(), fabi::kStr);
  EXPECT_EQ(r.as_string(), long_text);
}

TEST_F(FfiTest, TensorsArePackedWithStridesAndZeroByteOffset) {
  std::vector<float> data(6 * 5);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i + 1);
  // A transposed, strided view: shape [5, 3], strides [1, 10] over a 6x5 buffer (every other column).
  TensorView v = TensorView::strided(data.data(), DType::f32, Device::cpu(), {5, 3}, {1, 10});
  TensorArg t(v);
  Any r;
  Arg a[] = {Arg(t)};
  call(fn("tensor_info"), a, &r, nullptr);
  EXPECT_EQ(r.as_string(), "2:32 [5,3] [1,10] 1:0 0");
  call(fn("sum2d_f32"), a, &r, nullptr);
  double expected = 0;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) expected += data[static_cast<size_t>(i + 10 * j)];
  EXPECT_DOUBLE_EQ(r.as_float(), expected);
}

TEST_F(FfiTest, OptionalTensorAcceptsNoneAndDLTensor) {
  float x = 1;
  TensorArg t(TensorView::contiguous(&x, DType::f32, Device::cpu(), {1}));
  Any r;
  Arg none[] = {Arg(nullptr)};
  call(fn("has_tensor"), none, &r, nullptr);
  EXPECT_FALSE(r.as_bool());
  Arg some[] = {Arg(t)};
  call(fn("has_tensor"), some, &r, nullptr);
  EXPECT_TRUE(r.as_bool());
}

TEST_F(FfiTest, TensorObjectsForTensorTypedParameters) {
  std::vector<float> buf(12, 1.f);
  TensorView v = TensorView::contiguous(buf.data(), DType::f32, Device::cpu(), {3, 4});
  // A raw DLTensor* is refused for an ffi::Tensor parameter...
  TensorArg raw(v);
  Arg bad[] = {Arg(raw)};
  try {
    call(fn("tensor_object_numel"), bad, nullptr, nullptr);
    FAIL() << "expected a TypeError";
  } catch (const FfiError& e) {
    EXPECT_EQ(e.kind(), "TypeError");
  }
  // ...a Tensor object is accepted, alone or in an Array<Tensor>.
  TensorObject obj = TensorObject::from_view(v);
  EXPECT_EQ(obj.type_index(), fabi::kTensor);
  Any r;
  Arg good[] = {Arg(obj)};
  call(fn("tensor_object_numel"), good, &r, nullptr);
  EXPECT_EQ(r.as_int(), 12);
  TensorObject obj2 = TensorObject::from_view(TensorView::contiguous(buf.data(), DType::f32, Device::cpu(), {5}));
  std::vector<ObjectRef> objs{obj, obj2};
  Array arr = Array::from_objects(objs);
  EXPECT_EQ(arr.size(), 2);
  Arg arr_arg[] = {Arg(arr)};
  call(fn("tensor_array_numel"), arr_arg, &r, nullptr);
  EXPECT_EQ(r.as_int(), 17);
}

TEST_F(FfiTest, ArrayResultsAreReadAndReleased) {
  Any r;
  Arg a[] = {Arg(int64_t{5})};
  call(fn("iota"), a, &r, nullptr);
  ASSERT_EQ(r.type_index(), fabi::kArray);
  Array arr(r.take_object());
  EXPECT_TRUE(r.is_none());
  EXPECT_EQ(fabi::strong_count(arr.get()), 1u);
  EXPECT_EQ(arr.to_int64(), (std::vector<int64_t>{0, 10, 20, 30, 40}));
  {
    Array copy = arr;  // IncRef
    EXPECT_EQ(fabi::strong_count(arr.get()), 2u);
  }
  EXPECT_EQ(fabi::strong_count(arr.get()), 1u);
  // The same object passed back as an argument (as a plan-info array is).
  Arg back[] = {Arg(arr)};
  call(fn("array_sum"), back, &r, nullptr);
  EXPECT_EQ(r.as_int(), 100);
  EXPECT_EQ(fabi::strong_count(arr.get()), 1u);
  Array built = Array::from_int64(std::vector<int64_t>{7, 8, 9});
  Arg built_arg[] = {Arg(built)};
  call(fn("array_sum"), built_arg, &r, nullptr);
  EXPECT_EQ(r.as_int(), 24);
}

// A Function object whose deleter counts: proves every reference taken along the way is released.
std::atomic<int> g_deleted{0};
int constant_seven(void*, const fabi::Any*, int32_t, fabi::Any* result) {
  result->type_index = fabi::kInt;
  result->v_int64 = 7;
  return 0;
}

TEST_F(FfiTest, ObjectsPassedThroughACalleeAreReleasedExactlyOnce) {
  g_deleted = 0;
  {
    void* raw = nullptr;
    ASSERT_EQ(api().FunctionCreate(nullptr, &constant_seven, [](void*) { g_deleted++; }, &raw), 0);
    Function f(ObjectRef::adopt(raw));
    Any r;
    Arg a[] = {Arg(f)};
    call(fn("identity"), a, &r, nullptr);  // returns a new strong reference
    ASSERT_EQ(r.type_index(), fabi::kFunction);
    EXPECT_EQ(fabi::strong_count(f.get()), 2u);
    Function g(r.take_object());
    Any seven;
    call(g, {}, &seven, nullptr);
    EXPECT_EQ(seven.as_int(), 7);
    EXPECT_EQ(g_deleted.load(), 0);
  }
  EXPECT_EQ(g_deleted.load(), 1);
}

TEST_F(FfiTest, WrongArgumentCountAndTypeGiveTypeError) {
  Arg two[] = {Arg(int64_t{1}), Arg(int64_t{2})};
  try {
    call(fn("echo_int"), two, nullptr, nullptr);
    FAIL();
  } catch (const FfiError& e) {
    EXPECT_EQ(e.kind(), "TypeError");
    EXPECT_NE(e.ffi_message().find("echo_int"), std::string::npos) << e.ffi_message();
    EXPECT_NE(e.ffi_message().find("argument"), std::string::npos) << e.ffi_message();
  }
  float x = 0;
  TensorArg t(TensorView::contiguous(&x, DType::f32, Device::cpu(), {1}));
  Arg wrong[] = {Arg(t)};
  try {
    call(fn("echo_int"), wrong, nullptr, nullptr);
    FAIL();
  } catch (const FfiError& e) {
    EXPECT_EQ(e.kind(), "TypeError");
    EXPECT_NE(e.ffi_message().find("Mismatched type on argument #0"), std::string::npos) << e.ffi_message();
  }
}

TEST_F(FfiTest, ThrowingCalleeGivesKindMessageAndBacktrace) {
  Arg a[] = {Arg("bad shape")};
  try {
    call(fn("throw_value_error"), a, nullptr, nullptr);
    FAIL();
  } catch (const FfiError& e) {
    EXPECT_EQ(e.code(), ErrorCode::ffi_error);
    EXPECT_EQ(e.kind(), "ValueError");
    EXPECT_EQ(e.ffi_message(), "callee says: bad shape");
    EXPECT_FALSE(e.backtrace().empty());
    EXPECT_NE(std::string(e.what()).find("ValueError: callee says: bad shape"), std::string::npos);
  }
  // The error was moved out of TLS: the next call succeeds.
  Any r;
  Arg b[] = {Arg(int64_t{1})};
  call(fn("echo_int"), b, &r, nullptr);
  EXPECT_EQ(r.as_int(), 1);
}

TEST_F(FfiTest, OldModuleReturnCodesWithoutErrorObjects) {
  try {
    call(fn("return_minus2"), {}, nullptr, nullptr);
    FAIL();
  } catch (const FfiError& e) {
    EXPECT_EQ(e.kind(), "EnvErrorAlreadySet");
  }
  try {
    call(fn("return_minus1_silently"), {}, nullptr, nullptr);
    FAIL();
  } catch (const FfiError& e) {
    EXPECT_EQ(e.kind(), "UnknownError");
    EXPECT_NE(e.ffi_message().find("-1"), std::string::npos);
  }
}

void* env_stream(int id) { return api().EnvGetStream(kDLCUDA, id); }

TEST_F(FfiTest, CallSetsTheStreamAndRestoresIt) {
  auto* before = env_stream(0);
  auto* fake = reinterpret_cast<cudaStream_t>(uintptr_t{0x1000});
  StreamBinding b{Device::cuda(0), fake};
  Any r;
  Arg a[] = {Arg(int64_t{kDLCUDA}), Arg(int64_t{0})};
  call(fn("current_stream"), a, &r, &b);
  EXPECT_EQ(r.as_opaque_ptr(), fake);
  EXPECT_EQ(env_stream(0), before);
  // Other devices are untouched.
  Arg a1[] = {Arg(int64_t{kDLCUDA}), Arg(int64_t{1})};
  call(fn("current_stream"), a1, &r, &b);
  EXPECT_EQ(r.as_opaque_ptr(), nullptr);
}

TEST_F(FfiTest, StreamIsRestoredWhenTheCalleeFails) {
  auto* outer = reinterpret_cast<cudaStream_t>(uintptr_t{0x2000});
  StreamScope scope(Device::cuda(0), outer);
  StreamBinding b{Device::cuda(0), reinterpret_cast<cudaStream_t>(uintptr_t{0x3000})};
  Arg a[] = {Arg(int64_t{kDLCUDA}), Arg(int64_t{0})};
  try {
    call(fn("stream_then_throw"), a, nullptr, &b);
    FAIL();
  } catch (const FfiError& e) {
    EXPECT_NE(e.ffi_message().find("0x3000"), std::string::npos) << e.ffi_message();
  }
  EXPECT_EQ(env_stream(0), outer);
  scope.restore();
  EXPECT_EQ(env_stream(0), nullptr);
}

TEST_F(FfiTest, TwoThreadsEachSeeTheirOwnStream) {
  std::atomic<int> mismatches{0};
  auto worker = [&](uintptr_t tag) {
    auto* s = reinterpret_cast<cudaStream_t>(tag);
    StreamBinding b{Device::cuda(0), s};
    Arg a[] = {Arg(int64_t{kDLCUDA}), Arg(int64_t{0})};
    for (int i = 0; i < 2000; ++i) {
      Any r;
      call(fn("current_stream"), a, &r, &b);
      if (r.as_opaque_ptr() != s) mismatches++;
      if (env_stream(0) != nullptr) mismatches++;
    }
  };
  std::thread t1(worker, 0x10), t2(worker, 0x20);
  t1.join();
  t2.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(FfiTest, ModuleObjectsAndGlobalFunctions) {
  EXPECT_FALSE(Function::find_global("flashcpp.no_such_function").has_value());
  EXPECT_THROW(Function::global("flashcpp.no_such_function"), Error);
  // libtvm_ffi's own loader returns a Module object; its methods come through ffi.ModuleGetFunction.
  Function load = Function::global("ffi.Module.load_from_file.so");
  const std::string path = FLASHCPP_TEST_MODULE;
  Any r;
  Arg a[] = {Arg(path.c_str()), Arg("so")};
  call(load, a, &r, nullptr);
  Module m(r.take_object());
  Function echo = m.method("echo_int");
  Any out;
  Arg x[] = {Arg(int64_t{42})};
  call(echo, x, &out, nullptr);
  EXPECT_EQ(out.as_int(), 42);
  EXPECT_THROW(m.method("no_such_method"), Error);
}

TEST_F(FfiTest, MissingExportIsNotFound) {
  EXPECT_EQ(module_->find_function("no_such_export"), nullptr);
  try {
    module_->function("no_such_export");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_NE(std::string(e.what()).find("__tvm_ffi_no_such_export"), std::string::npos);
  }
}

TEST_F(FfiTest, EnvironmentAllocatorServesModulesThatAllocate) {
  install_tensor_allocator();
  install_tensor_allocator();  // idempotent
  const AllocatorStats before = allocator_stats();
  Any r;
  Arg a[] = {Arg(int64_t{1000})};
  call(fn("env_alloc_numel"), a, &r, nullptr);
  EXPECT_EQ(r.as_int(), 1000);
  const AllocatorStats after = allocator_stats();
  EXPECT_EQ(after.host_allocations - before.host_allocations, 1u);
  EXPECT_EQ(after.host_frees - before.host_frees, 1u);  // the callee's tensor was released
}

TEST_F(FfiTest, SecondDifferentLibtvmFfiIsRefused) {
  const fs::path copy = fs::temp_directory_path() / ("flashcpp_test_libtvm_ffi_copy_" + std::to_string(::getpid()) + ".so");
  fs::copy_file(FLASHCPP_TVM_FFI_LIB, copy, fs::copy_options::overwrite_existing);
  try {
    Library::load(copy);
    FAIL() << "a second libtvm_ffi was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("already loaded"), std::string::npos) << e.what();
  }
  fs::remove(copy);
  // The same file again is fine and returns the loaded library.
  EXPECT_EQ(&Library::load(FLASHCPP_TVM_FFI_LIB), &Library::instance());
}

}  // namespace
