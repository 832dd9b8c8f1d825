// Planted kernels: CPU kernels with one deliberate fault each, of classes the fixed suites do not name
// (docs/fault-classes.md). Each exists to show a property failing, with a shrunk counterexample, on the
// fault it is meant to catch. None is in Registry::global(): `pacheck run`, `fuzz` and `repro` take them by name
// (--kernel planted.NAME) and the property tests find them here; a default run and `pacheck list` never see them.
#pragma once

#include <string>
#include <vector>

#include "kernels/kernel.hpp"

namespace pacheck::prop {

/// Every planted kernel ("planted.*"):
///  - planted.off_by_one_block      last block holds seq_len % block_size tokens: 0 for aligned lengths
///  - planted.gqa_modulo            query head h reads KV head h % num_kv_heads instead of h / GQA ratio
///  - planted.split_kv_empty_partition  8 fixed partitions per sequence, merged pairwise without
///                                  guarding two empty partitions (-inf - -inf = NaN)
///  - planted.softmax_no_max        exp(logit) without subtracting the row max (overflows on extreme)
///  - planted.physical_block_order  accumulates P.V in physical-block order (paging-dependent rounding)
///  - planted.launch_order          odd launches accumulate tokens in reverse (nondeterministic order)
///  - planted.batch_split           split-KV partition length chosen from the batch's longest sequence
///  - planted.f16_staged_v          V staged through f16 before P.V (overflows for large V, loses bits
///                                  for V in f16's subnormal range)
///  - planted.bf16_accumulator      P.V accumulator rounded to bf16 after every add
///  - planted.f16_accumulator       P.V accumulator rounded to f16 after every add
///  - planted.drop_last_token       the last token of every sequence longer than 1 left out
///  - planted.exp2_no_log2e         exp2(s - max) without the log2(e) factor (softmax temperature ln 2)
///  - planted.nondeterministic      in 7 calls of 8 (std::random_device) one random element rounds the
///                                  wrong way (verdict nondeterministic on faulted cells)
///  - planted.stateful              scratch kept across calls of one shape moves element 0 by one ULP
///                                  (verdict stateful)
///  - planted.tail_leak             a non-zero V tail slot moves one element by one ULP (verdict variant)
///  - planted.truncating_output     output rounded toward zero instead of to nearest even (verdict biased)
///  - planted.window_off_by_one     sliding window W read as W - 1 positions (first token dropped at W = seq_len)
///  - planted.sinks_f16             sink logits staged through f16, running max seeded from them (-1e30 -> NaN)
const std::vector<KernelPtr>& planted_kernels();

/// The planted kernel named `name`, or nullptr.
KernelPtr find_planted_kernel(const std::string& name);

/// A new instance of the planted kernel named `name` (the state of planted.launch_order and
/// planted.stateful starts afresh, unlike planted_kernels()' shared instances), or nullptr.
KernelPtr new_planted_kernel(const std::string& name);

}  // namespace pacheck::prop
