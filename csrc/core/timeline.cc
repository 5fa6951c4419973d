#include "core/timeline.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <system_error>

#include "core/error.h"
#include "core/logging.h"
#include "core/params.h"

namespace scalecomm {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string timelinePathForRank(const std::string& pattern, int rank) {
  const std::string r = std::to_string(rank);
  const auto brace = pattern.find("{rank}");
  if (brace != std::string::npos) return pattern.substr(0, brace) + r + pattern.substr(brace + 6);
  const auto slash = pattern.find_last_of('/');
  const auto dot = pattern.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return pattern + ".rank" + r;
  return pattern.substr(0, dot) + ".rank" + r + pattern.substr(dot);
}

Timeline* Timeline::get(int rank) {
  static std::once_flag once;
  static std::unique_ptr<Timeline> instance;
  std::call_once(once, [rank] {
    const std::string pattern = paramString("SCALECOMM_TIMELINE");
    if (pattern.empty()) return;
    const char* envRank = std::getenv("RANK");
    const int r = envRank && envRank[0] ? std::atoi(envRank) : rank;
    instance.reset(new Timeline(timelinePathForRank(pattern, r)));
  });
  return instance.get();
}

Timeline::Timeline(std::string path) : path_(std::move(path)) {
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ignored;  // an unwritable folder fails the open below, which says so
  if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) {
    SC_LOG(Warn, "scalecomm: cannot write the timeline to ", path_, " (SCALECOMM_TIMELINE); no trace is recorded");
    return;
  }
  std::fputs("[", file_);
  SC_LOG(Info, "scalecomm: writing the timeline to ", path_);
}

Timeline::~Timeline() {
  if (file_ == nullptr) return;
  std::fputs("\n]\n", file_);  // a clean exit leaves a whole JSON array
  std::fclose(file_);
}

void Timeline::span(const std::string& name, const std::string& cat, int pid, int tid, int64_t startNs, int64_t endNs,
                    const std::vector<std::pair<std::string, std::string>>& args) {
  if (file_ == nullptr) return;
  std::string line = strCat("{\"name\":", jsonString(name), ",\"cat\":", jsonString(cat), ",\"ph\":\"X\",\"pid\":", pid,
                            ",\"tid\":", tid, ",\"ts\":", startNs / 1000, ".", (startNs / 100) % 10,
                            ",\"dur\":", (endNs - startNs) / 1000, ".", ((endNs - startNs) / 100) % 10, ",\"args\":{");
  for (size_t i = 0; i < args.size(); ++i) line += strCat(i ? "," : "", jsonString(args[i].first), ":", args[i].second);
  line += "}}";
  std::lock_guard<std::mutex> g(mu_);
  std::fputs(first_ ? "\n" : ",\n", file_);
  first_ = false;
  std::fputs(line.c_str(), file_);
}

void Timeline::flush() {
  std::lock_guard<std::mutex> g(mu_);
  if (file_ != nullptr) std::fflush(file_);
}

}  // namespace scalecomm
