// pacheck.fuzz (the C API's fuzz call): `pacheck fuzz`'s properties, shrinking and reproduce strings against a
// registered kernel, run on the caller's thread. Compiled with the properties into libpacheck_cells_c
// (PACHECK_HAVE_FUZZ); elsewhere the call says why it cannot run.
#include <fmt/format.h>

#include <random>
#include <stdexcept>

#include "cells/cells_internal.hpp"

#ifdef PACHECK_HAVE_FUZZ
#include "properties/properties.hpp"
#endif

namespace pacheck::cells {

#ifdef PACHECK_HAVE_FUZZ
namespace {

FuzzProperty run_one(prop::Property p, const prop::KernelUnderTest& target, const prop::RunParams& params) {
  const prop::PropertyRun run = prop::run_property(p, target, params);
  FuzzProperty out;
  out.name = std::string(prop::property_name(p));
  out.passed = run.passed;
  out.cases = run.cases;
  out.exercised = run.exercised;
  out.shrinks = run.shrinks;
  out.over_memory = run.over_memory;
  out.device_out_of_memory = run.device_out_of_memory;
  out.seconds = run.seconds;
  out.coverage = prop::tag_summary(run.distribution);
  out.message = run.message;
  out.reproduce = run.reproduce;
  if (run.counterexample) {
    out.counterexample = run.counterexample->message;
    out.cell_id = run.counterexample->cell.id();
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, bool>> property_names() {
  std::vector<std::pair<std::string, bool>> out;
  for (const prop::PropertyInfo& p : prop::property_table()) out.emplace_back(std::string(p.name), p.opt_in);
  return out;
}

FuzzAnswer fuzz(const FuzzRequest& req) {
  const KernelPtr kernel = kernel_named(req.kernel);
  std::vector<prop::Property> props;
  try {
    for (const auto& name : req.properties) props.push_back(prop::parse_property(name));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(fmt::format("properties: {}", e.what()));
  }
  // Opt-in properties run only when named; an MLA kernel runs those that apply to it (check_applies).
  if (props.empty()) props = prop::default_properties_for(*kernel);
  for (prop::Property p : props) {
    try {
      prop::check_applies(p, *kernel);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(fmt::format("properties: {}", e.what()));
    }
  }
  if (!req.reproduce.empty() && props.size() != 1)
    throw std::runtime_error("reproduce replays one property's failure: name it in properties");
  FuzzAnswer out;
  out.kernel = kernel->name();
  out.negative_control = kernel->is_negative_control();
  out.budget = req.max_memory > 0 ? MemoryBudget{req.max_memory, "given"} : default_memory_budget();
  prop::KernelUnderTest target = prop::make_target(kernel, req.device, RunOptions{});
  if (!kernel_options(kernel->name()).sparse_pools) {
    // As batches and run_cell decline them: a kernel that may copy a whole pool is never handed a sparse one.
    auto probed = target.space.supports;
    target.space.supports = [probed](const Case& c) -> Support {
      if (c.high_block_ids > 0) return Support::no("a sparse pool (high_block_ids): the kernel does not take one");
      return probed ? probed(c) : Support::yes();
    };
  }
  // The kernel's allowed copies of its inputs are not in the properties' estimate: the budget per case is
  // pacheck's own memory, as `pacheck fuzz --max-memory`.
  target.max_case_bytes = out.budget.bytes;
  out.device = target.device;
  prop::RunParams params;
  params.seed = req.seed ? *req.seed : std::random_device{}();
  params.cases = req.cases > 0 ? req.cases : 100;
  params.budget_seconds = req.budget_s > 0 ? req.budget_s / static_cast<double>(props.size()) : 0;
  params.max_size = req.max_size;
  params.shrink = req.shrink;
  params.reproduce = req.reproduce;
  out.seed = params.seed;
  for (prop::Property p : props) out.properties.push_back(run_one(p, target, params));
  return out;
}
#else
namespace {
[[noreturn]] void no_properties() {
  throw std::runtime_error(
      "this library has no properties (pacheck.fuzz): it is libpacheck_cells.so, or a build without RapidCheck; load "
      "libpacheck_cells_c.so (the Python package's library) built with RapidCheck (librapidcheck-dev)");
}
}  // namespace

std::vector<std::pair<std::string, bool>> property_names() { no_properties(); }
FuzzAnswer fuzz(const FuzzRequest&) { no_properties(); }
#endif

}  // namespace pacheck::cells
