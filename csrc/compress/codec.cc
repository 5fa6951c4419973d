#include "compress/codec.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace scalecomm {

namespace {

double parseNumber(const std::string& spec, const std::string& text) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  fail(ErrorKind::InvalidArgument, "scalecomm compression '", spec, "': '", text, "' is not a number");
}

}  // namespace

int64_t keptElements(int64_t n, double ratio) {
  return std::max<int64_t>(1, std::min<int64_t>(n, static_cast<int64_t>(std::llround(n * ratio))));
}

// The table: one line per file of compress/codecs/, each of which defines
// its entry function. Order is the order users see.
#define SCALECOMM_CODECS(X) \
  X(fp16Codec)              \
  X(bf16Codec)              \
  X(topkCodec)              \
  X(topkSampledCodec)       \
  X(randomkCodec)           \
  X(qsgdCodec)              \
  X(signCodec)              \
  X(powersgdCodec)

#define SCALECOMM_DECLARE_CODEC(entry) CodecEntry entry();
SCALECOMM_CODECS(SCALECOMM_DECLARE_CODEC)
#undef SCALECOMM_DECLARE_CODEC

const std::vector<CodecEntry>& codecRegistry() {
#define SCALECOMM_LIST_CODEC(entry) entry(),
  static const std::vector<CodecEntry> table = {SCALECOMM_CODECS(SCALECOMM_LIST_CODEC)};
#undef SCALECOMM_LIST_CODEC
  return table;
}

const CodecEntry* findCodec(const std::string& name) {
  for (const CodecEntry& c : codecRegistry())
    if (name == c.name) return &c;
  return nullptr;
}

namespace {

// "fp16, bf16, topk:<ratio>, ..." for error texts.
std::string codecChoices() {
  std::string out;
  for (const CodecEntry& c : codecRegistry()) {
    static const char* args[] = {"", ":<ratio>", ":<levels>", ":<rank>"};
    out += strCat(out.empty() ? "" : ", ", c.name, args[static_cast<int>(c.arg)]);
  }
  return out;
}

}  // namespace

CodecSpec CodecSpec::parse(const std::string& spec) {
  CodecSpec c;
  const auto colon = spec.find(':');
  c.name = spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  c.entry = findCodec(c.name);
  if (c.entry == nullptr) {
    fail(ErrorKind::InvalidArgument, "scalecomm: unknown compression '", spec, "'; choose ", codecChoices());
  }
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) fail(ErrorKind::InvalidArgument, "scalecomm compression '", spec, "': ", what);
  };
  // A lossy codec's strength is spelled out: a default would hide how much is dropped.
  switch (c.entry->arg) {
    case CodecArg::Ratio:
      need(!arg.empty(), strCat("give the fraction of values kept, e.g. ", c.name, ":0.01 (1 %)"));
      c.ratio = parseNumber(spec, arg);
      need(c.ratio > 0 && c.ratio <= 1, strCat("the ratio must lie in (0, 1], e.g. ", c.name, ":0.01"));
      break;
    case CodecArg::Levels:
      need(!arg.empty(), strCat("give the quantisation levels, e.g. ", c.name, ":8"));
      c.levels = static_cast<int>(parseNumber(spec, arg));
      need(c.levels >= 1 && c.levels <= 127, strCat("the levels must lie in [1, 127], e.g. ", c.name, ":8"));
      break;
    case CodecArg::Rank:
      need(!arg.empty(), strCat("give the rank of the approximation, e.g. ", c.name, ":4"));
      c.rank = static_cast<int>(parseNumber(spec, arg));
      need(c.rank >= 1 && c.rank <= 64, strCat("the rank must lie in [1, 64], e.g. ", c.name, ":4"));
      break;
    case CodecArg::None: need(arg.empty(), "takes no argument"); break;
  }
  return c;
}

std::string CodecSpec::str() const {
  std::ostringstream os;
  os << name;
  switch (entry->arg) {
    case CodecArg::Ratio: os << ":" << ratio; break;
    case CodecArg::Levels: os << ":" << levels; break;
    case CodecArg::Rank: os << ":" << rank; break;
    case CodecArg::None: break;
  }
  return os.str();
}

void Codec::decode(float* out, int64_t n, const uint8_t* payload, uint64_t seed, int64_t divisor) const {
  std::fill(out, out + n, 0.f);
  decodeAdd(out, n, payload, seed);
  if (divisor == 1) return;
  const auto d = static_cast<float>(divisor);
  for (int64_t i = 0; i < n; ++i) out[i] /= d;
}

std::unique_ptr<Codec> makeCodec(const CodecSpec& spec) {
  if (spec.entry->make == nullptr) {
    fail(ErrorKind::InvalidArgument, "scalecomm: compression '", spec.str(), "' has no single-round codec");
  }
  return spec.entry->make(spec);
}

}  // namespace scalecomm
