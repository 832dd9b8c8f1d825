// The CPU MLA kernels, one table: the honest designs (fault-classes.md section 9 in MLA form) first, then the
// negative controls, in the order tests and reports show them.
#include "kernels/mla_kernel.hpp"

namespace pacheck {

std::vector<MlaKernelPtr> make_cpu_mla_reference_family();  // mla_reference.cpp: reference, then 4 controls
std::vector<MlaKernelPtr> make_cpu_mla_designs();           // mla_designs.cpp: online, split_kv_lse, half, p_in_v
std::vector<MlaKernelPtr> make_cpu_mla_read_controls();     // mla_reads.cpp: v_tail, packed_tile

std::vector<MlaKernelPtr> cpu_mla_kernels() {
  const std::vector<MlaKernelPtr> reference = make_cpu_mla_reference_family(), designs = make_cpu_mla_designs(),
                                  reads = make_cpu_mla_read_controls();
  std::vector<MlaKernelPtr> out{reference.front()};        // cpu.mla_reference
  out.insert(out.end(), designs.begin(), designs.end());  // the honest panel
  out.insert(out.end(), reference.begin() + 1, reference.end());  // NEGATIVE CONTROLS: scale, rope, V offset
  out.insert(out.end(), reads.begin(), reads.end());              // NEGATIVE CONTROLS: V past the keys
  return out;
}

}  // namespace pacheck
