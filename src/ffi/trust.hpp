// What flashcpp trusts on disk before it runs code from it (docs/ARTIFACTS.md, "Trust model"):
//   * the path rule (OpenSSH's rule for keys), checked before every dlopen: the file and every directory on
//     its path belong to the caller or root and are not writable by group or others;
//   * exact modes for what flashcpp creates, whatever the umask;
//   * SHA-256 records of the modules flashcpp extracts or builds, checked before they are loaded.
// In the ffi layer because it owns dlopen; the artifacts and jit layers create and record what it loads.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace flashcpp::ffi {

/// Throws Error(untrusted) unless `file` and every directory on its path are owned by the caller or root
/// and not writable by group or others. A directory with the sticky bit owned by root (the system's
/// temporary directory) is accepted: others cannot replace what they do not own there. The path is checked
/// both as given (the directories that hold its symbolic links) and resolved. `what` names the file in the
/// message ("module", "libtvm_ffi"). Throws not_found when it does not exist. Returns the resolved path, the
/// one to open.
std::filesystem::path require_trusted_file(const std::filesystem::path& file, std::string_view what);

/// Modes of what flashcpp creates in its caches, whatever the process's umask.
inline constexpr mode_t kPrivateDirMode = 0700;  ///< a cache root (and missing parents) of one user
inline constexpr mode_t kSharedDirMode = 0755;   ///< directories below the root; a root on purpose shared
inline constexpr mode_t kFileMode = 0644;
inline constexpr mode_t kExecutableMode = 0755;  ///< shared objects and executables

/// Creates `dir` and its missing parents, each with exactly `mode` (the umask does not apply); directories
/// that exist keep their mode. Throws io_error.
void create_directories(const std::filesystem::path& dir, mode_t mode);
/// Sets exactly `mode` on an open file; throws io_error naming `path`.
void set_mode(int fd, mode_t mode, const std::filesystem::path& path);

/// What identifies a file's bytes without reading them: size, mtime, device, inode and ctime. Only root can
/// choose a ctime and every write, rename or chmod moves it, so an equal identity means the same bytes.
std::string stat_identity(const struct stat& st);

/// Lowercase hex SHA-256 of a file. Throws io_error.
std::string file_sha256(const std::filesystem::path& file);

/// Where the SHA-256 record of a module lives: `<file>.sha256`.
std::filesystem::path module_record_path(const std::filesystem::path& file);
/// Records `sha256` for `file` with the size, mtime, device, inode and ctime the file has now (written
/// atomically, mode 0644). Called when a module is extracted or built.
void write_module_record(const std::filesystem::path& file, std::string_view sha256);

enum class RecordCheck {
  matches,  ///< the file is what was recorded
  missing,  ///< no (readable) record: the caller extracts or builds the module again
};
/// Checks `file` against its record before it is loaded. When size, mtime, device, inode and ctime are the
/// recorded ones the recorded hash stands (no read of the file: a warm start stays cheap; only root can set
/// a ctime); otherwise the file is hashed and must have the recorded SHA-256 (the record is then refreshed).
/// Throws Error(untrusted) naming the file, both hashes and the rule when it differs.
RecordCheck check_module_record(const std::filesystem::path& file);

}  // namespace flashcpp::ffi
