// The module builder: the cache layout, per-URI file locks, a shared pool of compiler processes, and atomic
// publication of the .so. The options, toolchain and flags it compiles with are in toolchain.cpp.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "core/file_lock.hpp"
#include "ffi/trust.hpp"
#include "jit/jit.hpp"

extern char** environ;

namespace flashcpp::jit {
namespace fs = std::filesystem;

namespace {

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = a.find_first_of(" '\"\\$`*?;&|<>()") == std::string::npos && !a.empty();
    out += plain ? a : shell_quote(a);
  }
  return out;
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string tail_of_file(const fs::path& p, size_t max_lines) {
  std::ifstream in(p, std::ios::binary);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > max_lines) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

/// Runs argv with stdout and stderr appended to `log`. Returns the exit status (128+signal when killed).
int run_process(const std::vector<std::string>& argv, const fs::path& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    std::ofstream(log, std::ios::app) << "flashcpp: cannot start " << argv[0] << ": " << std::strerror(rc) << "\n";
    return 127;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}

// Per-URI build lock: core/file_lock.hpp (shared with the artifacts cache); the holder records its PID and
// the module it builds, so a waiting builder can say whom it waits for.
fs::path lock_path(const fs::path& root, const std::string& uri) {
  ffi::create_directories(root / ".locks", ffi::kSharedDirMode);
  return root / ".locks" / (uri + ".lock");
}

// Creates `dir` with `mode` (umask ignored); when it lies in the cache, the cache root first: 0700, or 0755
// for a cache shared on purpose.
void make_cache_dir(const BuildOptions& o, const fs::path& dir, mode_t mode) {
  const fs::path rel = dir.lexically_relative(o.cache_dir);
  if (!o.cache_dir.empty() && !rel.empty() && *rel.begin() != "..")
    ffi::create_directories(o.cache_dir, o.shared_cache ? ffi::kSharedDirMode : ffi::kPrivateDirMode);
  ffi::create_directories(dir, mode);
}

// A module published by a builder: a file with a matching SHA-256 record. Throws untrusted when it differs.
bool built(const fs::path& so) {
  std::error_code ec;
  return fs::is_regular_file(so, ec) && ffi::check_module_record(so) == ffi::RecordCheck::matches;
}

}  // namespace

fs::path module_root(const BuildOptions& o) {
  const Toolchain& tc = toolchain();
  return o.cache_dir / "jit" / cache_key(o, tc);
}

std::optional<fs::path> cached_module(const BuildOptions& o, const std::string& uri) {
  if (!parse_uri(uri)) return std::nullopt;
  fs::path root;
  try {
    root = module_root(o);
  } catch (const Error&) {
    return std::nullopt;  // no toolchain: nothing this configuration could have built
  }
  const fs::path so = root / uri / (uri + ".so");
  if (built(so)) return so;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The build engine

namespace {

struct CompileTask {
  size_t module;
  fs::path source, object;
  std::vector<std::string> argv;
};

struct ModuleJob {
  std::string uri;
  size_t result_index = 0;
  fs::path final_so, build_dir, obj_dir, log;
  ModulePlan plan;
  FileLock lock;
  size_t remaining = 0;  // compile tasks not yet finished
  bool failed = false;
  double compile_seconds = 0;
  std::optional<Error> error;
  std::chrono::steady_clock::time_point start;
};

std::atomic<uint64_t> g_tmp_counter{0};

class Engine {
 public:
  Engine(const BuildOptions& o, const Toolchain& tc, fs::path root) : o_(o), tc_(tc), root_(std::move(root)) {}

  void say(const std::string& line) {
    if (!o_.progress) return;
    std::lock_guard lk(progress_mu_);
    o_.progress(line);
  }

  // Generates the sources and the compile tasks of a locked module.
  void prepare(ModuleJob& m, std::vector<CompileTask>& tasks, size_t index) {
    secure_build_tree();
    m.build_dir = root_ / ".build" / m.uri;
    const fs::path gen = m.build_dir / "generated";
    m.obj_dir = m.build_dir / "obj";
    m.log = m.build_dir / "build.log";
    m.plan = plan_module(m.uri, o_.flashinfer_data_dir, gen);
    size_t written = 0;
    for (const auto& f : m.plan.files) written += write_if_different(gen / f.name, f.content) ? 1 : 0;
    ffi::create_directories(m.obj_dir, ffi::kPrivateDirMode);
    { std::ofstream(m.log, std::ios::trunc); }
    say(m.uri + ": generated " + std::to_string(m.plan.files.size()) + " files (" + std::to_string(written) +
        " changed), " + std::to_string(m.plan.sources.size()) + " sources to compile");
    const auto common = common_flags(o_, tc_);
    const auto dflags = device_flags(o_, m.plan.extra_cuda_flags, tc_);
    const auto hflags = host_flags(m.plan.extra_cflags);
    for (const auto& src : m.plan.sources) {
      const bool cuda = src.extension() == ".cu";
      CompileTask t{index, src, m.obj_dir / (src.stem().string() + (cuda ? ".cuda.o" : ".o")), {}};
      if (cuda) {
        t.argv.push_back(tc_.nvcc.string());
        // CC (if set) goes first as -ccbin, as in FlashInfer's build.ninja.
        t.argv.insert(t.argv.end(), common.begin(), common.end());
        t.argv.insert(t.argv.end(), dflags.begin(), dflags.end());
      } else {
        for (const auto& w : split_list(tc_.cxx)) t.argv.push_back(w);
        t.argv.insert(t.argv.end(), common.begin(), common.end());
        t.argv.insert(t.argv.end(), hflags.begin(), hflags.end());
      }
      t.argv.insert(t.argv.end(), {"-c", src.string(), "-o", t.object.string()});
      tasks.push_back(std::move(t));
      ++m.remaining;
    }
    m.start = std::chrono::steady_clock::now();
  }

  // Sources, objects and logs live under <root>/.build, mode 0700: the compilers create files with the
  // process's umask, and nothing another user could edit may reach the linker. A tree another user could
  // have written to (made by an older flashcpp under a loose umask) is discarded first.
  void secure_build_tree() {
    std::lock_guard lk(state_mu_);
    const fs::path dir = root_ / ".build";
    struct stat st {};
    std::error_code ec;
    if (::stat(dir.c_str(), &st) == 0 && ((st.st_mode & 022) != 0 || st.st_uid != ::geteuid())) fs::remove_all(dir, ec);
    ffi::create_directories(dir, ffi::kPrivateDirMode);
    if (::chmod(dir.c_str(), ffi::kPrivateDirMode) != 0)
      throw Error(ErrorCode::io_error, "jit: cannot make " + dir.string() + " private: " + std::strerror(errno));
  }

  // Objects from an interrupted earlier build are reused when the command is identical and the object is
  // newer than its source (generated sources are rewritten only when they change).
  bool reusable(const CompileTask& t) {
    std::error_code ec;
    const fs::path cmd_file = t.object.string() + ".cmd";
    if (!fs::is_regular_file(t.object, ec) || !fs::is_regular_file(cmd_file, ec)) return false;
    std::ifstream in(cmd_file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str() != join_command(t.argv)) return false;
    return fs::last_write_time(t.object, ec) >= fs::last_write_time(t.source, ec) && !ec;
  }

  // Runs one compile; on failure the module is marked failed with the log tail.
  void compile(const CompileTask& t, ModuleJob& m, std::atomic<size_t>& finished, size_t total) {
    auto counter = [&] { return "[" + std::to_string(finished.fetch_add(1) + 1) + "/" + std::to_string(total) + "] "; };
    const auto t0 = std::chrono::steady_clock::now();
    const std::string name = t.source.filename().string();
    if (reusable(t)) {
      say(counter() + m.uri + ": " + name + " (up to date)");
      return;
    }
    std::error_code ec;
    fs::remove(t.object.string() + ".cmd", ec);
    const fs::path task_log = t.object.string() + ".log";
    fs::remove(task_log, ec);
    const int rc = run_process(t.argv, task_log);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard lk(state_mu_);
      m.compile_seconds += secs;
    }
    {
      std::lock_guard lk(log_mu_);
      std::ofstream log(m.log, std::ios::app);
      log << "$ " << join_command(t.argv) << "\n" << std::ifstream(task_log, std::ios::binary).rdbuf();
    }
    if (rc != 0) {
      std::lock_guard lk(state_mu_);
      if (!m.failed) {
        m.failed = true;
        m.error = Error(ErrorCode::unsupported,
                        "jit: building " + m.uri + " failed: " + fs::path(t.argv[0]).filename().string() +
                            " exited with status " + std::to_string(rc) + " compiling " + name + "\ncommand: " +
                            join_command(t.argv) + "\nlast lines of the log (" + task_log.string() + "):\n" +
                            tail_of_file(task_log, 30));
      }
      say(counter() + m.uri + ": " + name + " FAILED (" + format_seconds(secs) + ")");
      return;
    }
    std::ofstream(t.object.string() + ".cmd", std::ios::binary | std::ios::trunc) << join_command(t.argv);
    say(counter() + m.uri + ": " + name + " (" + format_seconds(secs) + ")");
  }

  // Links the module's objects and publishes the .so atomically.
  void link(ModuleJob& m, BuildResult& r) {
    std::vector<std::string> argv = split_list(tc_.cxx);
    for (const auto& src : m.plan.sources)
      argv.push_back((m.obj_dir / (src.stem().string() + (src.extension() == ".cu" ? ".cuda.o" : ".o"))).string());
    for (const char* f : {"-shared"}) argv.push_back(f);
    argv.push_back("-L" + (tc_.cuda_home / "lib64").string());
    argv.push_back("-L" + (tc_.cuda_home / "lib64" / "stubs").string());
    argv.push_back("-lcudart");
    argv.push_back("-lcuda");
    argv.insert(argv.end(), m.plan.extra_ldflags.begin(), m.plan.extra_ldflags.end());
    std::error_code ec;
    ffi::create_directories(m.final_so.parent_path(), ffi::kSharedDirMode);
    const fs::path tmp = m.final_so.string() + ".tmp." + std::to_string(::getpid()) + "." +
                         std::to_string(g_tmp_counter.fetch_add(1));
    argv.push_back("-o");
    argv.push_back(tmp.string());
    const fs::path link_log = m.obj_dir / "link.log";
    fs::remove(link_log, ec);
    const auto link_start = std::chrono::steady_clock::now();
    const int rc = run_process(argv, link_log);
    m.compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - link_start).count();
    {
      std::lock_guard lk(log_mu_);
      std::ofstream(m.log, std::ios::app) << "$ " << join_command(argv) << "\n"
                                          << std::ifstream(link_log, std::ios::binary).rdbuf();
    }
    if (rc != 0) {
      fs::remove(tmp, ec);
      m.failed = true;
      m.error = Error(ErrorCode::unsupported, "jit: linking " + m.uri + " failed (status " + std::to_string(rc) +
                                                  ")\ncommand: " + join_command(argv) + "\nlog tail:\n" +
                                                  tail_of_file(link_log, 30));
      return;
    }
    // 0755 whatever the umask the linker ran with; recorded after the rename (which moves the ctime) and
    // before the lock is released, so a module without a record is one whose build did not finish.
    if (::chmod(tmp.c_str(), ffi::kExecutableMode) != 0) ec.assign(errno, std::generic_category());
    if (!ec) fs::rename(tmp, m.final_so, ec);
    if (!ec) {
      try {
        ffi::write_module_record(m.final_so, ffi::file_sha256(m.final_so));
      } catch (const Error& e) {
        ec = std::make_error_code(std::errc::io_error);
        m.error = e;
      }
    }
    if (ec) {
      if (!m.error) m.error = Error(ErrorCode::io_error, "jit: cannot publish " + m.final_so.string() + ": " + ec.message());
      m.failed = true;
      fs::remove(tmp, ec);
      return;
    }
    // The objects are not needed once the module is published (the .so is the cache).
    fs::remove_all(m.obj_dir, ec);
    r.path = m.final_so;
    r.bytes = fs::file_size(m.final_so, ec);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.start).count();
    r.compile_seconds = m.compile_seconds;
    say(m.uri + ": built " + m.final_so.string() + " (" + std::to_string(r.bytes / 1024) + " KiB, " +
        format_seconds(r.seconds) + " wall, " + format_seconds(r.compile_seconds) + " of compiler time)");
  }

  // Builds the given locked modules with one pool of workers.
  void run(std::vector<ModuleJob*>& mods, std::vector<BuildResult>& results) {
    std::vector<CompileTask> tasks;
    std::vector<ModuleJob*> ready;
    for (size_t i = 0; i < mods.size(); ++i) {
      try {
        prepare(*mods[i], tasks, i);
        ready.push_back(mods[i]);
      } catch (const Error& e) {
        mods[i]->failed = true;
        mods[i]->error = e;
        results[mods[i]->result_index].error = e;
        mods[i]->lock.release();
      }
    }
    // Heaviest modules first (more sources ~ more work), so the tail of the build stays parallel.
    std::stable_sort(tasks.begin(), tasks.end(), [&](const CompileTask& a, const CompileTask& b) {
      return mods[a.module]->plan.sources.size() > mods[b.module]->plan.sources.size();
    });
    const size_t total = tasks.size();
    size_t workers = o_.jobs > 0 ? static_cast<size_t>(o_.jobs) : std::max(1u, std::thread::hardware_concurrency());
    workers = std::min(workers, std::max<size_t>(total, 1));
    std::atomic<size_t> next{0}, finished{0};
    auto worker = [&] {
      for (;;) {
        const size_t i = next.fetch_add(1);
        if (i >= total) return;
        const CompileTask& t = tasks[i];
        ModuleJob& m = *mods[t.module];
        bool skip;
        {
          std::lock_guard lk(state_mu_);
          skip = m.failed;
        }
        if (!skip) compile(t, m, finished, total);
        bool last;
        {
          std::lock_guard lk(state_mu_);
          last = --m.remaining == 0;
        }
        if (last) finish(m, results[m.result_index]);
      }
    };
    std::vector<std::thread> pool;
    for (size_t w = 1; w < workers; ++w) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
    // Modules without sources (none today) still need linking.
    for (ModuleJob* m : ready)
      if (m->plan.sources.empty()) finish(*m, results[m->result_index]);
  }

  void finish(ModuleJob& m, BuildResult& r) {
    if (!m.failed) link(m, r);
    if (m.failed) r.error = m.error;
    m.lock.release();
  }

 private:
  const BuildOptions& o_;
  const Toolchain& tc_;
  fs::path root_;
  std::mutex progress_mu_, log_mu_, state_mu_;
};

}  // namespace

std::vector<BuildResult> build_modules(const BuildOptions& o, const std::vector<std::string>& uris) {
  const Toolchain& tc = toolchain();
  check_inputs(o);
  const fs::path root = module_root(o);
  std::error_code ec;
  make_cache_dir(o, root, ffi::kSharedDirMode);
  if (!fs::exists(root / "KEY.txt", ec)) {
    std::string key_doc = "flashcpp jit modules\nflashinfer " + std::string(kFlashInferVersion) + "\nnvcc " +
                          tc.nvcc_version_full + "\narchs";
    for (const auto& a : o.cuda_archs) key_doc += " " + a;
    write_if_different(root / "KEY.txt", key_doc + "\n");
  }

  std::vector<BuildResult> results;
  std::deque<ModuleJob> jobs;  // stable addresses
  std::set<std::string> seen;
  for (const auto& uri : uris) {
    BuildResult r;
    r.uri = uri;
    if (!seen.insert(uri).second) continue;
    if (!parse_uri(uri)) {
      try {
        plan_module(uri, o.flashinfer_data_dir, {});  // throws the descriptive unknown-URI error
      } catch (const Error& e) {
        r.error = e;
      }
      results.push_back(std::move(r));
      continue;
    }
    ModuleJob& m = jobs.emplace_back();
    m.uri = uri;
    m.final_so = root / uri / (uri + ".so");
    m.result_index = results.size();
    results.push_back(std::move(r));
  }

  Engine engine(o, tc, root);
  auto mark_cached = [&](ModuleJob& m) {
    BuildResult& r = results[m.result_index];
    r.cached = true;
    r.path = m.final_so;
    r.bytes = fs::file_size(m.final_so, ec);
    engine.say(m.uri + ": cached " + m.final_so.string());
  };

  // Phase 1: modules nobody else is building (try-lock, so two builders never wait on each other's sets).
  std::vector<ModuleJob*> now, later;
  // A published .so counts only with its record: one without (an older flashcpp's, or a build that stopped
  // before recording) is built again; one that differs from its record throws untrusted.
  for (ModuleJob& m : jobs) {
    if (built(m.final_so)) {
      mark_cached(m);
      continue;
    }
    if (auto held = FileLock::try_acquire(lock_path(root, m.uri), "building " + m.uri)) {
      m.lock = std::move(*held);
    } else {
      later.push_back(&m);
      continue;
    }
    if (built(m.final_so)) {  // finished while we looked
      m.lock.release();
      mark_cached(m);
      continue;
    }
    now.push_back(&m);
  }
  if (!now.empty()) engine.run(now, results);

  // Phase 2: modules another builder held; wait for each (holding no other lock), then build if still missing.
  for (ModuleJob* m : later) {
    engine.say(m->uri + ": waiting for another builder");
    LockWait wait;
    wait.timeout_s = o.lock_timeout_s;
    wait.report_after_s = o.lock_report_after_s;
    wait.timeout_setting = "FLASHCPP_LOCK_TIMEOUT";
    if (o.progress) wait.report = [&engine, m](const std::string& line) { engine.say(m->uri + ": " + line); };
    try {
      m->lock = FileLock::acquire(lock_path(root, m->uri), "building " + m->uri, wait);
    } catch (const Error& e) {
      results[m->result_index].error = Error(e.code(), "jit: " + m->uri + ": " + e.message());
      continue;
    }
    if (built(m->final_so)) {
      m->lock.release();
      mark_cached(*m);
      continue;
    }
    std::vector<ModuleJob*> one{m};
    engine.run(one, results);
  }
  return results;
}

std::filesystem::path build_module(const BuildOptions& o, const std::string& uri) {
  if (auto p = cached_module(o, uri)) return *p;
  auto results = build_modules(o, {uri});
  if (results.empty()) throw Error(ErrorCode::internal, "jit: no result for " + uri);
  if (results[0].error) throw *results[0].error;
  return results[0].path;
}

}  // namespace flashcpp::jit
