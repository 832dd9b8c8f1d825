// libFuzzer target for the run.json reader of `pacheck run --resume` (report/report_read.hpp: parse_json_text,
// then check_same_run against the identity of the run that resumes): any text must either be that identity
// exactly or throw ReportError naming the file -- never crash or throw anything else (a run.json that is not
// an object used to read as "holds a different run" with every field "absent").
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "report/report_read.hpp"

namespace {
/// The identity of the run that resumes: the run.json of the fuzz_evidence_json fixture, as
/// report/run_identity.cpp wrote it (also this target's seed in tests/fuzz/corpus/run_json/).
const nlohmann::json& identity() {
  static const nlohmann::json id = [] {
    std::ifstream in(PACHECK_FUZZ_FIXTURE "/dir/run.json");
    return nlohmann::json::parse(in);
  }();
  return id;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json before;
  try {
    before = pacheck::parse_json_text(text, "run.json");
    pacheck::check_same_run(before, identity(), "dir/run.json");
  } catch (const pacheck::ReportError& e) {
    // The message names the file or its directory.
    if (std::string(e.what()).find("run.json") == std::string::npos && std::string(e.what()).find("'dir'") == std::string::npos)
      std::abort();
    return 0;
  }
  if (before != identity()) std::abort();  // accepted only when it is the same run
  return 0;
}
