#include "core/elf_symbols.hpp"

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <fstream>

#include "flashcpp/error.hpp"

namespace flashcpp {

std::vector<std::string> elf_dynamic_symbols_containing(const std::filesystem::path& file, std::string_view fragment) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(ErrorCode::io_error, "cannot read '" + file.string() + "'");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  // Reads [offset, offset + size) of the file; false when that range is not inside it.
  auto read_at = [&](uint64_t offset, uint64_t size, void* dst) {
    if (offset > file_size || size > file_size - offset) return false;
    in.seekg(static_cast<std::streamoff>(offset));
    return static_cast<bool>(in.read(static_cast<char*>(dst), static_cast<std::streamsize>(size)));
  };
  Elf64_Ehdr eh{};
  if (!read_at(0, sizeof eh, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr))
    return {};
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  if (!read_at(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), sections.data())) return {};
  std::vector<std::string> names;
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_DYNSYM || sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= sections.size()) continue;
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    std::vector<Elf64_Sym> syms(sh.sh_size / sizeof(Elf64_Sym));
    std::string strings(strtab.sh_size, '\0');
    if (!read_at(sh.sh_offset, syms.size() * sizeof(Elf64_Sym), syms.data()) ||
        !read_at(strtab.sh_offset, strtab.sh_size, strings.data()))
      throw Error(ErrorCode::io_error, "'" + file.string() + "': truncated symbol table");
    for (const Elf64_Sym& sym : syms) {
      if (sym.st_shndx == SHN_UNDEF || sym.st_name >= strings.size()) continue;
      const std::string_view name(strings.c_str() + sym.st_name);
      if (name.find(fragment) != std::string_view::npos) names.emplace_back(name);
    }
  }
  return names;
}

}  // namespace flashcpp
