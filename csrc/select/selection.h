// scalecomm select: which algorithm each collective runs.
//
// Contract: AlgorithmSelection::parse() reads a spec such as "rhd" or
// "allreduce:rhd,broadcast:tree,reduce:chain" (what SCALECOMM_ALGO and
// Options(algorithm=...) hold). A bare name sets allreduce, except "mpi"
// (MPI's own collectives, comm/mpi_collectives.h), which sets every collective
// that has an mpi form; "nccl" (NCCL's own allreduce) applies to allreduce of
// CUDA tensors only. Every collective not named keeps "auto": allreduce
// then picks per call from the cost model (or the tuning table), broadcast
// and reduce between chain and tree; allgather and reduce_scatter run ring
// and barrier dissemination (their only scalecomm algorithms).
// Unknown collectives or algorithms throw Error(InvalidArgument) naming the
// entry and the choices. Value type.
//
// A TuningTable is the text of a tuning cache (select/tuner.h; written by the
// run itself, or by `python -m pyscalecomm.tune`): lines "key <text>" (the
// machine, layout and version it was measured for; absent: any), "world
// <n>", "alpha <s>", "beta <s/B>" (or "model <field>=<value> ...": every
// CostParams field, see kModelFields), "layout window=<bytes>
// hosts=<host of rank 0>,<host of rank 1>,..." (what the model's predictions
// of this group depend on beside its parameters), and "allreduce <bytes>
// <algorithm> [<median s> <lo s> <hi s> [size=<bytes>] [<algorithm>=<median
// s> ...]]" (size: the message size measured in that bucket); '#' starts a
// comment. parse() throws Error(InvalidArgument) naming the line; str()
// writes what parse() reads. lookup() returns the winner at the nearest
// measured size (by log2 of bytes), or "" when the table is empty.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algo/cost_model.h"
#include "select/tuner.h"

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
  // A deterministic group's selection: allreduce, reduce and reduce_scatter
  // at auto become ordered; one named that does not fold in rank order
  // (Algorithm::rankOrder) throws Error(InvalidArgument) naming it and `rank`.
  void requireRankOrder(int rank);
};

// A tuning cache holds a few hundred lines; a larger file is not one.
constexpr size_t kMaxTuningFileBytes = 1 << 20;

struct TuningTable {
  std::string key;  // "" : any
  int world = 0;    // 0: any
  bool hasCosts = false;
  CostParams costs;
  bool hasLayout = false;
  AlgoParams layout;                  // hostOf and windowBytes (psServers: the default)
  std::vector<TunerEntry> allreduce;  // measured winners, by bucket

  // Reads a regular file of at most kMaxTuningFileBytes (core/files.h);
  // throws InvalidArgument on a missing, refused or bad file.
  static TuningTable load(const std::string& path);
  static TuningTable parse(const std::string& text, const std::string& what);
  std::string str() const;
  // Writes str() to `path` atomically (core/files.h: a fresh temporary file
  // renamed over it, never written through a planted file or symlink),
  // making its directory first; false where that fails (nothing is left),
  // with the reason in *why.
  bool save(const std::string& path, std::string* why = nullptr) const;
  std::string lookup(int64_t bytes) const;
};

}  // namespace scalecomm
