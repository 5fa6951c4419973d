#include "core/params.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace scalecomm {

namespace {

template <typename T>
std::string text(T v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return std::to_string(static_cast<int64_t>(v));
  } else {
    return v;
  }
}

std::string rangeText(const ParamSpec& s, int size) {
  std::string hi = s.hi == kNoLimit ? ""
                   : s.hi == kWorld ? (size > 0 ? std::to_string(size) : "the group size")
                                    : std::to_string(s.hi);
  return hi.empty() ? ">= " + std::to_string(s.lo) : "in [" + std::to_string(s.lo) + ", " + hi + "]";
}

std::string label(const ParamSpec& s) {
  return s.option[0] != '\0' ? std::string(s.option) + " (" + s.name + ")" : std::string(s.name);
}

}  // namespace

const std::vector<ParamSpec>& allParams() {
#define SC_GROUP_SPEC(kind, field, option, env, def, lo, hi, choices, doc) \
  {env, option, std::is_same_v<params_detail::kind, int64_t>, text(def), lo, hi, choices, doc},
#define SC_PROCESS_SPEC(env, def, choices, doc) {env, "", false, def, 0, 0, choices, doc},
  static const std::vector<ParamSpec> table = {SCALECOMM_GROUP_PARAMS(SC_GROUP_SPEC)
                                                   SCALECOMM_PROCESS_PARAMS(SC_PROCESS_SPEC)};
#undef SC_GROUP_SPEC
#undef SC_PROCESS_SPEC
  return table;
}

const ParamSpec& paramSpec(const char* name) {
  for (const auto& p : allParams()) {
    if (std::strcmp(p.name, name) == 0) return p;
  }
  fail(ErrorKind::Internal, "scalecomm internal error: parameter ", name, " is not declared in core/params.h");
}

bool paramIsSet(const char* name) {
  paramSpec(name);
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0';
}

std::string paramString(const char* name) {
  const ParamSpec& spec = paramSpec(name);
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? std::string(v) : spec.defaultValue;
}

std::optional<int64_t> parseSize(const std::string& text) {
  size_t a = text.find_first_not_of(" \t");
  size_t b = text.find_last_not_of(" \t");
  if (a == std::string::npos) return std::nullopt;
  std::string t = text.substr(a, b - a + 1);
  size_t digits = 0;
  while (digits < t.size() && (std::isdigit(static_cast<unsigned char>(t[digits])) || t[digits] == '.')) ++digits;
  if (digits == 0) return std::nullopt;
  std::string suffix = t.substr(digits);
  double mult = 1;
  if (!suffix.empty() && std::strchr("kKmMgGtT", suffix[0]) != nullptr) {
    const int power = std::strchr("kK", suffix[0])   ? 1
                      : std::strchr("mM", suffix[0]) ? 2
                      : std::strchr("gG", suffix[0]) ? 3
                                                     : 4;
    mult = std::ldexp(1.0, 10 * power);
    suffix = suffix.substr(1);
    if (suffix == "iB" || suffix == "B" || suffix.empty()) suffix.clear();
  } else if (suffix == "B") {
    suffix.clear();
  }
  if (!suffix.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const std::string number = t.substr(0, digits);
  const double x = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || errno == ERANGE) return std::nullopt;
  const double bytes = x * mult;
  if (bytes != std::floor(bytes) || bytes >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(bytes);
}

bool paramIsSize(const ParamSpec& spec) {
  const size_t n = std::strlen(spec.name);
  return spec.integer && n > 6 && std::strcmp(spec.name + n - 6, "_BYTES") == 0;
}

int64_t parseIntParam(const ParamSpec& spec, const std::string& v) {
  if (paramIsSize(spec) && (v.empty() || v[0] != '-')) {  // -1 where a setting gives it a meaning
    const std::optional<int64_t> bytes = parseSize(v);
    if (!bytes) {
      fail(ErrorKind::InvalidArgument, "scalecomm: ", label(spec), "='", v,
           "' is not a size in bytes; give a whole number of bytes, optionally with K, M, G or T (1024-based) and "
           "B or iB (4096, 64K, 1MiB), ",
           rangeText(spec, 0), " (default ", spec.defaultValue, ").");
    }
    return *bytes;
  }
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end == v.c_str() || *end != '\0' || errno == ERANGE) {
    fail(ErrorKind::InvalidArgument, "scalecomm: ", label(spec), "='", v, "' is not a whole number; give one ",
         rangeText(spec, 0), " (default ", spec.defaultValue, ").");
  }
  return x;
}

void checkIntParam(const ParamSpec& spec, int64_t v, int size) {
  const int64_t hi = spec.hi == kWorld ? (size > 0 ? size : kNoLimit) : spec.hi;
  if (v < spec.lo || v > hi) {
    fail(ErrorKind::InvalidArgument, "scalecomm: ", label(spec), " must be ", rangeText(spec, size), ", got ", v,
         size > 0 && spec.hi == kWorld ? " (this group has " + std::to_string(size) + " ranks)" : std::string(),
         "; default ", spec.defaultValue, ".");
  }
}

void checkTextParam(const ParamSpec& spec, const std::string& v) {
  if (spec.choices[0] == '\0') return;
  std::string choices = spec.choices;
  size_t start = 0;
  while (true) {
    size_t bar = choices.find('|', start);
    if (choices.compare(start, bar == std::string::npos ? std::string::npos : bar - start, v) == 0) return;
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  for (char& c : choices) {
    if (c == '|') c = '/';
  }
  fail(ErrorKind::InvalidArgument, "scalecomm: unknown ", label(spec), " '", v, "'; choose one of ", choices, ".");
}

}  // namespace scalecomm
