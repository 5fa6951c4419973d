// scalecomm group: the settings of one process group.
//
// Contract: GroupConfig has one field per group setting declared in
// core/params.h (SCALECOMM_GROUP_PARAMS), initialised to its declared default,
// plus the group's name. Settings resolve: declared default < the creator's
// value (e.g. init_process_group's timeout) < the SCALECOMM_* variable
// (loadEnvironment) < the caller's per-group options. checkConfig() raises
// Error(InvalidArgument) naming the option, its variable and the valid values.
// forEachParam() visits every declared field with its spec, so bindings,
// logging and tests never list the fields again. Value type.
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"

namespace scalecomm {

struct GroupConfig {
#define SC_CONFIG_FIELD(kind, field, option, env, def, lo, hi, choices, doc) params_detail::kind field = def;
  SCALECOMM_GROUP_PARAMS(SC_CONFIG_FIELD)
#undef SC_CONFIG_FIELD
  std::string groupName;  // names the group's rendezvous keys; not a setting

  bool mpiAllowed() const { return mpi != "0"; }
};

// Calls f(const ParamSpec&, Field& value) for every declared field of c, in
// declaration order (Field is int64_t or std::string, const for a const c).
template <typename Config, typename F>
void forEachParam(Config& c, F&& f) {
#define SC_VISIT_FIELD(kind, field, option, env, def, lo, hi, choices, doc) f(paramSpec(env), c.field);
  SCALECOMM_GROUP_PARAMS(SC_VISIT_FIELD)
#undef SC_VISIT_FIELD
}

// Overwrites each field whose SCALECOMM_* variable is set (non-empty).
void loadEnvironment(GroupConfig& c);

// Declared defaults overridden by the SCALECOMM_* variables.
GroupConfig configFromEnvironment();

// Throws Error(InvalidArgument) for a setting out of range for a group of `size` ranks.
void checkConfig(const GroupConfig& c, int size);

// "algorithm=auto transport=auto ..." (every setting, for the INFO log).
std::string describe(const GroupConfig& c);

}  // namespace scalecomm
