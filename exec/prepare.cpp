#include "exec/prepare.hpp"

#include "faults/inject.hpp"
#include "judge/comparator.hpp"

namespace pacheck {

CaseData prepare_inputs(const Case& c) {
  CaseData d;
  d.c = c;
  d.pre = generate(c);
  d.cache = page(c, d.pre);
  return d;
}

CaseData prepare_case(const Case& c, const RunOptions& opt) {
  CaseData d = prepare_inputs(c);
  d.ref = oracle(c, d.pre, opt.oracle_precision);
  if (opt.tolerance.policy == TolerancePolicy::calibrated) {
    const auto emu = emulate_low_precision(c, d.pre);
    d.emulation_rel_linf = compare(emu, d.ref.out, c, c.out_dtype).rel_linf;
  }
  return d;
}

FaultedCache faulted_cache(const PagedCache& clean, const FaultSpec& fault) {
  FaultedCache f{clean, 0};
  f.poisoned = inject(f.cache, fault);
  return f;
}

}  // namespace pacheck
