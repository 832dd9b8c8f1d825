#include "report/run_identity.hpp"

namespace pacheck {

nlohmann::json run_identity(const Suite& suite, const std::vector<std::string>& kernels, const std::string& device,
                            const RunOptions& opt, const std::string& filter) {
  nlohmann::json id = {{"suite", suite.name},
          {"cells", suite.cells.size()},
          {"kernels", kernels},
          {"device", device},
          {"filter", filter},
          {"seed", opt.seed ? nlohmann::json(*opt.seed) : nlohmann::json(nullptr)},
          {"tolerance", opt.tolerance.policy == TolerancePolicy::fixed ? "fixed" : "calibrated"},
          {"multiple", opt.tolerance.multiple},
          {"oracle_precision", opt.oracle_precision == Precision::f32 ? "f32" : "f64"},
          {"shard", {{"index", opt.shard_index}, {"count", opt.shard_count}}}};
  if (opt.tolerance.tf32) id["tf32"] = true;  // only when given, so runs from before --tf32 still resume
  // A resumed run must plan the controls' cells as the stopped one did (not_run or run).
  if (opt.controls_everywhere) id["controls_everywhere"] = true;
  return id;
}

}  // namespace pacheck
