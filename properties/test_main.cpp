// Test main of the property tests: the CI defaults for RapidCheck, unless RC_PARAMS sets them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

int main(int argc, char** argv) {
  // RapidCheck reads RC_PARAMS once, on first use. CI wants >= 300 cases per property and a fixed seed
  // (a failure must reproduce on the next run); a user's RC_PARAMS keys win over these defaults. ctest's
  // default tier sets PACHECK_PROPERTY_CASES to run fewer cases (README command 2 must finish in minutes);
  // the long tier, which CI adds, leaves it unset.
  const char* env = std::getenv("RC_PARAMS");
  std::string params = env ? env : "";
  auto has = [&](const std::string& key) {
    std::istringstream in(params);
    std::string kv;
    while (in >> kv)
      if (kv.rfind(key + "=", 0) == 0) return true;
    return false;
  };
  const char* tier_cases = std::getenv("PACHECK_PROPERTY_CASES");
  if (!has("max_success")) params += std::string(" max_success=") + (tier_cases && *tier_cases ? tier_cases : "300");
  if (!has("seed")) params += " seed=5";
  setenv("RC_PARAMS", params.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
