// scalecomm core: the process's timeline file (Chrome trace event format).
//
// Contract: Timeline::get() returns the process-wide timeline when
// SCALECOMM_TIMELINE is set, else nullptr (then nothing is recorded). The file
// is opened on first use, its missing folders created: '{rank}' in the path
// is replaced by the rank, or '.rank<r>' is inserted before the extension.
// Events are written as they come, one complete event ("ph":"X") per line, in
// the JSON array format.
// A clean exit closes the array (the file is then strict JSON); a crashed or
// killed process leaves it open, which the trace format allows
// (chrome://tracing, ui.perfetto.dev and pyscalecomm.profile read both).
// Timestamps are microseconds of the steady clock. Thread safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace scalecomm {

class Timeline {
 public:
  // rank: used for the file name the first time (the global rank when known).
  static Timeline* get(int rank);

  // args: (key, JSON value) pairs, values already encoded (numbers or "quoted").
  void span(const std::string& name, const std::string& cat, int pid, int tid, int64_t startNs, int64_t endNs,
            const std::vector<std::pair<std::string, std::string>>& args);
  void flush();
  const std::string& path() const { return path_; }

  ~Timeline();

 private:
  explicit Timeline(std::string path);
  std::string path_;
  std::FILE* file_ = nullptr;
  bool first_ = true;  // events are separated by commas written before each one
  std::mutex mu_;
};

// Encodes a string as a JSON string literal.
std::string jsonString(const std::string& s);

// The timeline file name for a rank (see the contract above).
std::string timelinePathForRank(const std::string& pattern, int rank);

}  // namespace scalecomm
