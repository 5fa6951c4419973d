#include "core/logging.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

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
      logLine(LogLevel::Warn, strCat("SCALECOMM_DEBUG=", v,
                                     " is not a log level (ERROR, WARN, INFO, DEBUG); "
                                     "logging at WARN"));
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
