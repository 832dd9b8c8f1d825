#include "faults/inject.hpp"

#include <fmt/format.h>

#include <stdexcept>


namespace pacheck {

namespace {
bool region_has(Region r, SlotClass c) {
  switch (r) {
    case Region::tail: return c == SlotClass::tail;
    case Region::unused: return c == SlotClass::unused;
    case Region::padding: return c == SlotClass::padding_target;
    case Region::all: return c != SlotClass::written;
  }
  return false;
}
}  // namespace

std::int64_t inject(PagedCache& pc, const FaultSpec& f) {
  if (f.clean()) return 0;
  const std::uint32_t bits = poison_bits(f.poison, pc.kv_dtype);
  const bool to_k = f.target != Target::v, to_v = f.target != Target::k;
  std::int64_t written = 0;
  for (int block = 0; block < pc.num_blocks; ++block)
    for (int slot = 0; slot < pc.block_size; ++slot) {
      if (!region_has(f.region, pc.slot_class(block, slot))) continue;
      for (int g = 0; g < pc.num_kv_heads; ++g)
        for (int d = 0; d < pc.head_size; ++d) {
          if (to_k) store_bits(pc.key_cache.data(), pc.key_offset(block, g, slot, d), pc.kv_dtype, bits), ++written;
          if (to_v) store_bits(pc.value_cache.data(), pc.value_offset(block, g, slot, d), pc.kv_dtype, bits), ++written;
        }
    }
  return written;
}

std::string ScaleFault::id() const {
  return fmt::format("{}:scale={}@h{}", target_name(target), value, head < 0 ? std::string("last") : std::to_string(head));
}

void ScaleFault::apply(std::vector<float>& k, std::vector<float>& v) const {
  const auto set = [&](std::vector<float>& s) {
    const long g = head < 0 ? static_cast<long>(s.size()) - 1 : head;
    if (g >= 0 && g < static_cast<long>(s.size())) s[static_cast<std::size_t>(g)] = value;
  };
  if (target != Target::v) set(k);
  if (target != Target::k) set(v);
}

bool poisons_v_tail(const Cell& cell) {
  const FaultSpec& f = cell.fault;
  return poison_is_nonfinite(f.poison) && f.target != Target::k &&
         (f.region == Region::tail || f.region == Region::all) && cell.c.straddles();
}

}  // namespace pacheck
