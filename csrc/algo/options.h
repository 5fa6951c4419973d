// scalecomm algo: the options of one collective call, from the group to the executor.
//
// Contract: the group fills one CollectiveOptions per call (its algorithm,
// segmenting and pacing, sequence number, timeout and deadline, and where the
// timeline and compiled plans go); the collective functions
// (algo/collectives.h) and the executor (algo/executor.h) read this same
// struct, never a copy of its fields. Value type; the pointers it holds are
// borrowed for the call.
#pragma once

#include <cstdint>
#include <string>

#include "algo/registry.h"
#include "comm/wire.h"
#include "core/deadline.h"
#include "core/label.h"

namespace scalecomm {

class ExecTrace;

// A compressed allreduce's codec as its messages carry it: the canonical
// spec ("topk:0.01"; empty: none) and its wire id (0: none), made once per
// compressed site (compress/compressed_allreduce.h). Part of the messages'
// settings, so ranks with different codecs or parameters fail naming both.
struct CodecTag {
  Label spec;
  uint32_t id = 0;
  static CodecTag of(const std::string& spec) {
    return {Label(spec), spec.empty() ? 0u : wireId(spec.data(), spec.size())};
  }
};
class PlanCache;

struct CollectiveOptions {
  AlgorithmRef algorithm;  // none: the collective's default (algo/registry.h)
  int64_t segmentBytes = 256 << 10;
  // Pacing (algo/plan.h): within a pairwise-exchange step a rank's sends run at
  // most this many bytes (rounded up to whole segments) ahead of what it has
  // received in that step; 0: unpaced.
  int64_t sendAheadBytes = 0;
  int64_t timeoutMs = 1800000;
  Deadline deadline = Deadline::never();
  uint64_t seq = 0;
  CallPart part = CallPart::Call;  // which exchange under `seq` this is (comm/wire.h)
  int psServers = 1;               // see AlgoParams; the host map comes from the Communicator
  CodecTag codec;                  // none for an uncompressed call
  ExecTrace* trace = nullptr;      // timeline: per-step spans of every execute() (see algo/trace.h)
  // Compiled plans reused across calls of the same shape (algo/plan_cache.h);
  // null: compiled for this call only. Only the executing thread touches it.
  PlanCache* plans = nullptr;
};

}  // namespace scalecomm
