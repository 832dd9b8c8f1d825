// The C API of libpacheck_cells (include/pacheck/cells_c.h): pacheck/cells.hpp's calls with JSON answers,
// for callers without C++ (python/pacheck through ctypes). Each call only converts: the work is cells.cpp's.
#include "pacheck/cells_c.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <unordered_set>

#include "cells/cells_internal.hpp"
#include "core/abi_fields.hpp"
#include "core/case_fields.hpp"
#include "faults/inject.hpp"
#include "judge/summary.hpp"
#include "pacheck/cells.hpp"
#include "report/text.hpp"

namespace {

using nlohmann::json;

/// Every field of the ABI structs a caller lays out itself, by struct, in offset (declaration) order:
/// {"pacheck_kernel_args": [{"name", "offset", "size", "version"}, ...], ...} (core/abi_fields.hpp), for the
/// Python module's ctypes check.
json abi_fields_json() {
  std::vector<pacheck::AbiField> fields(pacheck::abi_field_table().begin(), pacheck::abi_field_table().end());
  std::stable_sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  json out = json::object();
  for (const pacheck::AbiField& f : fields)
    out[std::string(pacheck::abi_struct_name(f.in))].push_back(
        {{"name", f.name}, {"offset", f.offset}, {"size", f.size}, {"version", f.version}});
  return out;
}

/// A malloc'd copy of `j`'s text, which pacheck_cells_free releases.
char* to_c(const json& j) {
  const std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

/// Runs `body`, storing its answer (or {"error": what()}) in *json_out; 0 on success, 1 on an error, 2 when
/// json_out itself is NULL (there is nowhere to answer).
int answer(char** json_out, const std::function<json()>& body) {
  if (!json_out) return 2;
  *json_out = nullptr;
  try {
    *json_out = to_c(body());
    return *json_out ? 0 : 1;
  } catch (const std::exception& e) {
    *json_out = to_c(json{{"error", e.what()}});
  } catch (...) {
    *json_out = to_c(json{{"error", "unknown exception"}});
  }
  return 1;
}

std::string str(const char* s, const char* field) {
  if (!s) throw std::invalid_argument(std::string(field) + " is NULL");
  return s;
}

const char* device_word(pacheck_device d) {
  switch (d) {
    case PACHECK_DEVICE_CPU: return "cpu";
    case PACHECK_DEVICE_CUDA: return "cuda";
    case PACHECK_DEVICE_HIP: return "hip";
  }
  return "?";
}

}  // namespace

extern "C" {

void pacheck_cells_free(char* json) { std::free(json); }

int pacheck_cells_info(char** json_out) {
  return answer(json_out, [] {
    return json{{"api_version", PACHECK_CELLS_C_API_VERSION},
                {"abi_version", PACHECK_ABI_VERSION},
                {"sizeof",
                 {{"pacheck_kernel_args", sizeof(pacheck_kernel_args)},
                  {"pacheck_case_info", sizeof(pacheck_case_info)},
                  {"pacheck_kernel_desc", sizeof(pacheck_kernel_desc)},
                  {"pacheck_registrar", sizeof(pacheck_registrar)}}},
                {"abi_fields", abi_fields_json()},
                {"case_fields", json::parse(pacheck::case_fields_json())["fields"]},
                {"suites_dir", pacheck::suites_dir()},
                {"suites", pacheck::list_suites()}};
  });
}

int pacheck_cells_add_linked_kernels(pacheck_register_kernels_fn register_kernels, uint32_t abi_version,
                                     const char* repro_label, int in_process_only, char** json_out) {
  return answer(json_out, [&] {
    const std::vector<std::string> names =
        pacheck::cells::add_linked_kernels(register_kernels, repro_label ? repro_label : "", abi_version);
    if (in_process_only)
      for (const auto& n : names) pacheck::cells::keep_in_process(n);
    return json{{"kernels", names}};
  });
}

int pacheck_cells_add_plugin(const char* path, char** json_out) {
  return answer(json_out, [&] { return json{{"kernels", pacheck::cells::add_plugin(str(path, "path"))}}; });
}

int pacheck_cells_kernels(char** json_out) {
  return answer(json_out, [] {
    json ks = json::array();
    for (const auto& k : pacheck::Registry::global().all())
      ks.push_back({{"name", k->name()},
                    {"description", k->description()},
                    {"device", device_word(k->device())},
                    {"negative_control", k->is_negative_control()}});
    return json{{"kernels", ks}};
  });
}

int pacheck_cells_list_cells(const char* suite, const char* kernel, char** json_out) {
  return answer(json_out, [&] {
    const pacheck::Suite& s = pacheck::cells::suite_named(str(suite, "suite"));
    const pacheck::KernelPtr k = pacheck::cells::kernel_named(str(kernel, "kernel"));
    const auto expected = k->expected_failures();
    json cells = json::array();
    std::unordered_set<std::string> seen;
    for (const pacheck::SuiteCell& sc : s.cells) {
      const pacheck::Cell c = sc.for_layouts(k->layouts());
      std::string id = c.id();
      if (!seen.insert(id).second) continue;
      cells.push_back({{"id", id},
                       {"case", c.c.id()},
                       {"fault", c.fault.id()},
                       {"straddles", c.c.straddles()},
                       {"poisons_v_tail", pacheck::poisons_v_tail(c)},
                       {"expected_fail", expected ? (*expected)(c) : false}});
    }
    return json{{"suite", s.name}, {"cells", cells}};
  });
}

int pacheck_cells_run_cell(const char* suite, const char* kernel, const char* cell_id, const char* device,
                           char** json_out) {
  return answer(json_out, [&] {
    const std::string kname = str(kernel, "kernel"), id = str(cell_id, "cell_id");
    const pacheck::CellResult r =
        pacheck::cells::run_cell_result(suite ? suite : "", kname, id, device ? device : "cpu");
    const pacheck::KernelPtr k = pacheck::cells::kernel_named(kname);
    const pacheck::CellOutcome o = pacheck::cell_outcome(r, k->is_negative_control());
    return json{{"cell_id", r.cell_id.empty() ? id : r.cell_id},
                {"kernel", kname},
                {"verdict", std::string(pacheck::verdict_name(r.verdict))},
                {"declined", o == pacheck::CellOutcome::declined},
                {"failed", o == pacheck::CellOutcome::failed || o == pacheck::CellOutcome::missed},
                {"detail", r.detail},
                {"metrics", pacheck::cells::judged_metrics_text(r)},
                {"repro", pacheck::repro_command(r, "")},
                {"result", pacheck::to_json(r)}};
  });
}

int pacheck_cells_check_instrument(const char* suite, char** json_out) {
  return answer(json_out, [&] {
    const pacheck::cells::InstrumentCheck c = pacheck::cells::check_instrument(str(suite, "suite"));
    return json{{"blind", c.blind}, {"summary", c.summary}};
  });
}

}  // extern "C"
