#include "judge/verdict.hpp"

#include <stdexcept>
#include <string>

namespace pacheck {

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::pass: return "pass";
    case Verdict::fail: return "fail";
    case Verdict::poisoned: return "poisoned";
    case Verdict::variant: return "variant";
    case Verdict::unwritten: return "unwritten";
    case Verdict::oob_write: return "oob_write";
    case Verdict::input_mutated: return "input_mutated";
    case Verdict::declined: return "declined";
    case Verdict::error: return "error";
    case Verdict::crash: return "crash";
    case Verdict::timeout: return "timeout";
  }
  return "?";
}

Verdict parse_verdict(std::string_view s) {
  for (Verdict v : {Verdict::pass, Verdict::fail, Verdict::poisoned, Verdict::variant, Verdict::unwritten,
                    Verdict::oob_write, Verdict::input_mutated, Verdict::declined, Verdict::error, Verdict::crash,
                    Verdict::timeout})
    if (s == verdict_name(v)) return v;
  throw std::invalid_argument("unknown verdict '" + std::string(s) + "'");
}

bool is_failure(Verdict v) { return v != Verdict::pass && v != Verdict::declined; }

}  // namespace pacheck
