// powersgd: no Codec of its own (two allreduces per call, compress/powersgd.h);
// the entry names it and its argument for the parser and the tables.
#include "compress/codec.h"

namespace scalecomm {

CodecEntry powersgdCodec() {
  return {"powersgd",
          CodecArg::Rank,
          true,
          nullptr,
          "low-rank approximation P Q^T of each weight's matrix, two allreduces of the factors per call",
          /*shaped=*/true};
}

}  // namespace scalecomm
