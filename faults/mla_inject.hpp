// Fault injection into an MLA latent cache (paging/mla_pager.hpp): the slot regions of faults/inject.hpp, in the
// part of each latent row the fault's target names (core/mla.hpp's MlaCell: K the rope part, V the latent
// part, K+V the whole row).
#pragma once

#include <cstdint>

#include "core/mla.hpp"
#include "faults/inject.hpp"

namespace pacheck {

/// Writes fault `f` into the latent cache of an MLA pool (page_mla) in place: its poison into values
/// mla_target_columns(m, f.target) of every slot of f.region (region_holds: tail, unused, padding, all, others),
/// in the live blocks of a sparse pool. Returns the elements written: 0 for a clean fault, a region the case
/// lacks (an aligned length and `tail`) and `window` (MLA cases have no sliding window). Throws
/// std::invalid_argument for `scales` (an MLA cache has no per-slot tables) and for a poison the cache dtype
/// cannot hold (poison_bits).
std::int64_t inject_mla(PagedCache& cache, const MlaShape& m, const FaultSpec& f);

/// True when an MLA cell's fault puts a NaN or Inf into the V prefix of an unwritten slot in some sequence's
/// final block that a kernel reading V over whole final blocks touches: poisons_v_tail() of the same case and
/// fault (the V and K+V targets hold the V prefix; K, the rope part, does not).
bool mla_poisons_v_tail(const MlaCell& cell);

}  // namespace pacheck
