#include "faults/mla_inject.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace pacheck {

std::int64_t inject_mla(PagedCache& pc, const MlaShape& m, const FaultSpec& f) {
  if (f.clean() || f.region == Region::window) return 0;
  if (f.region == Region::scales)
    throw std::invalid_argument(fmt::format("fault {}: an MLA latent cache has no per-slot scale tables", f.id()));
  const std::uint32_t bits = poison_bits(f.poison, pc.kv_dtype);
  const RowColumns cols = mla_target_columns(m, f.target);
  const int seq0_last = seq0_final_block(pc);
  std::int64_t written = 0;
  pc.for_each_live_block([&](int block) {
    for (int slot = 0; slot < pc.block_size; ++slot) {
      if (!region_holds(f.region, pc.slot_class(block, slot), block, seq0_last)) continue;
      for (int i = cols.first; i < cols.last; ++i, ++written)
        store_bits(pc.key_cache.data(), pc.key_offset(block, 0, slot, i), pc.kv_dtype, bits);
    }
  });
  return written;
}

bool mla_poisons_v_tail(const MlaCell& cell) { return poisons_v_tail(Cell{cell.mc.c, cell.fault}); }

}  // namespace pacheck
