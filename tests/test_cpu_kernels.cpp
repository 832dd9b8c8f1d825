// The built-in CPU kernels on inputs that once broke them (found by the property tests).
#include <gtest/gtest.h>

#include <string>

#include "kernels/backend.hpp"
#include "exec/runner.hpp"

namespace pacheck {
namespace {

// dist=extreme puts bf16/f32 V near 1.7e38 and makes many keys tie at the max logit: an accumulator of
// unnormalised p x V overflows fp32 to Inf there, while the output (a convex combination of V) is finite.
// Found by the agreement property on cpu.reference (docs/PROPERTIES.md, Findings); ctx1500 gives
// cpu.split_kv three partitions, so its merge is exercised too.
TEST(CpuKernels, ExtremeVNearTheFp32LimitDoesNotOverflow) {
  auto backend = make_cpu_backend();
  for (const char* name : {"cpu.reference", "cpu.split_kv", "cpu.vector_v_masked", "cpu.vector_v"})
    for (const char* id : {"h1/1 d32 bs1 bf16 ctx511 vllm seed40952 dist=extreme spare=1 padcols=0",
                           "h1/1 d32 bs1 bf16 ctx1500 vllm seed40952 dist=extreme spare=1 padcols=0",
                           "h2/1 d64 bs16 f32 ctx1500,77 vllm seed3 dist=extreme"}) {
      Cell cell;
      cell.c = parse_case_id(id);
      const auto [r, raw] = run_cell(cell, *Registry::global().find(name), *backend, RunOptions{});
      EXPECT_EQ(r.verdict, Verdict::pass) << name << " " << id << ": " << r.detail;
      EXPECT_EQ(r.metrics.inf_count, 0) << name << " " << id;
    }
}

}  // namespace
}  // namespace pacheck
