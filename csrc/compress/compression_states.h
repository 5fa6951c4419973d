// scalecomm compress: a group's compression state (error-feedback residuals
// and PowerSGD's warm start), one slot per tensor key.
//
// Contract: slot(key) returns the key's slot, made empty on first use; a
// prepared compressed call holds it, so the call finds its state without a
// lookup, and runs under the slot's own lock (one call per slot at a time).
// forget(key) drops the key's slot from the table (a call that holds it
// still runs on it; the next slot(key) is a new, empty one). snapshot()
// copies every slot that holds something (a checkpoint); restore() empties
// every slot in place, then fills the restored keys' (a call prepared
// before keeps its slot and sees the restored state); reset() empties every
// slot in place. snapshot() copies a state held on a device
// (CompressState::device) in host form.
// Thread safety: every method from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "compress/auto_select.h"
#include "compress/compressed_allreduce.h"

namespace scalecomm {

struct CompressSlot {
  std::mutex mu;
  CompressState state;
};

// What a compressed allreduce call carries (group/group.h,
// CallKind::CompressedAllreduce): its prepared site (or, for
// compress="auto", the group's chooser, which runs its candidates' sites),
// its state's slot, whether error feedback is on, PowerSGD's layout (the
// weights' shapes; empty: one near-square matrix), and whether its result
// is the average (the sum divided by the ranks: auto's none divides in its
// sum's last pass, a codec in compressedAllreduce). `body`, when set, runs
// the call in place of compressedAllreduce on the call's host floats: the
// same contract, on memory the caller owns (the torch adapter's codecs as
// torch operations on the tensor's device), over the comms the Group hands
// it (payloads in that memory), under the slot's lock; it advances
// state.steps.
struct CompressedCall {
  std::shared_ptr<const CompressedSite> site;  // null when `chooser` is set
  std::shared_ptr<AutoSelection> chooser;
  std::shared_ptr<CompressSlot> slot;
  bool errorFeedback = false;
  PowerSgdLayout layout;
  bool average = false;  // not with `body`: its caller divides its own memory
  std::function<void(CompressState& state, const CompressComms& comms)> body;
};

class CompressionStates {
 public:
  std::shared_ptr<CompressSlot> slot(const std::string& key);
  void forget(const std::string& key);
  std::map<std::string, CompressState> snapshot() const;
  // compress="auto"'s choice per key that has one (no residuals copied).
  std::map<std::string, AutoChoice> choices() const;
  void restore(std::map<std::string, CompressState> states);
  void reset();

 private:
  mutable std::mutex mu_;  // before any slot's
  std::unordered_map<std::string, std::shared_ptr<CompressSlot>> slots_;
};

}  // namespace scalecomm
