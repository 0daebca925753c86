// Names in a shared object's ELF dynamic symbol table, read from the file. For the rare workaround that
// must reach a loaded module's own state by name (ops/gdn.cpp: FlashInfer's per-process "initialized"
// flags); the address then comes from ffi::ModuleLibrary::find_symbol (dlsym).
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace flashcpp {

/// Names of the defined symbols of `file`'s `.dynsym` that contain `fragment`; empty for a file that is not a
/// 64-bit ELF or has no `.dynsym`. Throws io_error naming the file when it cannot be read or its symbol table
/// runs past its end.
std::vector<std::string> elf_dynamic_symbols_containing(const std::filesystem::path& file, std::string_view fragment);

}  // namespace flashcpp
