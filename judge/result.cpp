#include "judge/result.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace pacheck {

std::string result_key(const std::string& kernel, const std::string& cell_id) { return kernel + '\n' + cell_id; }

namespace {
/// JSON has no Inf/NaN: such metrics are written as null and read back as +inf.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
double get_num(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  return v.is_null() ? std::numeric_limits<double>::infinity() : v.get<double>();
}
}  // namespace

nlohmann::json to_json(const CellResult& r) {
  const Metrics& m = r.metrics;
  return {
      {"suite", r.suite},
      {"kernel", r.kernel},
      {"cell", r.cell_id},
      {"case", r.case_id},
      {"fault", r.fault},
      {"straddle", r.straddle},
      {"verdict", std::string(verdict_name(r.verdict))},
      {"detail", r.detail},
      {"expected_fail", r.expected_fail},
      {"metrics",
       {{"max_abs", num(m.max_abs)},
        {"rel_linf", num(m.rel_linf)},
        {"nmse", num(m.nmse)},
        {"mean_abs", num(m.mean_abs)},
        {"max_ulp", m.max_ulp},
        {"bitwise_equal_pct", m.bitwise_equal_pct},
        {"nan", m.nan_count},
        {"inf", m.inf_count},
        {"elements", m.elements},
        {"bias_ulp", m.bias_ulp},
        {"bias_elements", m.bias_elements},
        {"bias_toward", m.bias_toward},
        {"bias_away", m.bias_away},
        {"bias_rows_toward", m.bias_rows_toward},
        {"bias_rows_away", m.bias_rows_away},
        {"worst", {{"seq", m.worst.seq}, {"head", m.worst.head}, {"dim", m.worst.dim}}}}},
      {"limit", num(r.limit)},
      {"margin", num(r.margin)},
      {"variant_elements", r.variant_elements},
      {"seconds", r.seconds},
      {"index", r.index},
      {"device", r.device},
  };
}

CellResult cell_result_from_json(const nlohmann::json& j) {
  try {
    CellResult r;
    r.suite = j.at("suite").get<std::string>();
    r.kernel = j.at("kernel").get<std::string>();
    r.cell_id = j.at("cell").get<std::string>();
    r.case_id = j.at("case").get<std::string>();
    r.fault = j.at("fault").get<std::string>();
    r.straddle = j.at("straddle").get<bool>();
    r.verdict = parse_verdict(j.at("verdict").get<std::string>());
    r.detail = j.at("detail").get<std::string>();
    r.expected_fail = j.at("expected_fail").get<bool>();
    const auto& m = j.at("metrics");
    r.metrics.max_abs = get_num(m, "max_abs");
    r.metrics.rel_linf = get_num(m, "rel_linf");
    r.metrics.nmse = get_num(m, "nmse");
    r.metrics.mean_abs = get_num(m, "mean_abs");
    r.metrics.max_ulp = m.at("max_ulp").get<std::uint64_t>();
    r.metrics.bitwise_equal_pct = m.at("bitwise_equal_pct").get<double>();
    r.metrics.nan_count = m.at("nan").get<std::int64_t>();
    r.metrics.inf_count = m.at("inf").get<std::int64_t>();
    r.metrics.elements = m.at("elements").get<std::int64_t>();
    r.metrics.bias_ulp = m.value("bias_ulp", 0.0);  // absent from results written before the bias check
    r.metrics.bias_elements = m.value("bias_elements", std::int64_t{0});
    r.metrics.bias_toward = m.value("bias_toward", std::int64_t{0});
    r.metrics.bias_away = m.value("bias_away", std::int64_t{0});
    r.metrics.bias_rows_toward = m.value("bias_rows_toward", std::int64_t{0});
    r.metrics.bias_rows_away = m.value("bias_rows_away", std::int64_t{0});
    r.metrics.worst = {m.at("worst").at("seq").get<int>(), m.at("worst").at("head").get<int>(), m.at("worst").at("dim").get<int>()};
    r.limit = get_num(j, "limit");
    r.margin = get_num(j, "margin");
    r.variant_elements = j.at("variant_elements").get<std::int64_t>();
    r.seconds = j.at("seconds").get<double>();
    r.index = j.value("index", -1);  // absent in reports written before merge/resume existed
    r.device = j.value("device", std::string());  // absent before --device cuda:all existed
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("malformed cell result: ") + e.what());
  }
}

}  // namespace pacheck
