// libFuzzer target for evidence.json as `pacheck verify` reads it (verify/verify.hpp verify_report_dir), over
// a fixed report directory (tests/fuzz/verify_fixture/dir: a one-cell run of cpu.reference and the negative
// control cpu.vector_v). Each input is verified twice: as the bytes of evidence.json (the file as found), and,
// when it is a JSON object, rewritten as pacheck writes it with a matching evidence_sha256, so the checks
// after the digest (files, suite, results, controls, self-test) are reached too. Every outcome must be one of
// the documented exit codes with a line that names what is wrong, never a crash, a hang or a raw JSON library
// error ("[json.exception...", a field read without its type checked; a parse error quoted after "not valid
// JSON: " is the documented message).
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "core/digest.hpp"
#include "report/json.hpp"
#include "verify/verify.hpp"

namespace {

namespace fs = std::filesystem;
std::string g_dir;  ///< the fixture's copy this process verifies

void write(const std::string& name, const std::string& bytes) {
  std::ofstream(fs::path(g_dir) / name, std::ios::binary | std::ios::trunc) << bytes;
}

pacheck::VerifyOutcome verify_with(const std::string& evidence) {
  write("evidence.json", evidence);
  pacheck::VerifyRequest req;
  req.dir = g_dir;
  req.suite = PACHECK_FUZZ_FIXTURE "/suite.toml";  // outside the directory: verify lists every file in it
  return pacheck::verify_report_dir(req);
}

void check(const pacheck::VerifyOutcome& o) {
  static const std::set<int> codes = {0, 2, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  if (!codes.count(o.code) || o.line.empty()) std::abort();
  // A JSON parse error (or a number out of range while parsing) is quoted after "not valid JSON: " (its line
  // and column help); a library error anywhere else means a field was read without its type checked.
  const auto raw = o.line.find("[json.exception.");
  if (raw != std::string::npos && o.line.find("not valid JSON: [json.exception.") != raw - 16) {
    std::fprintf(stderr, "raw JSON library error: %s\n", o.line.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // In memory when the machine has a tmpfs: each input writes evidence.json and verify reads every file back.
  std::error_code ec;
  const fs::path tmp = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  std::string dir = (tmp / "pacheck-fuzz-evidence-XXXXXX").string();
  if (!::mkdtemp(dir.data())) std::abort();
  g_dir = dir;
  const fs::path fixture = fs::path(PACHECK_FUZZ_FIXTURE) / "dir";
  for (const auto& f : fs::directory_iterator(fixture))
    if (f.path().filename() != "evidence.json") fs::copy_file(f.path(), fs::path(g_dir) / f.path().filename());
  std::ifstream in(fixture / "evidence.json", std::ios::binary);
  const std::string seed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const pacheck::VerifyOutcome o = verify_with(seed);
  if (o.code != pacheck::kVerified)  // a stale fixture only makes the fuzzing shallower: say so
    std::fprintf(stderr, "fuzz_evidence_json: the fixture does not verify (%d: %s): regenerate it "
                         "(tests/fuzz/verify_fixture/README.md)\n", o.code, o.line.c_str());
  std::atexit([] { fs::remove_all(g_dir); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check(verify_with(text));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return 0;
  nlohmann::json body = j;
  body.erase("evidence_sha256");
  pacheck::Sha256 h;
  const std::string body_text = pacheck::json_text(body, 1);
  h.update(body_text.data(), body_text.size());
  nlohmann::json signed_ev = body;
  signed_ev["evidence_sha256"] = h.hex();
  check(verify_with(pacheck::json_text(signed_ev, 1) + "\n"));
  return 0;
}
