#include <nvtx3/nvToolsExt.h>

#include "core/params.h"
#include "cuda/nvtx_ranges.h"

namespace scalecomm {

bool nvtxEnabled() {
  static const bool on = paramString("SCALECOMM_NVTX") == "1";
  return on;
}

uint64_t nvtxBegin(const std::string& text) {
  if (!nvtxEnabled()) return 0;
  return ::nvtxRangeStartA(text.c_str());
}

void nvtxEnd(uint64_t id) {
  if (id != 0) ::nvtxRangeEnd(static_cast<nvtxRangeId_t>(id));
}

}  // namespace scalecomm
