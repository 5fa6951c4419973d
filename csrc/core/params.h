// scalecomm core: tunables.
//
// Contract: every SCALECOMM_* environment variable is declared exactly once, in
// params.cc, with its default and a one-line doc. Reading an undeclared name is
// an internal error, so a typo cannot silently read nothing. Values are read
// from the environment at each call (cheap; called at group creation only).
// Thread safe (read-only table; getenv is not raced by scalecomm).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace scalecomm {

struct ParamSpec {
  const char* name;          // environment variable, e.g. "SCALECOMM_TRANSPORT"
  const char* defaultValue;  // as text
  const char* doc;           // one line
};

const std::vector<ParamSpec>& allParams();

// The value set in the environment, else the declared default.
std::string paramString(const char* name);
int64_t paramInt(const char* name);
// True when the variable is set (non-empty) in the environment.
bool paramIsSet(const char* name);

}  // namespace scalecomm
