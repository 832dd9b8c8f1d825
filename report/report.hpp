// Machine-readable reports of a run (JSON). Console rendering lives in cli/.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/version.hpp"
#include "exec/runner.hpp"

namespace pacheck {

/// The whole run: {"pacheck": version, "suite", "device", "exit_code", "summary": {...}, "selftest": {...},
/// "kernels": [...], "results": [...]}.
nlohmann::json to_json(const RunSummary& s, const std::string& suite, const std::string& device);

}  // namespace pacheck
