// pacheck's version, as reports, case files and the CLI print it.
#pragma once

#include <string>

namespace pacheck {

/// pacheck's version string ("0.1.0"), the project() version of CMakeLists.txt.
std::string pacheck_version();

}  // namespace pacheck
