// scalecomm cuda: NVTX ranges, so Nsight Systems shows scalecomm's collectives.
//
// Contract: nvtxBegin(text) opens a range named `text` (e.g.
// "scalecomm:allreduce:ring seq 12 4194304 B") and returns its id; nvtxEnd(id)
// closes it. Ranges need not nest. Active only in CUDA builds with
// SCALECOMM_NVTX=1; otherwise both are free no-ops (ids are 0). NVTX is
// header-only and costs next to nothing unless a tool (nsys) is attached.
// Thread safety: any thread.
#pragma once

#include <cstdint>
#include <string>

namespace scalecomm {

#ifdef SCALECOMM_WITH_CUDA
bool nvtxEnabled();
uint64_t nvtxBegin(const std::string& text);
void nvtxEnd(uint64_t id);
#else
inline bool nvtxEnabled() { return false; }
inline uint64_t nvtxBegin(const std::string&) { return 0; }
inline void nvtxEnd(uint64_t) {}
#endif

}  // namespace scalecomm
