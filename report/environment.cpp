#include "report/environment.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>

#include <regex>

#include "core/version.hpp"
#include "kernels/backend.hpp"
#include "report/build_info.hpp"

namespace pacheck {

namespace {
std::string compiler_string() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}
}  // namespace

void parse_device_description(Environment& env, const std::string& description) {
  env.device_description = description;
  utsname u{};
  const std::string machine = ::uname(&u) == 0 ? u.machine : "";
  if (env.device == "cpu" || env.device.empty()) {
    env.device_name = description;
    env.arch = machine;
    return;
  }
  std::smatch m;
  static const std::regex arch_re(R"(^(.*?)\s+(sm_\d+a?|gfx[0-9a-f]+)\b)");
  static const std::regex driver_re(R"(driver ([^,]+))");
  static const std::regex runtime_re(R"(runtime ([^,]+))");
  if (std::regex_search(description, m, arch_re)) {
    env.device_name = m[1];
    env.arch = m[2];
  } else {
    env.device_name = description;
  }
  if (std::regex_search(description, m, driver_re)) env.driver = m[1];
  if (std::regex_search(description, m, runtime_re)) env.runtime = m[1];
}

Environment collect_environment(const std::string& device_spec, std::vector<PluginFingerprint> plugins) {
  Environment env;
  env.pacheck_version = pacheck_version();
  env.git_commit = PACHECK_GIT_COMMIT;
  env.build_type = PACHECK_BUILD_TYPE;
  env.compiler = compiler_string();
  utsname u{};
  if (::uname(&u) == 0) env.host = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  env.device = device_spec;
  try {
    // "cuda:all": the first device describes the run (they are one model on the machines this targets).
    const std::vector<std::string> specs = resolve_device_specs(device_spec);
    parse_device_description(env, open_backend(specs.front())->description());
    if (specs.size() > 1) env.device_name += fmt::format(" (x{})", specs.size());
  } catch (const std::exception& e) {
    env.device_name = fmt::format("unavailable: {}", e.what());
  }
  env.plugins = std::move(plugins);
  return env;
}

nlohmann::json to_json(const Environment& e) {
  nlohmann::json plugins = nlohmann::json::array();
  for (const auto& p : e.plugins) plugins.push_back({{"path", p.path}, {"sha256", p.sha256}});
  return {{"pacheck_version", e.pacheck_version}, {"git_commit", e.git_commit}, {"build_type", e.build_type},
          {"compiler", e.compiler},               {"host", e.host},             {"device", e.device},
          {"device_name", e.device_name},         {"arch", e.arch},             {"driver", e.driver},
          {"runtime", e.runtime},                 {"device_description", e.device_description},
          {"plugins", plugins}};
}

std::vector<std::pair<std::string, std::string>> environment_rows(const Environment& e) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"pacheck.version", e.pacheck_version}, {"pacheck.git_commit", e.git_commit},
      {"pacheck.build_type", e.build_type},   {"compiler", e.compiler},
      {"host", e.host},                       {"device", e.device},
      {"device.name", e.device_name},         {"device.arch", e.arch},
      {"device.driver", e.driver},            {"device.runtime", e.runtime},
      {"device.description", e.device_description}};
  for (const auto& p : e.plugins) rows.push_back({"plugin.sha256 " + p.path, p.sha256});
  return rows;
}

}  // namespace pacheck
