#include "report/report.hpp"

#include <cmath>
#include <limits>

namespace pacheck {


nlohmann::json to_json(const RunSummary& s, const std::string& suite, const std::string& device) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : s.kernels)
    kernels.push_back({{"kernel", k.kernel},
                       {"passed", k.passed},
                       {"failed", k.failed},
                       {"declined", k.declined},
                       {"caught", k.caught},
                       {"missed", k.missed},
                       {"negative_control", std::string(control_outcome_name(k.control))},
                       {"vacuous", k.vacuous}});
  nlohmann::json results = nlohmann::json::array();
  for (const auto& r : s.results) results.push_back(to_json(r));
  return {{"pacheck", pacheck_version()},
          {"suite", suite},
          {"device", device},
          {"exit_code", s.exit_code()},
          {"summary",
           {{"passed", s.passed}, {"failed", s.failed}, {"declined", s.declined}, {"caught", s.caught},
            {"blind", s.blind}, {"vacuous", s.vacuous}}},
          {"selftest", {{"passed", s.selftest.passed}, {"lines", s.selftest.lines}}},
          {"kernels", kernels},
          {"results", results}};
}

}  // namespace pacheck
