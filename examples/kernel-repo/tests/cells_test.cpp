// Every cell of the tail-poison suite as a GoogleTest test of this repository's CPU kernel
// (src/online_decode.c, linked in): `kr_cells_test --gtest_filter='tail_poison.*nan_at_tail*'`,
// GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS and --gtest_output=xml work as for any gtest binary.
#include <pacheck/gtest.hpp>

extern "C" pacheck_status pacheck_register_kernels(pacheck_registrar* registrar);

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  pacheck::gtest::Options opt;
  opt.repro_plugin = KR_PLUGIN;
  pacheck::gtest::register_suite("tail-poison", pacheck_register_kernels, opt);
  return RUN_ALL_TESTS();
}
