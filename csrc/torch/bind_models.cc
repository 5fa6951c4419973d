#include <map>
#include <string>

#include "algo/cost_model.h"
#include "algo/registry.h"
#include "group/flight_recorder.h"
#include "select/model_fit.h"
#include "select/tuner.h"
#include "torch/bindings.h"

namespace scalecomm {

py::dict modelDict(const CostParams& c) {
  py::dict d;
  for (const auto& [name, member] : kModelFields) d[name] = c.*member;
  return d;
}

namespace {

// predict_allreduce's arguments checked, then the cost model's prediction.
double predictAllreduce(const std::string& algorithm, int world, int64_t bytes, const py::dict& model,
                        int64_t segmentBytes, int ranksPerHost, int psServers, int64_t windowBytes) {
  if (world < 1) throw py::value_error("world must be >= 1");
  if (ranksPerHost < 0) throw py::value_error("ranks_per_host must be >= 0");
  if (psServers < 1 || psServers > world) throw py::value_error("ps_servers must lie in [1, world]");
  const auto* entry = findAllreduceAlgorithm(algorithm);
  if (entry == nullptr) throw py::value_error("unknown allreduce algorithm '" + algorithm + "'");
  AlgoParams serving;
  serving.windowBytes = windowBytes;
  if (!allreduceServes(algorithm, world, bytes, serving)) {
    throw py::value_error("allreduce algorithm '" + algorithm + "' does not serve " + std::to_string(world) +
                          " ranks and " + std::to_string(bytes) + " bytes");
  }
  if (!model.contains("alpha") || !model.contains("beta")) {
    throw py::value_error("the model needs at least alpha and beta (seconds, seconds per byte)");
  }
  CostParams c;
  for (const auto& [name, member] : kModelFields)
    if (model.contains(name)) c.*member = model[name].cast<double>();
  if (!model.contains("overhead")) c.overhead = c.alpha;
  c.segmentBytes = segmentBytes;
  AlgoParams a;
  a.psServers = psServers;
  a.windowBytes = windowBytes;
  if (ranksPerHost > 0) {
    for (int r = 0; r < world; ++r) a.hostOf.push_back(r / ranksPerHost);
  }
  py::gil_scoped_release noGil;
  return predictAllreduceSeconds(algorithm, world, bytes, c, a);
}

}  // namespace

void bindModels(py::module& m) {
  m.def("predict_allreduce", &predictAllreduce, py::arg("algorithm"), py::arg("world"), py::arg("bytes"),
        py::arg("model"), py::arg("segment_bytes") = 0, py::arg("ranks_per_host") = 0, py::arg("ps_servers") = 1,
        py::arg("window_bytes") = 0,
        "Predicted seconds of one allreduce (alpha-beta model of the schedule; see algo/cost_model.h). model: the "
        "cost model's terms by name (tuning_model's and cost_params' keys; alpha and beta required, overhead "
        "defaults to alpha, the rest to unset); other keys are ignored.");
  m.def(
      "auto_bucket_bytes", [](int64_t nbytes) { return OnlineTuner::bucketBytes(OnlineTuner::bucketOf(nbytes)); },
      py::arg("nbytes"),
      "The upper bound of auto's online size bucket that holds a message of nbytes (select/tuner.h).");
  m.def(
      "fit_tuning_file",
      [](const std::string& path, bool write) {
        TuningTable t = TuningTable::load(path);
        if (!t.hasCosts) {
          throw py::value_error("tuning file '" + path +
                                "' has no model line to start from (written by an older scalecomm or by hand)");
        }
        const ModelFit fit = fitTuning(t);
        if (write && !t.save(path)) throw py::value_error("cannot write the tuning file '" + path + "'");
        py::dict d = modelDict(fit.params);
        d["median_error_before"] = fit.medianErrorBefore;
        d["median_error_after"] = fit.medianErrorAfter;
        d["samples"] = fit.samples;
        return d;
      },
      py::arg("path"), py::arg("write") = false,
      "Re-fits the cost model of a tuning cache to the times its online measurements recorded (select/model_fit.h): "
      "the fitted parameters, the samples' median relative error before and after, and their count; write=True "
      "stores the fit as the cache's model (the next group loads it).");
  m.def(
      "tuning_model",
      [](const std::string& path) {
        const TuningTable t = TuningTable::load(path);
        py::dict d = modelDict(t.costs);
        d["has_model"] = t.hasCosts;
        d["world"] = t.world;
        d["window_bytes"] = t.layout.windowBytes;
        d["host_of"] = t.layout.hostOf;
        return d;
      },
      py::arg("path"), "A tuning cache's cost model (its fields by name), world size and layout.");
  m.def(
      "desync_report",
      [](int size, const std::map<int, std::string>& positions) {
        std::vector<RankPosition> all(size);
        for (int r = 0; r < size; ++r) {
          all[r].rank = r;
          auto it = positions.find(r);
          if (it != positions.end()) all[r] = RankPosition::decode(r, it->second);
        }
        return desyncReport(all);
      },
      py::arg("size"), py::arg("positions"),
      "The desync verdict from each rank's flight-recorder position (the 'position' field of its dump); ranks "
      "missing from the dict count as not answering.");
}

}  // namespace scalecomm
