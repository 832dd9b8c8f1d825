#include "judge/result.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <type_traits>
#include <limits>
#include <stdexcept>

namespace pacheck {

std::string result_key(const std::string& kernel, const std::string& cell_id) { return kernel + '\n' + cell_id; }

namespace {
/// JSON has no Inf/NaN: such metrics are written as null and read back as +inf.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
/// metrics.worst: {"seq", "head", "dim"}, and "query_token" when the case has several query tokens per sequence.
nlohmann::json worst_json(const Index3& w) {
  nlohmann::json j{{"seq", w.seq}, {"head", w.head}, {"dim", w.dim}};
  if (w.token >= 0) j["query_token"] = w.token;
  return j;
}
double get_num(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  return v.is_null() ? std::numeric_limits<double>::infinity() : v.get<double>();
}
/// j[key] as the integer type T (j.at(key), or `dflt` when absent and a default is given). nlohmann's get<T>
/// of a float casts it unchecked (1e300 into an int is undefined behaviour) and wraps integers that do not
/// fit: a value that is not a whole number within T's range throws std::runtime_error naming `key`.
template <typename T>
T get_int(const nlohmann::json& j, const char* key, std::optional<T> dflt = std::nullopt) {
  if (dflt && !j.contains(key)) return *dflt;
  const auto& v = j.at(key);
  constexpr auto lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  bool ok = false;
  if (v.is_number_unsigned()) {
    ok = v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi);
  } else if (v.is_number_integer()) {
    const std::int64_t x = v.get<std::int64_t>();
    ok = x >= 0 ? static_cast<std::uint64_t>(x) <= static_cast<std::uint64_t>(hi)
                : std::is_signed_v<T> && x >= static_cast<std::int64_t>(lo);
  } else if (v.is_number_float()) {
    // Whole and strictly inside the range as a double (2^63 and 2^64 themselves do not fit).
    const double d = v.get<double>();
    ok = std::isfinite(d) && d == std::trunc(d) && d >= static_cast<double>(lo) &&
         d < 2.0 * static_cast<double>(hi / 2 + 1);
  }
  if (!ok)
    throw std::runtime_error(
        fmt::format("malformed cell result: '{}' is {}, not an integer in [{}, {}]", key, v.dump(), lo, hi));
  if (v.is_number_float()) return static_cast<T>(v.get<double>());
  if (v.is_number_unsigned()) return static_cast<T>(v.get<std::uint64_t>());
  return static_cast<T>(v.get<std::int64_t>());
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
        {"worst", worst_json(m.worst)}}},
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
    r.metrics.max_ulp = get_int<std::uint64_t>(m, "max_ulp");
    r.metrics.bitwise_equal_pct = m.at("bitwise_equal_pct").get<double>();
    r.metrics.nan_count = get_int<std::int64_t>(m, "nan");
    r.metrics.inf_count = get_int<std::int64_t>(m, "inf");
    r.metrics.elements = get_int<std::int64_t>(m, "elements");
    r.metrics.bias_ulp = m.value("bias_ulp", 0.0);  // absent from results written before the bias check
    r.metrics.bias_elements = get_int<std::int64_t>(m, "bias_elements", 0);
    r.metrics.bias_toward = get_int<std::int64_t>(m, "bias_toward", 0);
    r.metrics.bias_away = get_int<std::int64_t>(m, "bias_away", 0);
    r.metrics.bias_rows_toward = get_int<std::int64_t>(m, "bias_rows_toward", 0);
    r.metrics.bias_rows_away = get_int<std::int64_t>(m, "bias_rows_away", 0);
    const auto& w = m.at("worst");
    r.metrics.worst = {get_int<int>(w, "seq"), get_int<int>(w, "head"), get_int<int>(w, "dim"),
                       get_int<int>(w, "query_token", -1)};  // absent for plain decode
    r.limit = get_num(j, "limit");
    r.margin = get_num(j, "margin");
    r.variant_elements = get_int<std::int64_t>(j, "variant_elements");
    r.seconds = j.at("seconds").get<double>();
    r.index = get_int<int>(j, "index", -1);  // absent in reports written before merge/resume existed
    r.device = j.value("device", std::string());  // absent before --device cuda:all existed
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("malformed cell result: ") + e.what());
  }
}

}  // namespace pacheck
