#include "select/selection.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "algo/collectives.h"
#include "algo/registry.h"
#include "core/error.h"
#include "core/files.h"

namespace scalecomm {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Every name the algorithm table accepts for `collective`.
void checkKnown(const std::string& collective, const std::string& algo) {
  const std::vector<std::string> known = acceptedAlgorithms(collective);
  if (std::find(known.begin(), known.end(), algo) != known.end()) return;
  fail(ErrorKind::InvalidArgument, "scalecomm: unknown ", collective, " algorithm '", algo, "'; choose one of ",
       joined(known), " (SCALECOMM_ALGO or Options(algorithm=...), e.g. 'allreduce:rhd,broadcast:tree')");
}

}  // namespace

std::string* AlgorithmSelection::slot(const std::string& collective) {
  if (collective == "allreduce") return &allreduce;
  if (collective == "broadcast") return &broadcast;
  if (collective == "reduce") return &reduce;
  if (collective == "allgather") return &allgather;
  if (collective == "reduce_scatter") return &reduceScatter;
  if (collective == "barrier") return &barrier;
  return nullptr;
}

AlgorithmSelection AlgorithmSelection::parse(const std::string& spec) {
  AlgorithmSelection sel;
  std::stringstream in(spec);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    entry = trim(entry);
    if (entry.empty()) continue;
    const auto colon = entry.find(':');
    const std::string collective = colon == std::string::npos ? "allreduce" : trim(entry.substr(0, colon));
    const std::string algo = colon == std::string::npos ? entry : trim(entry.substr(colon + 1));
    if (colon == std::string::npos && algo == "mpi") {
      sel.allreduce = sel.broadcast = sel.reduce = sel.allgather = sel.reduceScatter = sel.barrier = algo;
    } else if (sel.slot(collective) != nullptr) {
      checkKnown(collective, algo);
      *sel.slot(collective) = algo;
    } else {
      fail(ErrorKind::InvalidArgument, "scalecomm: cannot choose an algorithm for '", collective, "' in '", spec,
           "'; selectable collectives are allreduce, broadcast, reduce, allgather, reduce_scatter and barrier");
    }
  }
  return sel;
}

std::string AlgorithmSelection::str() const {
  return "allreduce:" + allreduce + ",broadcast:" + broadcast + ",reduce:" + reduce + ",allgather:" + allgather +
         ",reduce_scatter:" + reduceScatter + ",barrier:" + barrier;
}

void AlgorithmSelection::requireRankOrder(int rank) {
  for (const char* collective : {"allreduce", "reduce", "reduce_scatter"}) {
    std::string& chosen = *slot(collective);
    if (chosen == "auto") {
      chosen = "ordered";
      continue;
    }
    const Algorithm* a = findAlgorithm(chosen);
    if (a == nullptr || !a->rankOrder) {
      fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank, "): deterministic=1 (SCALECOMM_DETERMINISTIC), but ",
           collective, " is set to ", chosen,
           ", which does not fold the ranks' values in rank order; set it to auto "
           "or ordered",
           std::string(collective) == "allreduce" ? " (or shared, on one host)" : "", ", or turn deterministic off");
    }
  }
}

bool AlgorithmSelection::usesMpi() const {
  for (const std::string* a : {&allreduce, &broadcast, &reduce, &allgather, &reduceScatter, &barrier}) {
    if (*a == "mpi") return true;
  }
  return false;
}

TuningTable TuningTable::load(const std::string& path) {
  std::string text, why;
  if (!readSmallFile(path, kMaxTuningFileBytes, /*ownedByUs=*/false, text, why)) {
    fail(ErrorKind::InvalidArgument, "scalecomm: cannot read tuning file '", path, "'",
         why.empty() ? std::string(" (it does not exist)") : ": " + why,
         "; write one with python -m pyscalecomm.tune or unset SCALECOMM_TUNING_FILE");
  }
  return parse(text, "tuning file '" + path + "'");
}

TuningTable TuningTable::parse(const std::string& text, const std::string& what) {
  TuningTable t;
  std::stringstream in(text);
  std::string line;
  int lineNo = 0;
  bool haveAlpha = false, haveBeta = false;
  while (std::getline(in, line)) {
    ++lineNo;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::stringstream words(line);
    std::string key;
    words >> key;
    bool ok = true;
    if (key == "key") {
      t.key = trim(line.substr(3));
    } else if (key == "world") {
      ok = static_cast<bool>(words >> t.world);
    } else if (key == "alpha") {
      ok = static_cast<bool>(words >> t.costs.alpha);
      t.costs.overhead = t.costs.alpha;
      haveAlpha = ok;
    } else if (key == "beta") {
      ok = static_cast<bool>(words >> t.costs.beta);
      haveBeta = ok;
    } else if (key == "model") {
      std::string kv;
      while (ok && (words >> kv)) {
        const auto eq = kv.find('=');
        double* field = eq == std::string::npos ? nullptr : modelField(t.costs, kv.substr(0, eq));
        ok = field != nullptr;
        if (ok) *field = std::atof(kv.c_str() + eq + 1);
      }
      haveAlpha = haveBeta = ok;
    } else if (key == "layout") {
      std::string kv;
      t.hasLayout = true;
      while (ok && (words >> kv)) {
        if (kv.rfind("window=", 0) == 0) {
          t.layout.windowBytes = std::atoll(kv.c_str() + 7);
        } else if (kv.rfind("hosts=", 0) == 0) {
          std::stringstream hosts(kv.substr(6));
          std::string h;
          while (std::getline(hosts, h, ',')) t.layout.hostOf.push_back(std::atoi(h.c_str()));
        } else {
          ok = false;
        }
      }
    } else if (key == "allreduce") {
      TunerEntry e;
      ok = static_cast<bool>(words >> e.bytes >> e.algorithm) && e.bytes >= 0;
      const auto& known = allreduceAlgorithms();
      auto isKnown = [&](const std::string& a) { return std::find(known.begin(), known.end(), a) != known.end(); };
      ok = ok && isKnown(e.algorithm);
      if (ok && (words >> e.median)) {
        ok = static_cast<bool>(words >> e.lo >> e.hi) && e.lo <= e.median && e.median <= e.hi;
        std::string other;
        while (ok && (words >> other)) {
          if (other.rfind("size=", 0) == 0) {
            e.size = std::atoll(other.c_str() + 5);
            continue;
          }
          const auto eq = other.find('=');
          ok = eq != std::string::npos && isKnown(other.substr(0, eq));
          if (ok) e.measured.emplace_back(other.substr(0, eq), std::atof(other.c_str() + eq + 1));
        }
      }
      if (ok) t.allreduce.push_back(std::move(e));
    } else {
      ok = false;
    }
    if (!ok) {
      fail(ErrorKind::InvalidArgument, "scalecomm: ", what, " line ", lineNo, " is not understood: '", line,
           "'; regenerate it with python -m pyscalecomm.tune");
    }
  }
  t.hasCosts = haveAlpha && haveBeta;
  return t;
}

std::string TuningTable::str() const {
  std::ostringstream o;
  o.precision(9);
  o << "# scalecomm tuning cache: auto's measured allreduce winners per size (times: max over ranks, seconds).\n"
       "# Show it with: python -m pyscalecomm.tune --show <this file>\n";
  if (!key.empty()) o << "key " << key << "\n";
  if (world > 0) o << "world " << world << "\n";
  if (hasCosts) {
    o << "model";
    for (const auto& [name, member] : kModelFields) o << " " << name << "=" << costs.*member;
    o << "\n";
  }
  if (hasLayout) {
    o << "layout window=" << layout.windowBytes << " hosts=";
    for (size_t r = 0; r < layout.hostOf.size(); ++r) o << (r ? "," : "") << layout.hostOf[r];
    o << "\n";
  }
  for (const TunerEntry& e : allreduce) {
    o << "allreduce " << e.bytes << " " << e.algorithm;
    if (e.median > 0) {
      o << " " << e.median << " " << e.lo << " " << e.hi;
      if (e.size > 0) o << " size=" << e.size;
      for (const auto& [name, m] : e.measured) o << " " << name << "=" << m;
    }
    o << "\n";
  }
  return o.str();
}

bool TuningTable::save(const std::string& path, std::string* why) const {
  std::string reason;
  const bool ok = writeFileAtomically(path, str(), reason);
  if (why != nullptr) *why = reason;
  return ok;
}

std::string TuningTable::lookup(int64_t bytes) const {
  if (allreduce.empty()) return "";
  const double x = std::log2(static_cast<double>(std::max<int64_t>(bytes, 1)));
  const std::string* best = nullptr;
  double bestDist = 0;
  for (const TunerEntry& e : allreduce) {
    const double d = std::fabs(std::log2(static_cast<double>(std::max<int64_t>(e.bytes, 1))) - x);
    if (best == nullptr || d < bestDist) {
      best = &e.algorithm;
      bestDist = d;
    }
  }
  return *best;
}

}  // namespace scalecomm
