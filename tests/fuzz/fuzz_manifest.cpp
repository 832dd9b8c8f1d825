// libFuzzer target for the case-file manifest reader (interop/manifest.hpp parse_manifest, the part of
// `pacheck score` that reads manifest.json): any text must either parse into entries with plain file names
// and case ids that read back as written, or throw CaseFilesError -- never crash, overflow or throw anything
// else (a json::exception escaping would be a message without the file and field).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "interop/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pacheck::Manifest m;
  try {
    m = pacheck::parse_manifest(text, "manifest.json");
  } catch (const pacheck::CaseFilesError&) {
    return 0;  // the documented error
  }
  for (const auto& f : m.files) {
    if (f.file.find('/') != std::string::npos || f.file.find("..") != std::string::npos) std::abort();
    if (!f.entry.is_object()) std::abort();
    if (pacheck::parse_case_id(f.c.id()).id() != f.c.id()) std::abort();
  }
  for (const auto& c : m.cells) {
    const std::string id = c.cell.id();
    if (pacheck::parse_cell_id(id).id() != id) std::abort();
  }
  return 0;
}
