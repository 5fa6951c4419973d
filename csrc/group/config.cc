#include "group/config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "core/logging.h"

namespace scalecomm {

namespace {

// Warns once per process about SCALECOMM_* variables no setting declares
// (a typo leaves the setting at its default), naming the closest declared one.
void warnUnknownVariables() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      if (name.rfind("SCALECOMM_", 0) != 0) continue;
      const ParamSpec* closest = nullptr;
      size_t best = std::string::npos;
      bool known = false;
      for (const ParamSpec& p : allParams()) {
        if (name == p.name) {
          known = true;
          break;
        }
        // Distance: characters that differ in the common length plus the difference in length.
        const std::string other = p.name;
        size_t d = name.size() > other.size() ? name.size() - other.size() : other.size() - name.size();
        for (size_t i = 0; i < std::min(name.size(), other.size()); ++i) d += name[i] != other[i];
        if (d < best) {
          best = d;
          closest = &p;
        }
      }
      if (known || name == "SCALECOMM_NO_CLUSTER") continue;  // scripts/run_main.sh's switch, not a setting
      SC_LOG(Warn, "unknown variable ", name, " ignored (no setting has this name",
             closest != nullptr && best <= 4 ? strCat("; did you mean ", closest->name, "?") : std::string(),
             "); python -c 'import pyscalecomm; print(pyscalecomm.params_markdown())' lists the settings");
    }
  });
}

}  // namespace

void loadEnvironment(GroupConfig& c) {
  warnUnknownVariables();
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
  if (c.deterministic != 0 && c.codecKernels == "torch") {
    fail(ErrorKind::InvalidArgument,
         "scalecomm: deterministic=1 (SCALECOMM_DETERMINISTIC) runs codecs in scalecomm's loops, whose top-k breaks "
         "ties by position; codec_kernels=torch (SCALECOMM_CODEC_KERNELS) cannot promise that: leave it auto or host");
  }
  if (c.deterministic != 0 && c.compression == "auto") {
    fail(ErrorKind::InvalidArgument,
         "scalecomm: deterministic=1 (SCALECOMM_DETERMINISTIC) promises the same bits every run; compression=auto "
         "(SCALECOMM_COMPRESSION) chooses its codec by measured time, which can differ between runs: name a codec");
  }
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
