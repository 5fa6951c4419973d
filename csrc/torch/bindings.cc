// scalecomm torch adapter: the Python module pyscalecomm._C.
//
// Contract: exposes the backend class (a subclass of torch's c10d Backend, so
// torch.distributed can hold it), its configuration, the parameter table and
// small diagnostics. Registration with torch.distributed happens in Python
// (pyscalecomm/_registration.py).
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/python.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "algo/collectives.h"
#include "algo/cost_model.h"
#include "algo/model_fit.h"
#include "algo/registry.h"
#include "comm/communicator.h"
#include "compress/codec.h"
#include "compress/compressed_allreduce.h"
#include "compress/sign_cpu.h"
#include "compress/topk_cpu.h"
#include "core/params.h"
#include "core/version.h"
#include "group/flight_recorder.h"
#include "group/stats.h"
#include "torch/backend.h"
#include "torch/nccl_groups.h"
#include "transport/shm.h"

namespace py = pybind11;

namespace scalecomm {
void bindKernels(py::module& m);  // torch/kernel_bindings.cc
}

namespace {

// The cost model's time terms by name (algo/cost_model.h, kModelFields).
py::dict modelDict(const scalecomm::CostParams& c) {
  py::dict d;
  for (const auto& [name, member] : scalecomm::kModelFields) d[name] = c.*member;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  py::module::import("torch.distributed");
  m.doc() = "scalecomm: collective communication for PyTorch (compiled core)";

  py::class_<scalecomm::GroupConfig> config(m, "BackendConfig",
                                            "Settings of one group: one attribute per declared setting "
                                            "(pyscalecomm.params()), initialised to its default.");
  config.def(py::init<>())
      .def(
          "load_environment",
          [](scalecomm::GroupConfig& c) {
            try {
              scalecomm::loadEnvironment(c);
            } catch (const scalecomm::Error& e) {
              throw py::value_error(e.what());
            }
          },
          "Overwrites every setting whose SCALECOMM_* variable is set; ValueError names a malformed one.")
      .def(
          "check",
          [](const scalecomm::GroupConfig& c, int size) {
            try {
              scalecomm::checkConfig(c, size);
            } catch (const scalecomm::Error& e) {
              throw py::value_error(e.what());
            }
          },
          py::arg("size"), "Raises ValueError naming the first setting out of range for a group of `size` ranks.")
      .def("__repr__", [](const scalecomm::GroupConfig& c) { return "BackendConfig(" + scalecomm::describe(c) + ")"; })
      .def_readwrite("group_name", &scalecomm::GroupConfig::groupName);
#define SC_BIND_FIELD(kind, field, option, env, def, lo, hi, choices, doc) \
  config.def_readwrite(option, &scalecomm::GroupConfig::field, doc);
  SCALECOMM_GROUP_PARAMS(SC_BIND_FIELD)
#undef SC_BIND_FIELD

  py::class_<scalecomm::ScalecommBackend, c10d::Backend, c10::intrusive_ptr<scalecomm::ScalecommBackend>>(
      m, "ScalecommBackend")
      .def(py::init(
               [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const scalecomm::GroupConfig& cfg) {
                 return c10::make_intrusive<scalecomm::ScalecommBackend>(store, rank, size, cfg);
               }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("config"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("poisoned", &scalecomm::ScalecommBackend::poisoned)
      .def(
          "stats",
          [](const scalecomm::ScalecommBackend& b) {
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
          [](const scalecomm::ScalecommBackend& b) {
            py::list out;
            const int n = b.getSize();
            for (const scalecomm::OpBucketStats& s : b.bucketStats()) {
              py::dict d;
              d["operation"] = s.name;
              d["bucket_bytes"] = s.bucketBytes;
              d["calls"] = s.calls;
              d["bytes"] = s.bytes;
              d["seconds"] = s.seconds;
              d["busbw_GBps"] = scalecomm::busbwGBps(s, n);
              out.append(d);
            }
            return out;
          },
          "Completed operations by name and size bucket (calls of up to bucket_bytes, a power of two): calls, "
          "bytes (outputs), seconds (on the group's thread), busbw_GBps (nccl-tests' bus bandwidth).")
      .def(
          "tuning",
          [](scalecomm::ScalecommBackend& b) {
            py::list out;
            for (const auto& r : b.group().tuning()) {
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
          },
          "auto's online allreduce choice per size bucket (messages of up to `bytes`): phase (exploring or "
          "exploiting), source (explored, cache, model), the winner with its median and interval over ranks "
          "(seconds), and every candidate's prediction, measured median, ratio interval's upper end against the "
          "model's choice and trials; the bucket's trials with their total time on this rank (trial_s) and the time "
          "its agreements took (agreement_s); paced: calls of the leader (named while exploring) that kept the "
          "explorations within SCALECOMM_AUTO_EXPLORE_PERCENT. Empty where auto is not online for this group.")
      .def(
          "set_auto_explore_percent",
          [](scalecomm::ScalecommBackend& b, int percent) {
            try {
              return b.group().setAutoExplorePercent(percent);
            } catch (const scalecomm::Error& e) {
              throw py::value_error(e.what());
            }
          },
          py::arg("percent"),
          "Sets the share of a bucket's time auto's explorations may add (SCALECOMM_AUTO_EXPLORE_PERCENT, 1..100; "
          "100: the trials back to back) from this rank's next call on, and returns the share it replaces (ValueError "
          "outside 1..100). Call it "
          "on every rank at the same point of the group's calls, like a collective: auto decides alike on every "
          "rank only then. pyscalecomm.bench.settle_auto uses it to settle a size before timing it.")
      .def_property_readonly(
          "tuning_file", [](scalecomm::ScalecommBackend& b) { return b.group().tuningPath(); },
          "The tuning cache this group loaded and writes ('' : none).")
      .def(
          "auto_candidates",
          [](scalecomm::ScalecommBackend& b, int64_t nbytes) { return b.group().autoCandidates(nbytes); },
          py::arg("nbytes"),
          "The allreduce algorithms auto weighs for a message of `nbytes` in this group (those that serve it here; "
          "hier only where a host holds several ranks): what it measures online, and what python -m pyscalecomm.tune "
          "measures by default.")
      .def_property_readonly(
          "tuning_key", [](scalecomm::ScalecommBackend& b) { return b.group().tuningKey(); },
          "What the tuning cache's measurements are for: version, world, layout, settings, machine.")
      .def(
          "counters",
          [](scalecomm::ScalecommBackend& b) {
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
          "and its cache of compiled plans (plan_hits, plan_misses, plan_evictions, plan_entries).")
      .def(
          "allreduce_compressed",
          [](scalecomm::ScalecommBackend& b, const at::Tensor& t, const std::string& spec, const std::string& key,
             int errorFeedback, bool average, int64_t timeoutMs) {
            c10::intrusive_ptr<c10d::Work> work;
            {
              py::gil_scoped_release noGil;
              work = b.allreduceCompressed(t, spec, key, errorFeedback, average, std::chrono::milliseconds(timeoutMs));
            }
            return torch::jit::toPyObject(c10::IValue(work->getFuture()));
          },
          py::arg("tensor"), py::arg("compression"), py::arg("key"), py::arg("error_feedback") = -1,
          py::arg("average") = false, py::arg("timeout_ms") = 0,
          "Queues a compressed allreduce; returns a torch.futures.Future of [tensor] (see pyscalecomm.allreduce).")
      .def(
          "compression_state",
          [](scalecomm::ScalecommBackend& b) {
            py::dict out;
            for (auto& [key, s] : b.compressionState().snapshot()) {
              py::dict d;
              d["residual"] = s.residual.defined() ? py::cast(s.residual) : py::none();
              d["q"] = s.q.defined() ? py::cast(s.q) : py::none();
              d["steps"] = s.steps;
              out[py::str(key)] = d;
            }
            return out;
          },
          "Copies of the error-feedback residuals and PowerSGD state per tensor key.")
      .def(
          "load_compression_state",
          [](scalecomm::ScalecommBackend& b, const py::dict& states) {
            std::map<std::string, scalecomm::CompressState> m;
            for (auto item : states) {
              auto d = item.second.cast<py::dict>();
              scalecomm::CompressState s;
              if (!d["residual"].is_none()) s.residual = d["residual"].cast<at::Tensor>().clone();
              if (!d["q"].is_none()) s.q = d["q"].cast<at::Tensor>().clone();
              s.steps = d["steps"].cast<uint64_t>();
              m.emplace(item.first.cast<std::string>(), s);
            }
            b.compressionState().restore(std::move(m));
          },
          "Replaces the compression state (from compression_state()).")
      .def(
          "reset_compression_state", [](scalecomm::ScalecommBackend& b) { b.compressionState().reset(); },
          "Forgets every residual (they restart at zero).")
      .def(
          "forget_compression_state",
          [](scalecomm::ScalecommBackend& b, const std::string& key) { b.compressionState().forget(key); },
          py::arg("key"), "Forgets one key's residual (it restarts at zero).")
      .def_property_readonly(
          "compression_state_id",
          [](scalecomm::ScalecommBackend& b) { return reinterpret_cast<uintptr_t>(&b.compressionState()); },
          "Identifies this backend's compression state (Python wrappers of one backend may differ).")
      .def_property_readonly("config", &scalecomm::ScalecommBackend::config)
      .def(
          "allreduce_algorithms",
          [](scalecomm::ScalecommBackend& b, int64_t nbytes) {
            return scalecomm::allreduceAlgorithmsServing(b.group().size(), nbytes, b.group().algoParams());
          },
          py::arg("nbytes"), "The allreduce algorithms that serve a message of nbytes on this group.")
      .def_property_readonly(
          "algorithms", [](scalecomm::ScalecommBackend& b) { return b.group().selection().str(); },
          "The algorithm of each collective for this group, as resolved at creation "
          "(\"allreduce:auto,...,barrier:shared\"; allreduce's auto picks per message size).")
      .def_property_readonly(
          "cost_params",
          [](const scalecomm::ScalecommBackend& b) {
            const scalecomm::CostParams& c = b.costParams();
            py::dict d = modelDict(c);
            d["segment_bytes"] = c.segmentBytes;
            return d;
          },
          "The cost model's parameters this group uses for 'auto' (probed at creation or from the tuning file).");

  m.def(
      "codec_roundtrip",
      [](const at::Tensor& x, const std::string& spec, uint64_t seed, int rank) {
        std::unique_ptr<scalecomm::Codec> codec;
        try {
          codec = scalecomm::makeCodec(scalecomm::CodecSpec::parse(spec));
        } catch (const scalecomm::Error& e) {
          throw py::value_error(e.what());
        }
        at::Tensor flat = x.reshape({-1}).to(at::kFloat).contiguous();
        at::Tensor payload = codec->encode(flat, seed, rank);
        at::Tensor out = at::zeros_like(flat);
        codec->decodeAdd(out, payload, seed);
        return py::make_tuple(out, payload, codec->wireBytes(flat.numel()), codec->summable());
      },
      py::arg("x"), py::arg("compression"), py::arg("seed") = 0, py::arg("rank") = 0,
      "One rank's codec round trip: (decoded, payload, wire bytes, summable). The parameter server encodes "
      "its pushes with it (the decoded tensor gives the error-feedback residual).");
  m.def(
      "codec_decode_add",
      [](at::Tensor& out, const at::Tensor& payload, const std::string& spec, uint64_t seed) {
        std::unique_ptr<scalecomm::Codec> codec;
        try {
          codec = scalecomm::makeCodec(scalecomm::CodecSpec::parse(spec));
        } catch (const scalecomm::Error& e) {
          throw py::value_error(e.what());
        }
        if (out.scalar_type() != at::kFloat || out.dim() != 1 || !out.is_contiguous() ||
            payload.numel() * payload.element_size() != codec->wireBytes(out.numel())) {
          throw py::value_error("codec_decode_add: a contiguous 1-D float32 out and the payload " + spec +
                                " encodes for its size (" + std::to_string(codec->wireBytes(out.numel())) + " bytes)");
        }
        codec->decodeAdd(out, payload, seed);
      },
      py::arg("out"), py::arg("payload"), py::arg("compression"), py::arg("seed") = 0,
      "out += the decoded payload (one rank's, encoded with the same compression and seed).");
  m.def(
      "codec_registry",
      [] {
        static const char* args[] = {"", "ratio", "levels", "rank"};
        py::list out;
        for (const auto& c : scalecomm::codecRegistry()) {
          py::dict d;
          d["name"] = c.name;
          d["arg"] = args[static_cast<int>(c.arg)];
          d["biased"] = c.biased;
          d["rounds"] = c.make != nullptr ? 1 : 2;
          d["fused_cpu"] = c.fusedEncode != nullptr;
          d["summary"] = c.summary;
          out.append(d);
        }
        return out;
      },
      "Every codec's registry entry (compress/codec.cc): name, argument, biased, rounds, fused CPU path, summary.");
  m.def(
      "codec_spec",
      [](const std::string& spec) {
        try {
          return scalecomm::CodecSpec::parse(spec).str();
        } catch (const scalecomm::Error& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("spec"), "The canonical form of a compression spec; ValueError naming the choices for a bad one.");
  m.def(
      "fused_encode_cpu",
      [](const at::Tensor& x, std::optional<at::Tensor> residual, const std::string& spec, uint64_t seed) {
        scalecomm::CodecSpec c;
        try {
          c = scalecomm::CodecSpec::parse(spec);
        } catch (const scalecomm::Error& e) {
          throw py::value_error(e.what());
        }
        if (c.entry->fusedEncode == nullptr || !scalecomm::topkCpuApplies(x)) {
          throw py::value_error(
              "fused_encode_cpu: a codec with a fused CPU path (topk, topk_sampled, sign), and a "
              "contiguous float32 CPU tensor");
        }
        at::Tensor r = residual ? residual->clone() : at::Tensor();
        at::Tensor* rp = residual ? &r : nullptr;
        at::Tensor payload = c.entry->fusedEncode(x, rp, c, seed);
        at::Tensor out = at::zeros_like(x);
        c.entry->fusedDecodeAdd(out, payload, c);
        return py::make_tuple(out, payload, r);
      },
      py::arg("x"), py::arg("residual"), py::arg("compression"), py::arg("seed") = 0,
      "The fused CPU codecs of compressed allreduce (top-k, sign), for tests: (decoded, payload, new residual "
      "or None).");
  m.def(
      "compressed_wire_bytes",
      [](const std::string& spec, int64_t numel) {
        try {
          return scalecomm::compressedWireBytes(scalecomm::CodecSpec::parse(spec), numel);
        } catch (const scalecomm::Error& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("compression"), py::arg("numel"),
      "Bytes one rank sends in a compressed allreduce of numel float32 elements.");
  m.def("_shutdown_all_at_exit", &scalecomm::ScalecommBackend::shutdownAllAtExit,
        "Shuts down every live scalecomm group (registered with atexit by pyscalecomm).");
  m.def(
      "parse_size",
      [](const std::string& text) {
        const std::optional<int64_t> bytes = scalecomm::parseSize(text);
        if (!bytes) {
          throw py::value_error("'" + text +
                                "' is not a size in bytes; give a whole number of bytes, optionally with K, M, G or "
                                "T (1024-based) and B or iB (4096, 64K, 1MiB)");
        }
        return *bytes;
      },
      py::arg("text"),
      "Bytes from '4096', '64K', '64KB', '64KiB', '1.5M' (1024-based): the one size parser of the settings and "
      "tools.");
  m.def(
      "params",
      [] {
        py::list out;
        for (const auto& p : scalecomm::allParams()) {
          py::dict d;
          d["name"] = p.name;
          d["option"] = p.option;
          d["type"] = p.integer ? "int" : "str";
          d["size"] = scalecomm::paramIsSize(p);  // an int in bytes that also takes "64K", "1MiB"
          d["default"] = p.defaultValue;
          d["lo"] = p.integer ? py::object(py::int_(p.lo)) : py::none();
          d["hi"] = !p.integer || p.hi == scalecomm::kNoLimit ? py::none()
                    : p.hi == scalecomm::kWorld               ? py::object(py::str("world"))
                                                              : py::object(py::int_(p.hi));
          d["choices"] = p.choices;
          d["doc"] = p.doc;
          out.append(d);
        }
        return out;
      },
      "Every declared setting (core/params.h) as a dict: name (the SCALECOMM_* variable), option (the "
      "Options/BackendConfig field; empty for a process-wide setting), type, size (bytes, parse_size's forms), "
      "default, lo, hi, choices, doc.");
  m.def(
      "predict_allreduce",
      [](const std::string& algorithm, int world, int64_t bytes, const py::dict& model, int64_t segmentBytes,
         int ranksPerHost, int psServers, int64_t windowBytes) {
        if (world < 1) throw py::value_error("world must be >= 1");
        if (ranksPerHost < 0) throw py::value_error("ranks_per_host must be >= 0");
        if (psServers < 1 || psServers > world) throw py::value_error("ps_servers must lie in [1, world]");
        const auto* entry = scalecomm::findAllreduceAlgorithm(algorithm);
        if (entry == nullptr) throw py::value_error("unknown allreduce algorithm '" + algorithm + "'");
        scalecomm::AlgoParams serving;
        serving.windowBytes = windowBytes;
        if (!scalecomm::allreduceServes(algorithm, world, bytes, serving)) {
          throw py::value_error("allreduce algorithm '" + algorithm + "' does not serve " + std::to_string(world) +
                                " ranks and " + std::to_string(bytes) + " bytes");
        }
        if (!model.contains("alpha") || !model.contains("beta")) {
          throw py::value_error("the model needs at least alpha and beta (seconds, seconds per byte)");
        }
        scalecomm::CostParams c;
        for (const auto& [name, member] : scalecomm::kModelFields)
          if (model.contains(name)) c.*member = model[name].cast<double>();
        if (!model.contains("overhead")) c.overhead = c.alpha;
        c.segmentBytes = segmentBytes;
        scalecomm::AlgoParams a;
        a.psServers = psServers;
        a.windowBytes = windowBytes;
        if (ranksPerHost > 0) {
          for (int r = 0; r < world; ++r) a.hostOf.push_back(r / ranksPerHost);
        }
        py::gil_scoped_release noGil;
        return scalecomm::predictAllreduceSeconds(algorithm, world, bytes, c, a);
      },
      py::arg("algorithm"), py::arg("world"), py::arg("bytes"), py::arg("model"), py::arg("segment_bytes") = 0,
      py::arg("ranks_per_host") = 0, py::arg("ps_servers") = 1, py::arg("window_bytes") = 0,
      "Predicted seconds of one allreduce (alpha-beta model of the schedule; see algo/cost_model.h). model: the "
      "cost model's terms by name (tuning_model's and cost_params' keys; alpha and beta required, overhead "
      "defaults to alpha, the rest to unset); other keys are ignored.");
  m.def(
      "auto_bucket_bytes",
      [](int64_t nbytes) { return scalecomm::OnlineTuner::bucketBytes(scalecomm::OnlineTuner::bucketOf(nbytes)); },
      py::arg("nbytes"), "The upper bound of auto's online size bucket that holds a message of nbytes (algo/tuner.h).");
  m.def(
      "fit_tuning_file",
      [](const std::string& path, bool write) {
        scalecomm::TuningTable t = scalecomm::TuningTable::load(path);
        if (!t.hasCosts) {
          throw py::value_error("tuning file '" + path +
                                "' has no model line to start from (written by an older scalecomm or by hand)");
        }
        const scalecomm::ModelFit fit = scalecomm::fitTuning(t);
        if (write && !t.save(path)) throw py::value_error("cannot write the tuning file '" + path + "'");
        py::dict d = modelDict(fit.params);
        d["median_error_before"] = fit.medianErrorBefore;
        d["median_error_after"] = fit.medianErrorAfter;
        d["samples"] = fit.samples;
        return d;
      },
      py::arg("path"), py::arg("write") = false,
      "Re-fits the cost model of a tuning cache to the times its online measurements recorded (algo/model_fit.h): "
      "the fitted parameters, the samples' median relative error before and after, and their count; write=True "
      "stores the fit as the cache's model (the next group loads it).");
  m.def(
      "tuning_model",
      [](const std::string& path) {
        const scalecomm::TuningTable t = scalecomm::TuningTable::load(path);
        py::dict d = modelDict(t.costs);
        d["has_model"] = t.hasCosts;
        d["world"] = t.world;
        d["window_bytes"] = t.layout.windowBytes;
        d["host_of"] = t.layout.hostOf;
        return d;
      },
      py::arg("path"), "A tuning cache's cost model (its fields by name), world size and layout.");
  m.def(
      "allreduce_algorithms",
      [](int world, int64_t bytes, int64_t windowBytes) {
        if (world <= 0) return std::vector<std::string>(scalecomm::allreduceAlgorithms());
        scalecomm::AlgoParams params;
        params.windowBytes = windowBytes;
        return scalecomm::allreduceAlgorithmsServing(world, bytes, params);
      },
      py::arg("world") = 0, py::arg("bytes") = -1, py::arg("window_bytes") = 0,
      "Allreduce algorithms of this build (registry order); with world (and bytes), those that serve such a group "
      "(and message) whose ranks share windows of window_bytes (0: ranks on several hosts, or windows off).");
  m.def(
      "desync_report",
      [](int size, const std::map<int, std::string>& positions) {
        std::vector<scalecomm::RankPosition> all(size);
        for (int r = 0; r < size; ++r) {
          all[r].rank = r;
          auto it = positions.find(r);
          if (it != positions.end()) all[r] = scalecomm::RankPosition::decode(r, it->second);
        }
        return scalecomm::desyncReport(all);
      },
      py::arg("size"), py::arg("positions"),
      "The desync verdict from each rank's flight-recorder position (the 'position' field of its dump); ranks "
      "missing from the dict count as not answering.");
  m.def("algorithms", &scalecomm::selectableAlgorithms, py::arg("collective"),
        "scalecomm's own algorithms that can be named for a collective (no auto, no native ones), registry order.");
  m.def("accepted_algorithms", &scalecomm::acceptedAlgorithms, py::arg("collective"),
        "Every name a selection takes for a collective: auto, scalecomm's own, the native ones.");
  m.def(
      "algorithm_registry",
      [] {
        static const char* kinds[] = {"schedule", "windows", "native", "auto"};
        static const char* memories[] = {"any", "host", "device"};
        py::list out;
        for (const auto& a : scalecomm::algorithmRegistry()) {
          py::dict d;
          d["name"] = a.name;
          d["kind"] = kinds[static_cast<int>(a.kind)];
          d["memory"] = memories[static_cast<int>(a.memory)];
          py::list collectives;
          for (int k = 0; k <= static_cast<int>(scalecomm::CollectiveKind::SendRecv); ++k) {
            const auto c = static_cast<scalecomm::CollectiveKind>(k);
            if (a.servesCollective(c)) collectives.append(scalecomm::collectiveName(c));
          }
          d["collectives"] = collectives;
          d["summary"] = a.summary;
          d["max_world"] = a.maxWorld;
          d["max_bytes"] = a.maxBytes;
          d["auto"] = a.autoCandidate;
          d["hierarchical"] = a.hierarchical;
          out.append(d);
        }
        return out;
      },
      "Every algorithm's registry entry (algo/registry.cc): name, kind, memory, collectives, summary, limits.");
  scalecomm::bindKernels(m);
  m.def("busbw_factor", &scalecomm::busbwFactor, py::arg("collective"), py::arg("world_size"),
        "nccl-tests' bus-bandwidth factor: allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; else 1.");
  m.def("shm_segment_bytes", &scalecomm::ShmSegment::bytesFor, py::arg("world_size"), py::arg("ring_bytes"),
        py::arg("window_bytes"), "The bytes one rank's shared-memory segment takes in /dev/shm.");
  m.def("host_identity", &scalecomm::hostIdentity,
        "This process's host identity (what decides shm vs tcp; SCALECOMM_HOSTNAME overrides it).");
  m.def("remove_stale_shm_segments", &scalecomm::ShmSegment::removeStaleSegments,
        "Removes /dev/shm/scalecomm-* segments left by dead processes of this PID namespace; returns how many.");
  m.attr("built_with_mpi") = scalecomm::mpiCompiledIn();
  m.attr("version") = scalecomm::kVersion;
  m.def(
      "mpi_library_version", [] { return scalecomm::mpiActive() ? scalecomm::mpiLibraryVersion() : std::string(); },
      "The MPI library's version string while MPI is initialised, else ''.");
#ifdef SCALECOMM_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.attr("built_with_nccl") = scalecomm::NcclGroups::available();
}
