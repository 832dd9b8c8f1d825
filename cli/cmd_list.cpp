// pacheck list kernels|suites|devices
#include <fmt/format.h>

#include "cli/common.hpp"
#include "kernels/backend.hpp"

namespace pacheck::cli {

void add_list_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("list", "list kernels, suites or devices");
  auto what = std::make_shared<std::string>();
  cmd->add_option("what", *what, "kernels, suites or devices")->required()->check(CLI::IsMember({"kernels", "suites", "devices"}));
  cmd->callback([&ctx, what] {
    if (*what == "kernels") {
      for (const auto& k : Registry::global().all()) {
        const char* dev = k->device() == PACHECK_DEVICE_CPU ? "cpu" : k->device() == PACHECK_DEVICE_CUDA ? "cuda" : "hip";
        fmt::print("{:<24} {:<5} {}{}\n", k->name(), dev, k->description(), k->is_negative_control() ? " [negative control]" : "");
      }
    } else if (*what == "suites") {
      for (const auto& n : list_suites()) {
        try {
          Suite s = load_suite(n);
          fmt::print("{:<14} {:>5} cells  {}\n", n, s.cells.size(), s.file);
        } catch (const std::exception& e) {
          fmt::print("{:<14} INVALID: {}\n", n, e.what());
          ctx.exit_code = kUsage;
        }
      }
    } else {
      for (const auto& b : backend_status())
        fmt::print("{:<5} {:<10} {} device(s)  {}\n", b.kind, b.built ? "built" : "not built", b.devices, b.detail);
    }
  });
}

}  // namespace pacheck::cli
