// Shared pieces of the exec/ tests: small two-sequence suites and a planted kernel that counts its calls.
#pragma once

#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "exec/runner.hpp"

namespace pacheck::exec_test {

/// One suite cell: h4/2 d32 bs16, seq_lens {len, 32} (the second sequence is aligned, so only `len`
/// decides straddling), with fault `f`.
inline SuiteCell two_sequence_cell(int len, const FaultSpec& f) {
  SuiteCell sc;
  sc.cell = Cell{Case{.num_heads = 4, .num_kv_heads = 2, .head_size = 32, .block_size = 16, .seq_lens = {len, 32}}, f};
  return sc;
}

/// A suite of one two_sequence_cell per (len, fault), lengths outer.
inline Suite two_sequence_suite(const std::vector<int>& lens, const std::vector<FaultSpec>& faults,
                                std::string name = "test") {
  Suite s;
  s.name = std::move(name);
  for (int len : lens)
    for (const auto& f : faults) s.cells.push_back(two_sequence_cell(len, f));
  return s;
}

/// A kernel owned by the test (a local), as the KernelPtr the runner takes.
inline KernelPtr unowned(const Kernel* k) { return KernelPtr(k, [](const Kernel*) {}); }

inline const FaultSpec kClean{};
inline const FaultSpec kVNanTail{Poison::nan, Target::v, Region::tail};
inline const FaultSpec kKBigAll{Poison::big, Target::k, Region::all};

/// cpu.reference that counts its calls and misbehaves on cases whose seq_lens[0] is `trigger`: declines
/// them, or throws there. It can claim another device (`device`) while still running on host memory, so
/// a test can hand it CPU backends standing in for GPU devices, and prefer other layouts.
class PlantedCpu : public Kernel {
 public:
  enum class What { none, decline, kernel_error, fatal_error, harness_error };
  PlantedCpu(std::string name, What what = What::none, int trigger = -1, pacheck_device device = PACHECK_DEVICE_CPU,
             std::vector<Layout> layouts = {Layout::vllm, Layout::nhd, Layout::hnd})
      : name_(std::move(name)), what_(what), trigger_(trigger), device_(device), layouts_(std::move(layouts)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "planted exec test kernel"; }
  pacheck_device device() const override { return device_; }
  std::vector<Layout> layouts() const override { return layouts_; }
  Support supports(const Case& c) const override {
    return what_ == What::decline && c.seq_lens[0] == trigger_ ? Support::no("planted decline") : Support::yes();
  }
  void run(const pacheck_kernel_args& a) const override {
    ++calls;
    if (a.seq_lens[0] == trigger_) {
      if (what_ == What::kernel_error) throw KernelError("planted launch failure");
      if (what_ == What::fatal_error) throw KernelError("planted illegal address", /*fatal=*/true);
      if (what_ == What::harness_error) throw std::runtime_error("planted host failure");
    }
    Registry::global().find("cpu.reference")->run(a);
  }
  mutable std::atomic<int> calls{0};

 private:
  std::string name_;
  What what_;
  int trigger_;
  pacheck_device device_;
  std::vector<Layout> layouts_;
};

}  // namespace pacheck::exec_test
