// libFuzzer target for the safetensors reader: any byte string must either parse into a file whose tensors
// exactly tile the data section, or throw SafetensorsError -- never crash, hang, read out of bounds or
// throw anything else (AddressSanitizer and UBSan watch the reads).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "interop/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const pacheck::SafetensorsFile f = pacheck::parse_safetensors(data, size, "fuzz.safetensors");
    std::size_t bytes = 0;
    for (const auto& t : f.tensors) {
      if (t.data.size() != static_cast<std::size_t>(t.elements()) * pacheck::st_dtype_size(t.dtype)) std::abort();
      bytes += t.data.size();
    }
    if (bytes > size) std::abort();  // the tensors came from inside the input
    // What parses must serialise and parse back to the same tensors.
    const auto again = pacheck::serialize_safetensors(f);
    const pacheck::SafetensorsFile g = pacheck::parse_safetensors(again.data(), again.size(), "again.safetensors");
    if (g.tensors.size() != f.tensors.size()) std::abort();
  } catch (const pacheck::SafetensorsError&) {
  }
  return 0;
}
