# All third-party code comes from Debian packages (ci/install-deps.sh).
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

# toml++ is used header-only so binaries carry no libtomlplusplus.so dependency (the GPU machine lacks it).
find_path(TOMLPP_INCLUDE_DIR toml++/toml.h REQUIRED)
add_library(pacheck_tomlpp INTERFACE)
target_include_directories(pacheck_tomlpp SYSTEM INTERFACE ${TOMLPP_INCLUDE_DIR})
target_compile_definitions(pacheck_tomlpp INTERFACE TOML_HEADER_ONLY=1 TOML_EXCEPTIONS=1)

# Random123 (Philox) is header-only: the counter-based generator behind pre-paging tensors.
find_path(RANDOM123_INCLUDE_DIR Random123/philox.h REQUIRED)
add_library(pacheck_random123 INTERFACE)
target_include_directories(pacheck_random123 SYSTEM INTERFACE ${RANDOM123_INCLUDE_DIR})

# fmt header-only for the same reason as toml++ (no libfmt.so on the GPU machine).
if(TARGET fmt::fmt-header-only)
  set(PACHECK_FMT fmt::fmt-header-only)
else()
  set(PACHECK_FMT fmt::fmt)
endif()

# pugixml writes junit.xml. Its static archive, so binaries carry no libpugixml.so dependency (the GPU machine
# lacks it); Debian's package config provides pugixml::static, else the archive is found directly.
find_package(pugixml QUIET)
if(TARGET pugixml::static)
  set(PACHECK_PUGIXML pugixml::static)
else()
  find_path(PUGIXML_INCLUDE_DIR pugixml.hpp REQUIRED)
  find_library(PUGIXML_STATIC_LIBRARY NAMES libpugixml.a REQUIRED)
  add_library(pacheck_pugixml INTERFACE)
  target_include_directories(pacheck_pugixml SYSTEM INTERFACE ${PUGIXML_INCLUDE_DIR})
  target_link_libraries(pacheck_pugixml INTERFACE ${PUGIXML_STATIC_LIBRARY})
  set(PACHECK_PUGIXML pacheck_pugixml)
endif()

if(PACHECK_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(rapidcheck REQUIRED)
else()
  # pacheck fuzz and pacheck.fuzz without the tests (the Python wheel's build): RapidCheck when it is installed.
  find_package(rapidcheck QUIET)
endif()
