// What identifies a run: the contents of run.json, which --resume checks and merge groups shards by.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exec/runner.hpp"

namespace pacheck {

/// {"suite", "cells", "kernels", "device", "filter", "seed", "tolerance", "multiple", "oracle_precision",
/// "shard": {index, count}}: suite (name and cell count), kernels (names, in order), device, the options
/// that decide verdicts and the shard. `filter` is the regex text as given ("" for none).
nlohmann::json run_identity(const Suite& suite, const std::vector<std::string>& kernels, const std::string& device,
                            const RunOptions& opt, const std::string& filter);

}  // namespace pacheck
