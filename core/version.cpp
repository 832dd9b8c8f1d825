#include "core/version.hpp"

namespace pacheck {

std::string pacheck_version() { return "0.1.0"; }

}  // namespace pacheck
