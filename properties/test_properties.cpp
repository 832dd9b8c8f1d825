// The seven properties over every built-in CPU kernel, as RC_GTEST_PROP tests (ctest label `property`).
// cpu.vector_v's tail-poison property is a negative control: it must fail, which test_planted.cpp
// asserts; its other six properties (clean caches) must hold like any correct kernel's.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>

#include "properties/properties.hpp"

namespace {

using pacheck::prop::Property;

/// One target per kernel for the whole test program (probing its case space once).
const pacheck::prop::KernelUnderTest& target(const std::string& kernel) {
  static std::map<std::string, pacheck::prop::KernelUnderTest> targets;
  auto it = targets.find(kernel);
  if (it == targets.end()) {
    pacheck::KernelPtr k = pacheck::Registry::global().find(kernel);
    if (!k) throw std::invalid_argument("no kernel " + kernel);
    it = targets.emplace(kernel, pacheck::prop::make_target(k)).first;
  }
  return it->second;
}

}  // namespace

#define PACHECK_PROPERTY(Kernel, kernel_name, Name, property) \
  RC_GTEST_PROP(Kernel, Name, ()) { pacheck::prop::check_once(Property::property, target(kernel_name)); }

#define PACHECK_ALL_PROPERTIES(Kernel, kernel_name)                        \
  PACHECK_PROPERTY(Kernel, kernel_name, Agreement, agreement)              \
  PACHECK_PROPERTY(Kernel, kernel_name, TailPoisonInvariance, tail_poison) \
  PACHECK_PROPERTY(Kernel, kernel_name, PagingInvariance, paging)          \
  PACHECK_PROPERTY(Kernel, kernel_name, Determinism, determinism)          \
  PACHECK_PROPERTY(Kernel, kernel_name, BatchInvariance, batch)            \
  PACHECK_PROPERTY(Kernel, kernel_name, GqaExpansion, gqa_expansion)       \
  PACHECK_PROPERTY(Kernel, kernel_name, ExactScaling, scaling)

PACHECK_ALL_PROPERTIES(CpuReference, "cpu.reference")
PACHECK_ALL_PROPERTIES(CpuVectorVMasked, "cpu.vector_v_masked")
PACHECK_ALL_PROPERTIES(CpuSplitKv, "cpu.split_kv")

// cpu.vector_v: every property but tail-poison (the negative control, asserted in test_planted.cpp).
PACHECK_PROPERTY(CpuVectorV, "cpu.vector_v", Agreement, agreement)
PACHECK_PROPERTY(CpuVectorV, "cpu.vector_v", PagingInvariance, paging)
PACHECK_PROPERTY(CpuVectorV, "cpu.vector_v", Determinism, determinism)
PACHECK_PROPERTY(CpuVectorV, "cpu.vector_v", BatchInvariance, batch)
PACHECK_PROPERTY(CpuVectorV, "cpu.vector_v", GqaExpansion, gqa_expansion)
PACHECK_PROPERTY(CpuVectorV, "cpu.vector_v", ExactScaling, scaling)
