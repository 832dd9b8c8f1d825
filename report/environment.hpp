// The environment fingerprint every report carries: enough to tie results run on someone else's machine to
// a build (pacheck version and commit, compiler, host, device, driver and runtime, plugin SHA-256).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pacheck {

/// A plugin library as the fingerprint records it.
struct PluginFingerprint {
  std::string path;    ///< as loaded
  std::string sha256;  ///< of the library file, 64 lower-case hex digits
};

/// Where a run's evidence came from.
struct Environment {
  std::string pacheck_version;     ///< "0.1.0"
  std::string git_commit;          ///< short hash of the build's checkout, "-dirty" if tracked files differed; "unknown" outside a checkout
  std::string build_type;          ///< CMAKE_BUILD_TYPE of the build
  std::string compiler;            ///< "gcc 12.2.0", "clang 16.0.6 ..."
  std::string host;                ///< uname: "Linux 6.1.0-18-amd64 x86_64"
  std::string device;              ///< device spec: "cpu", "cuda:0"
  std::string device_name;         ///< "NVIDIA H200", or the CPU model
  std::string arch;                ///< "sm_90", "gfx1100"; the machine architecture ("x86_64") for the CPU
  std::string driver;              ///< GPU driver version ("" on the CPU)
  std::string runtime;             ///< GPU runtime version ("" on the CPU)
  std::string device_description;  ///< Backend::description() verbatim
  std::vector<PluginFingerprint> plugins;
};

/// Collects the fingerprint of this build and of `device_spec`, opening the device to describe it. Call
/// it after isolated children have finished (a GPU context must not exist in the parent while it forks).
/// Never throws: a device that cannot be opened leaves device_name saying why.
Environment collect_environment(const std::string& device_spec, std::vector<PluginFingerprint> plugins = {});
/// Fills device_name, arch, driver and runtime of `env` from a Backend::description() such as
/// "NVIDIA H200 sm_90, 132 SMs, 139.8 GiB, driver 13.0, runtime 13.0" (CPU: the model; arch = uname -m).
void parse_device_description(Environment& env, const std::string& description);
nlohmann::json to_json(const Environment& env);
/// Reads to_json(Environment); missing keys read as "" (reports from older builds). Defined in
/// report/report_read.cpp with the other readers of report.json; throws nlohmann::json::exception for a
/// field of the wrong type.
Environment environment_from_json(const nlohmann::json& j);
/// The fingerprint as (key, value) rows, as junit.xml's properties and summary.md's table name them:
/// "pacheck.version", "pacheck.git_commit", ..., "device.description", then "plugin.sha256 PATH" per plugin.
std::vector<std::pair<std::string, std::string>> environment_rows(const Environment& e);

}  // namespace pacheck
