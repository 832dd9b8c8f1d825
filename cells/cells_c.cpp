// The C API of libpacheck_cells (include/pacheck/cells_c.h): pacheck/cells.hpp's calls with JSON answers,
// for callers without C++ (python/pacheck through ctypes). Each call only converts: the work is cells.cpp's.
#include "pacheck/cells_c.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
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

/// A request's JSON text (the newer calls take one object instead of many arguments).
json request(const char* text, const char* call) {
  if (!text) throw std::invalid_argument(std::string(call) + ": request is NULL");
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) throw std::invalid_argument(std::string(call) + ": request is not a JSON object");
  return j;
}

/// A double as JSON: NaN and the infinities as the strings "nan", "inf", "-inf" (JSON has no such numbers).
json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

/// A cell's answer (run_cell, batch_next).
json cell_json(const pacheck::cells::CellAnswer& a) {
  const pacheck::CellResult& r = a.result;
  const pacheck::KernelPtr k = pacheck::cells::kernel_named(r.kernel);
  const pacheck::CellOutcome o = pacheck::cell_outcome(r, k->is_negative_control());
  json j = {{"cell_id", r.cell_id},
            {"kernel", r.kernel},
            {"verdict", std::string(pacheck::verdict_name(r.verdict))},
            {"declined", o == pacheck::CellOutcome::declined},
            {"failed", o == pacheck::CellOutcome::failed || o == pacheck::CellOutcome::missed},
            {"detail", r.detail},
            {"metrics", pacheck::cells::judged_metrics_text(r)},
            {"repro", pacheck::repro_command(r, "")},
            {"result", pacheck::to_json(r)}};
  if (a.worst_out) j["worst_values"] = {{"out", number(*a.worst_out)}, {"ref", number(*a.worst_ref)}};
  return j;
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
                {"suites", pacheck::list_suites()},
                {"timeout_marker", pacheck::cells::kTimeoutMarker}};
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
    const pacheck::CellKinds kinds = pacheck::cell_kinds(s);
    for (const pacheck::SuiteCell& sc : s.cells) {
      if (!pacheck::pairs_with(*k, sc.cell.c, kinds)) continue;
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
    pacheck::cells::CellAnswer a =
        pacheck::cells::run_cell_answer(suite ? suite : "", kname, id, device ? device : "cpu");
    if (a.result.cell_id.empty()) a.result.cell_id = id;
    a.result.kernel = kname;
    return cell_json(a);
  });
}

int pacheck_cells_run(const char* request_json, char** json_out) {
  return answer(json_out, [&] {
    const json q = request(request_json, "run");
    pacheck::cells::CellAnswer a = pacheck::cells::run_cell_answer(
        q.value("suite", ""), q.at("kernel").get<std::string>(), q.at("cell_id").get<std::string>(),
        q.value("device", "cpu"), q.value("max_memory", 0.0));
    if (a.result.cell_id.empty()) a.result.cell_id = q.at("cell_id").get<std::string>();
    return cell_json(a);
  });
}

int pacheck_cells_set_command(const char* request_json, char** json_out) {
  return answer(json_out, [&] {
    const json q = request(request_json, "set_command");
    const std::string words = q.at("command").get<std::string>();
    if (words.empty() || words.find_first_of("\n\r") != std::string::npos)
      throw std::invalid_argument("set_command: command must be one non-empty line of shell words");
    pacheck::set_command_name(words);
    return json{{"command", words}};
  });
}

int pacheck_cells_kernel_options(const char* request_json, char** json_out) {
  return answer(json_out, [&] {
    const json q = request(request_json, "kernel_options");
    const std::string name = q.at("kernel").get<std::string>();
    pacheck::cells::KernelOptions o = pacheck::cells::kernel_options(name);
    o.sparse_pools = q.value("sparse_pools", o.sparse_pools);
    o.input_copies = q.value("input_copies", o.input_copies);
    pacheck::cells::set_kernel_options(name, o);
    return json{{"kernel", name}, {"sparse_pools", o.sparse_pools}, {"input_copies", o.input_copies}};
  });
}

int pacheck_cells_batch_open(const char* request_json, char** json_out) {
  return answer(json_out, [&] {
    const json q = request(request_json, "batch_open");
    pacheck::cells::BatchRequest r;
    r.suite = q.at("suite").get<std::string>();
    r.kernel = q.at("kernel").get<std::string>();
    r.device = q.value("device", "cpu");
    r.ids = q.value("ids", std::vector<std::string>{});
    r.filter = q.value("filter", "");
    r.threads = q.value("threads", 0);
    r.ahead = q.value("ahead", -1);
    r.report_dir = q.value("report_dir", "");
    r.max_memory = q.value("max_memory", 0.0);
    const pacheck::cells::BatchInfo b = pacheck::cells::open_batch(r);
    return json{{"batch", b.handle}, {"cells", b.cells}, {"cases", b.cases}, {"threads", b.threads},
                {"ahead", b.ahead}, {"budget", b.budget.bytes}, {"budget_source", b.budget.source}};
  });
}

int pacheck_cells_batch_next(int batch, char** json_out) {
  return answer(json_out, [&] {
    const std::optional<pacheck::cells::CellAnswer> a = pacheck::cells::batch_next(batch);
    return a ? json{{"done", false}, {"cell", cell_json(*a)}} : json{{"done", true}};
  });
}

int pacheck_cells_batch_close(int batch, char** json_out) {
  return answer(json_out, [&] {
    const pacheck::cells::BatchEnd e = pacheck::cells::close_batch(batch);
    const pacheck::RunSummary& s = e.summary;
    return json{{"passed", s.passed}, {"failed", s.failed}, {"declined", s.declined}, {"caught", s.caught},
                {"results", s.results.size()}, {"planned", s.planned}, {"stopped", s.stopped},
                {"verdicts", pacheck::verdict_counts_text(s.verdicts)}, {"exit_code", s.exit_code()},
                {"reports", e.reports}};
  });
}

int pacheck_cells_instrument(const char* request_json, char** json_out) {
  return answer(json_out, [&] {
    const json q = request(request_json, "instrument");
    const pacheck::cells::InstrumentCheck c = pacheck::cells::check_instrument_on(
        q.at("suite").get<std::string>(), q.value("device", "cpu"), q.value("recheck", false));
    return json{{"blind", c.blind}, {"summary", c.summary}, {"cached", c.cached}, {"cache_file", c.cache_file}};
  });
}

int pacheck_cells_fuzz(const char* request_json, char** json_out) {
  return answer(json_out, [&] {
    const json q = request(request_json, "fuzz");
    if (q.value("list", false)) {
      json names = json::array();
      for (const auto& [name, opt_in] : pacheck::cells::property_names()) names.push_back({{"name", name}, {"opt_in", opt_in}});
      return json{{"properties", names}};
    }
    pacheck::cells::FuzzRequest r;
    r.kernel = q.at("kernel").get<std::string>();
    r.device = q.value("device", "");
    r.properties = q.value("properties", std::vector<std::string>{});
    if (q.contains("seed") && !q.at("seed").is_null()) r.seed = q.at("seed").get<std::uint64_t>();
    r.cases = q.value("cases", 0);
    r.budget_s = q.value("budget", 0.0);
    r.max_size = q.value("max_size", 100);
    r.shrink = q.value("shrink", true);
    r.reproduce = q.value("reproduce", "");
    r.max_memory = q.value("max_memory", 0.0);
    const pacheck::cells::FuzzAnswer a = pacheck::cells::fuzz(r);
    json props = json::array();
    for (const auto& p : a.properties)
      props.push_back({{"name", p.name}, {"passed", p.passed}, {"cases", p.cases}, {"exercised", p.exercised},
                       {"shrinks", p.shrinks}, {"over_memory", p.over_memory},
                       {"device_out_of_memory", p.device_out_of_memory}, {"seconds", p.seconds},
                       {"coverage", p.coverage}, {"message", p.message}, {"counterexample", p.counterexample},
                       {"cell_id", p.cell_id}, {"reproduce", p.reproduce}});
    return json{{"kernel", a.kernel}, {"device", a.device}, {"seed", a.seed}, {"budget", a.budget.bytes},
                {"budget_source", a.budget.source}, {"negative_control", a.negative_control}, {"properties", props}};
  });
}

int pacheck_cells_check_instrument(const char* suite, char** json_out) {
  return answer(json_out, [&] {
    const pacheck::cells::InstrumentCheck c = pacheck::cells::check_instrument(str(suite, "suite"));
    return json{{"blind", c.blind}, {"summary", c.summary}, {"cached", c.cached}, {"cache_file", c.cache_file}};
  });
}

}  // extern "C"
