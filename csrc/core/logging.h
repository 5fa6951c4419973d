// scalecomm core: logging.
//
// Contract: SC_LOG(level, args...) writes one line to stderr when the level is
// enabled by SCALECOMM_DEBUG (ERROR, WARN [default], INFO, DEBUG). Lines carry
// the "scalecomm" tag and, where known, the rank. Thread safe (one write(2) per line).
#pragma once

#include <string>

#include "core/error.h"

namespace scalecomm {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel logLevel();
void logLine(LogLevel level, const std::string& msg);

}  // namespace scalecomm

#define SC_LOG(level, ...)                                                                  \
  do {                                                                                      \
    if (::scalecomm::LogLevel::level <= ::scalecomm::logLevel()) {                          \
      ::scalecomm::logLine(::scalecomm::LogLevel::level, ::scalecomm::strCat(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)
