#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "algo/registry.h"
#include "compress/auto_select.h"
#include "compress/compressed_allreduce.h"
#include "core/params.h"
#include "group/stats.h"
#include "torch/backend.h"
#include "torch/bindings.h"
#include "torch/tensor_types.h"

namespace scalecomm {

using BackendClass = py::class_<ScalecommBackend, c10d::Backend, c10::intrusive_ptr<ScalecommBackend>>;

namespace {

// A float32 CPU tensor of the values (shape: {} flat; one -1 is inferred).
at::Tensor floatTensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(at::kFloat));
  std::copy(v.begin(), v.end(), t.data_ptr<float>());
  return shape.empty() ? t : t.view(shape);
}

std::vector<float> floatValues(const at::Tensor& t) {
  const at::Tensor c = t.reshape({-1}).to(at::kCPU, at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

void bindConfig(py::module& m) {
  py::class_<GroupConfig> config(m, "BackendConfig",
                                 "Settings of one group: one attribute per declared setting "
                                 "(pyscalecomm.params()), initialised to its default.");
  config.def(py::init<>())
      .def(
          "load_environment", [](GroupConfig& c) { valueErrors([&] { loadEnvironment(c); }); },
          "Overwrites every setting whose SCALECOMM_* variable is set; ValueError names a malformed one.")
      .def(
          "check", [](const GroupConfig& c, int size) { valueErrors([&] { checkConfig(c, size); }); }, py::arg("size"),
          "Raises ValueError naming the first setting out of range for a group of `size` ranks.")
      .def("__repr__", [](const GroupConfig& c) { return "BackendConfig(" + describe(c) + ")"; })
      .def_readwrite("group_name", &GroupConfig::groupName);
#define SC_BIND_FIELD(kind, field, option, env, def, lo, hi, choices, doc) \
  config.def_readwrite(option, &GroupConfig::field, doc);
  SCALECOMM_GROUP_PARAMS(SC_BIND_FIELD)
#undef SC_BIND_FIELD
}

// What ran: completed operations, where calls ran, the plan cache.
void defineCounters(BackendClass& cls) {
  cls.def(
         "stats",
         [](const ScalecommBackend& b) {
           py::dict out;
           for (const auto& [name, s] : b.stats()) {
             py::dict d;
             d["calls"] = s.calls;
             d["bytes"] = s.bytes;
             d["seconds"] = s.seconds;
             out[py::str(name)] = d;
           }
           return out;
         },
         "Completed operations of this group by name (e.g. 'allreduce:rhd'): calls, bytes (outputs), seconds "
         "(on the worker thread).")
      .def(
          "bucket_stats",
          [](const ScalecommBackend& b) {
            py::list out;
            const int n = b.getSize();
            for (const OpBucketStats& s : b.bucketStats()) {
              py::dict d;
              d["operation"] = s.name;
              d["bucket_bytes"] = s.bucketBytes;
              d["calls"] = s.calls;
              d["bytes"] = s.bytes;
              d["seconds"] = s.seconds;
              d["busbw_GBps"] = busbwGBps(s, n);
              out.append(d);
            }
            return out;
          },
          "Completed operations by name and size bucket (calls of up to bucket_bytes, a power of two): calls, "
          "bytes (outputs), seconds (on the group's thread), busbw_GBps (nccl-tests' bus bandwidth).")
      .def(
          "counters",
          [](ScalecommBackend& b) {
            const auto c = b.group().counters();
            py::dict d;
            d["inline_calls"] = c.inlineCalls;
            d["worker_calls"] = c.workerCalls;
            d["plan_hits"] = c.plans.hits;
            d["plan_misses"] = c.plans.misses;
            d["plan_evictions"] = c.plans.evictions;
            d["plan_entries"] = c.plans.entries;
            return d;
          },
          "Where this group's calls ran (inline_calls: on the caller's thread; worker_calls: handed to the worker) "
          "and its cache of compiled plans (plan_hits, plan_misses, plan_evictions, plan_entries).");
}

// auto's per-bucket state as Python dicts (BackendClass.tuning).
py::list tuningRows(ScalecommBackend& b) {
  py::list out;
  for (const auto& r : b.group().selector().tuning()) {
    py::dict d;
    d["bytes"] = r.bytes;
    d["phase"] = r.phase;
    d["source"] = r.source;
    d["algorithm"] = r.algorithm;
    d["median_s"] = r.median;
    d["lo_s"] = r.lo;
    d["hi_s"] = r.hi;
    d["calls"] = r.calls;
    d["explorations"] = r.explorations;
    d["drift_checks"] = r.driftChecks;
    d["drifts"] = r.drifts;
    d["trials"] = r.trials;
    d["trial_s"] = r.trialSeconds;
    d["agreement_s"] = r.agreementSeconds;
    d["paced"] = r.paced;
    d["leader"] = r.leader;
    py::list cands;
    for (const auto& c : r.candidates) {
      py::dict e;
      e["algorithm"] = c.algorithm;
      e["predicted_s"] = c.predicted;
      e["median_s"] = c.median;
      e["ratio_high"] = c.ratioHigh;
      e["trials"] = c.trials;
      e["trial_s"] = c.trialSeconds;
      cands.append(e);
    }
    d["candidates"] = cands;
    out.append(d);
  }
  return out;
}

// Which algorithm runs: auto's online choice, its cache and candidates, the model.
void defineSelection(BackendClass& cls) {
  cls.def("tuning", &tuningRows,
          "auto's online allreduce choice per size bucket (messages of up to `bytes`): phase (exploring or "
          "exploiting), source (explored, cache, model), the winner with its median and interval over ranks "
          "(seconds), and every candidate's prediction, measured median, ratio interval's upper end against the "
          "model's choice and trials; the bucket's trials with their total time on this rank (trial_s) and the time "
          "its agreements took (agreement_s); paced: calls of the leader (named while exploring) that kept the "
          "explorations within SCALECOMM_AUTO_EXPLORE_PERCENT. Empty where auto is not online for this group.")
      .def(
          "set_auto_explore_percent",
          [](ScalecommBackend& b, int percent) {
            return valueErrors([&] { return b.group().setAutoExplorePercent(percent); });
          },
          py::arg("percent"),
          "Sets the share of a bucket's time auto's explorations may add (SCALECOMM_AUTO_EXPLORE_PERCENT, 1..100; "
          "100: the trials back to back) from this rank's next call on, and returns the share it replaces (ValueError "
          "outside 1..100). Call it "
          "on every rank at the same point of the group's calls, like a collective: auto decides alike on every "
          "rank only then. pyscalecomm.bench.settle_auto uses it to settle a size before timing it.")
      .def_property_readonly(
          "tuning_file", [](ScalecommBackend& b) { return b.group().selector().tuningPath(); },
          "The tuning cache this group loaded and writes ('' : none).")
      .def(
          "auto_candidates",
          [](ScalecommBackend& b, int64_t nbytes) { return b.group().selector().autoCandidates(nbytes); },
          py::arg("nbytes"),
          "The allreduce algorithms auto weighs for a message of `nbytes` in this group (those that serve it here; "
          "hier only where a host holds several ranks): what it measures online, and what python -m pyscalecomm.tune "
          "measures by default.")
      .def_property_readonly(
          "tuning_key", [](ScalecommBackend& b) { return b.group().selector().tuningKey(); },
          "What the tuning cache's measurements are for: version, world, layout, settings, machine.")
      .def(
          "allreduce_algorithms",
          [](ScalecommBackend& b, int64_t nbytes) {
            return allreduceAlgorithmsServing(b.group().size(), nbytes, b.group().selector().layout());
          },
          py::arg("nbytes"), "The allreduce algorithms that serve a message of nbytes on this group.")
      .def_property_readonly(
          "algorithms", [](ScalecommBackend& b) { return b.group().selector().selection().str(); },
          "The algorithm of each collective for this group, as resolved at creation "
          "(\"allreduce:auto,...,barrier:shared\"; allreduce's auto picks per message size).")
      .def_property_readonly(
          "cost_params",
          [](const ScalecommBackend& b) {
            const CostParams& c = b.costParams();
            py::dict d = modelDict(c);
            d["segment_bytes"] = c.segmentBytes;
            return d;
          },
          "The cost model's parameters this group uses for 'auto' (probed at creation or from the tuning file).");
}

// Compressed allreduce and its error-feedback state.
void defineCompression(BackendClass& cls) {
  cls.def(
         "allreduce_compressed",
         [](ScalecommBackend& b, const at::Tensor& t, const std::string& spec, const std::string& key,
            int errorFeedback, bool average, int64_t timeoutMs, const std::vector<std::vector<int64_t>>& shapes,
            bool blocking) {
           c10::intrusive_ptr<c10d::Work> work;
           {
             py::gil_scoped_release noGil;
             work = b.allreduceCompressed(t, spec, key, errorFeedback, average, std::chrono::milliseconds(timeoutMs),
                                          shapes, blocking);
           }
           return torch::jit::toPyObject(c10::IValue(work->getFuture()));
         },
         py::arg("tensor"), py::arg("compression"), py::arg("key"), py::arg("error_feedback") = -1,
         py::arg("average") = false, py::arg("timeout_ms") = 0, py::arg("shapes") = std::vector<std::vector<int64_t>>{},
         py::arg("blocking") = false,
         "Queues a compressed allreduce; returns a torch.futures.Future of [tensor] (see pyscalecomm.allreduce). "
         "shapes: the weights' shapes the tensor holds, in order (PowerSGD factors each). blocking: the caller "
         "waits on the future at once (a CPU tensor's call may then run on this thread).")
      .def(
          "compression_state",
          [](ScalecommBackend& b) {
            py::dict out;
            for (auto& [key, s] : b.compressionState().snapshot()) {
              py::dict d;
              d["residual"] = s.residual.empty() ? py::none() : py::cast(floatTensor(s.residual, {}));
              d["q"] = s.warm.q.empty() ? py::none() : py::cast(floatTensor(s.warm.q, {s.warm.cols, -1}));
              d["steps"] = s.steps;
              out[py::str(key)] = d;
            }
            return out;
          },
          "Copies of the error-feedback residuals and PowerSGD state per tensor key.")
      .def(
          "compression_choices",
          [](ScalecommBackend& b) {
            const auto& names = autoCandidates();
            py::list out;
            for (const auto& [key, c] : b.compressionState().choices()) {
              py::dict d;
              d["key"] = key;
              d["elements"] = c.elements;
              d["choice"] = names[c.current];
              d["step"] = c.last.step;
              d["changes"] = c.changes;
              py::dict predicted, residual, period;
              for (size_t i = 0; i < names.size() && i < c.last.predicted.size(); ++i) {
                if (!std::isfinite(c.last.predicted[i])) continue;  // no candidate on this key
                predicted[py::str(names[i])] = c.last.predicted[i];
                if (c.last.residual[i] >= 0) residual[py::str(names[i])] = c.last.residual[i];  // where measured
                period[py::str(names[i])] = i < c.last.period.size() ? c.last.period[i] : 0.0;
              }
              d["predicted_s"] = predicted;
              d["residual_ratio"] = residual;
              d["period_s"] = period;
              d["link_alpha_s"] = c.last.linkAlpha;
              d["link_bus_gbps"] = c.last.linkBeta > 0 ? 1e-9 / c.last.linkBeta : 0.0;
              d["reason"] = c.last.reason;
              out.append(d);
            }
            return out;
          },
          "compress=auto's latest decision per tensor key (agreed by every rank): the codec, the predicted time of "
          "every candidate, their error-feedback residual ratios and step periods, the link fit, and why.")
      .def(
          "load_compression_state",
          [](ScalecommBackend& b, const py::dict& states) {
            std::map<std::string, CompressState> m;
            for (auto item : states) {
              auto d = item.second.cast<py::dict>();
              CompressState s;
              if (!d["residual"].is_none()) s.residual = floatValues(d["residual"].cast<at::Tensor>());
              if (!d["q"].is_none()) {
                const auto q = d["q"].cast<at::Tensor>();
                TORCH_CHECK_VALUE(q.dim() == 2, "load_compression_state: q must be a cols x rank matrix");
                s.warm.q = floatValues(q);
                s.warm.cols = q.size(0);
              }
              s.steps = d["steps"].cast<uint64_t>();
              m.emplace(item.first.cast<std::string>(), s);
            }
            b.compressionState().restore(std::move(m));
          },
          "Replaces the compression state (from compression_state()).")
      .def(
          "reset_compression_state", [](ScalecommBackend& b) { b.compressionState().reset(); },
          "Forgets every residual (they restart at zero).")
      .def(
          "forget_compression_state",
          [](ScalecommBackend& b, const std::string& key) { b.compressionState().forget(key); }, py::arg("key"),
          "Forgets one key's residual (it restarts at zero).")
      .def_property_readonly(
          "compression_state_id",
          [](ScalecommBackend& b) { return reinterpret_cast<uintptr_t>(&b.compressionState()); },
          "Identifies this backend's compression state (Python wrappers of one backend may differ).");
}

}  // namespace

void bindBackend(py::module& m) {
  bindConfig(m);
  BackendClass backend(m, "ScalecommBackend");
  backend
      // The rendezvous runs without the GIL; pybind registers the new instance
      // after the factory returns, which must hold it (a py::call_guard would
      // cover the registration too, racing other threads' Python objects).
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const GroupConfig& cfg) {
             py::gil_scoped_release noGil;
             return c10::make_intrusive<ScalecommBackend>(store, rank, size, cfg);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("config"))
      .def_property_readonly("poisoned", &ScalecommBackend::poisoned)
      .def_property_readonly(
          "failure",
          [](const ScalecommBackend& b) -> std::optional<std::string> {
            std::string why = b.failure();
            return why.empty() ? std::nullopt : std::optional<std::string>(why);
          },
          "Why the group failed (its first failure, or the abort's reason), or None while it works.")
      .def_property_readonly("config", &ScalecommBackend::config);
  defineCounters(backend);
  defineSelection(backend);
  defineCompression(backend);
}

}  // namespace scalecomm
