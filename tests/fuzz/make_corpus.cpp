// Writes a seed corpus for fuzz_safetensors: valid files of every dtype, so the fuzzer starts from inputs
// that reach the offset and shape checks instead of rediscovering the format from random bytes.
#include <cstdio>
#include <string>

#include "interop/safetensors.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  using pacheck::StDType;
  const unsigned char bytes[64] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  int n = 0;
  for (StDType t : {StDType::F32, StDType::F16, StDType::BF16, StDType::F8_E4M3, StDType::F8_E5M2, StDType::I32}) {
    pacheck::SafetensorsFile f;
    f.metadata = {{"case", "seed"}};
    f.add("a", t, {2, 2}, bytes);
    f.add("b", t, {}, bytes + 16);
    f.add("c", StDType::I32, {3}, bytes + 32);
    pacheck::write_safetensors(dir + "/seed" + std::to_string(n++) + ".safetensors", f);
  }
  pacheck::SafetensorsFile empty;
  pacheck::write_safetensors(dir + "/empty.safetensors", empty);
  std::printf("wrote %d seeds to %s\n", n + 1, dir.c_str());
  return 0;
}
