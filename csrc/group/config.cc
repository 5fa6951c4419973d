#include "group/config.h"

#include <cstdlib>
#include <sstream>
#include <type_traits>

#include "core/error.h"

namespace scalecomm {

void loadEnvironment(GroupConfig& c) {
  forEachParam(c, [](const ParamSpec& spec, auto& value) {
    if (!paramIsSet(spec.name)) return;
    std::string v = std::getenv(spec.name);
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, int64_t>) {
      value = parseIntParam(spec, v);
    } else {
      value = v;
    }
  });
}

GroupConfig configFromEnvironment() {
  GroupConfig c;
  loadEnvironment(c);
  return c;
}

void checkConfig(const GroupConfig& c, int size) {
  forEachParam(c, [size](const ParamSpec& spec, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, int64_t>) {
      checkIntParam(spec, value, size);
    } else {
      checkTextParam(spec, value);
    }
  });
  if (c.shmRingBytes % 64 != 0) {
    fail(ErrorKind::InvalidArgument,
         "scalecomm: shm_ring_bytes (SCALECOMM_SHM_RING_BYTES) must be a multiple of 64, got ", c.shmRingBytes, ".");
  }
  if (c.shmWindowBytes % 64 != 0) {
    fail(ErrorKind::InvalidArgument,
         "scalecomm: shm_window_bytes (SCALECOMM_SHM_WINDOW_BYTES) must be a multiple of 64, got ", c.shmWindowBytes,
         ".");
  }
}

std::string describe(const GroupConfig& c) {
  std::ostringstream out;
  const char* sep = "";
  forEachParam(c, [&](const ParamSpec& spec, const auto& value) {
    out << sep << spec.option << '=' << value;
    sep = " ";
  });
  return out.str();
}

}  // namespace scalecomm
