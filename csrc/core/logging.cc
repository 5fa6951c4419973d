#include "core/logging.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/params.h"

namespace scalecomm {

LogLevel logLevel() {
  static const LogLevel level = [] {
    std::string v = paramString("SCALECOMM_DEBUG");
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::toupper(c); });
    if (v == "ERROR") return LogLevel::Error;
    if (v == "INFO") return LogLevel::Info;
    if (v == "DEBUG" || v == "TRACE") return LogLevel::Debug;
    if (!v.empty() && v != "WARN" && v != "WARNING") {
      std::fprintf(stderr,
                   "[scalecomm WARN pid %d] SCALECOMM_DEBUG=%s is not a log level (ERROR, WARN, INFO, DEBUG); "
                   "logging at WARN\n",
                   static_cast<int>(getpid()), v.c_str());
    }
    return LogLevel::Warn;
  }();
  return level;
}

void logLine(LogLevel level, const std::string& msg) {
  static const char* names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  std::string line = strCat("[scalecomm ", names[static_cast<int>(level)], " pid ", getpid(), "] ", msg, "\n");
  ssize_t rc = ::write(2, line.data(), line.size());
  (void)rc;
}

}  // namespace scalecomm
