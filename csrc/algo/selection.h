// scalecomm algo: which algorithm each collective runs.
//
// Contract: AlgorithmSelection::parse() reads a spec such as "rhd" or
// "allreduce:rhd,broadcast:tree,reduce:chain" (what SCALECOMM_ALGO and
// Options(algorithm=...) hold). A bare name sets allreduce, except "mpi"
// (MPI's own collectives, algo/mpi_native.h), which sets every collective
// that has an mpi form; "nccl" (NCCL's own allreduce) applies to allreduce of
// CUDA tensors only. Every collective not named keeps "auto": allreduce
// then picks per call from the cost model (or the tuning table), broadcast
// and reduce between chain and tree; allgather and reduce_scatter run ring
// and barrier dissemination (their only scalecomm algorithms).
// Unknown collectives or algorithms throw Error(InvalidArgument) naming the
// entry and the choices. Value type.
//
// A TuningTable holds measured winners per message size (written by
// `python -m pyscalecomm.tune`): lines "allreduce <bytes> <algorithm>" plus
// "world <n>", "alpha <s>", "beta <s/B>"; '#' starts a comment. lookup()
// returns the winner at the nearest measured size (by log2 of bytes), or ""
// when the table is empty.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "algo/cost_model.h"

namespace scalecomm {

struct AlgorithmSelection {
  std::string allreduce = "auto";
  std::string broadcast = "auto";
  std::string reduce = "auto";
  std::string allgather = "auto";      // auto (= ring) | ring | mpi
  std::string reduceScatter = "auto";  // auto (= ring) | ring | mpi
  std::string barrier = "auto";        // auto (= dissemination) | dissemination | mpi

  // The field for `collective` ("reduce_scatter" -> reduceScatter), or nullptr.
  std::string* slot(const std::string& collective);

  static AlgorithmSelection parse(const std::string& spec);
  std::string str() const;  // canonical "allreduce:x,broadcast:y,reduce:z,..."
  bool usesMpi() const;     // some collective is set to "mpi"
};

struct TuningTable {
  int world = 0;  // 0: any
  bool hasCosts = false;
  CostParams costs;
  std::map<int64_t, std::string> allreduce;  // bytes -> measured winner

  static TuningTable load(const std::string& path);  // throws InvalidArgument on a bad file
  std::string lookup(int64_t bytes) const;
};

}  // namespace scalecomm
