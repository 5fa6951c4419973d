#include <optional>
#include <string>

#include "algo/registry.h"
#include "comm/communicator.h"
#include "compress/auto_select.h"
#include "compress/codec.h"
#include "core/params.h"
#include "core/version.h"
#include "group/stats.h"
#include "torch/bindings.h"
#include "torch/nccl_groups.h"
#include "transport/shm.h"

namespace scalecomm {

namespace {

// The settings: their declarations and the one size parser.
void bindSettings(py::module& m) {
  m.def(
      "parse_size",
      [](const std::string& text) {
        const std::optional<int64_t> bytes = parseSize(text);
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
        for (const auto& p : allParams()) {
          py::dict d;
          d["name"] = p.name;
          d["option"] = p.option;
          d["type"] = p.integer ? "int" : "str";
          d["size"] = paramIsSize(p);  // an int in bytes that also takes "64K", "1MiB"
          d["default"] = p.defaultValue;
          d["lo"] = p.integer ? py::object(py::int_(p.lo)) : py::none();
          d["hi"] = !p.integer || p.hi == kNoLimit ? py::none()
                    : p.hi == kWorld               ? py::object(py::str("world"))
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
}

// The algorithm table and what a selection takes.
void bindAlgorithmTable(py::module& m) {
  m.def("algorithms", &selectableAlgorithms, py::arg("collective"),
        "scalecomm's own algorithms that can be named for a collective (no auto, no native ones), registry order.");
  m.def("accepted_algorithms", &acceptedAlgorithms, py::arg("collective"),
        "Every name a selection takes for a collective: auto, scalecomm's own, the native ones.");
  m.def(
      "algorithm_registry",
      [] {
        static const char* kinds[] = {"schedule", "windows", "phased", "native", "auto"};
        static const char* memories[] = {"any", "host", "device"};
        py::list out;
        for (const auto& a : algorithmRegistry()) {
          py::dict d;
          d["name"] = a.name;
          d["kind"] = kinds[static_cast<int>(a.kind)];
          d["memory"] = memories[static_cast<int>(a.memory)];
          py::list collectives;
          for (int k = 0; k <= static_cast<int>(CollectiveKind::SendRecv); ++k) {
            const auto c = static_cast<CollectiveKind>(k);
            if (a.servesCollective(c)) collectives.append(collectiveName(c));
          }
          d["collectives"] = collectives;
          d["summary"] = a.summary;
          d["max_world"] = a.maxWorld;
          d["max_bytes"] = a.maxBytes;
          d["auto"] = a.autoCandidate;
          d["hierarchical"] = a.hierarchical;
          d["rank_order"] = a.rankOrder;
          out.append(d);
        }
        return out;
      },
      "Every algorithm's registry entry (algo/registry.cc): name, kind, memory, collectives, summary, limits, "
      "rank_order (a deterministic group may run it).");
  m.def(
      "allreduce_algorithms",
      [](int world, int64_t bytes, int64_t windowBytes) {
        if (world <= 0) return std::vector<std::string>(allreduceAlgorithms());
        AlgoParams params;
        params.windowBytes = windowBytes;
        return allreduceAlgorithmsServing(world, bytes, params);
      },
      py::arg("world") = 0, py::arg("bytes") = -1, py::arg("window_bytes") = 0,
      "Allreduce algorithms of this build (registry order); with world (and bytes), those that serve such a group "
      "(and message) whose ranks share windows of window_bytes (0: ranks on several hosts, or windows off).");
}

// The codec table and the spec parser.
void bindCodecTable(py::module& m) {
  m.def(
      "codec_registry",
      [] {
        static const char* args[] = {"", "ratio", "levels", "rank"};
        py::list out;
        for (const auto& c : codecRegistry()) {
          py::dict d;
          d["name"] = c.name;
          d["arg"] = args[static_cast<int>(c.arg)];
          d["biased"] = c.biased;
          d["rounds"] = c.make != nullptr ? 1 : 2;
          CodecSpec defaults;
          defaults.entry = &c;
          d["summable"] = c.make != nullptr && c.make(defaults)->summable();
          d["shaped"] = c.shaped;
          d["summary"] = c.summary;
          out.append(d);
        }
        return out;
      },
      "Every codec's registry entry (compress/codec.cc): name, argument, biased, rounds, summable, shaped, "
      "summary.");
  m.def(
      "codec_spec",
      [](const std::string& spec) {
        return spec == "auto" ? spec : valueErrors([&] { return CodecSpec::parse(spec).str(); });
      },
      py::arg("spec"),
      "The canonical form of a compression spec (or auto: a codec chosen per tensor by measurement); ValueError "
      "naming the choices for a bad one.");
  m.def(
      "compression_takes_shapes",
      [](const std::string& spec) { return valueErrors([&] { return compressionTakesShapes(spec); }); },
      py::arg("spec"),
      "Whether a compression spec (or auto) factors each weight in its own shape, so a hook passes the "
      "weights' shapes of its tensor.");
}

// This build and this host: what it was built with, the bench's factors, shm housekeeping.
void bindBuild(py::module& m) {
  m.def("busbw_factor", &busbwFactor, py::arg("collective"), py::arg("world_size"),
        "nccl-tests' bus-bandwidth factor: allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; else 1.");
  m.def("shm_segment_bytes", &ShmSegment::bytesFor, py::arg("world_size"), py::arg("ring_bytes"),
        py::arg("window_bytes"), "The bytes one rank's shared-memory segment takes in /dev/shm.");
  m.def("host_identity", &hostIdentity,
        "This process's host identity (what decides shm vs tcp; SCALECOMM_HOSTNAME overrides it).");
  m.def("remove_stale_shm_segments", &ShmSegment::removeStaleSegments,
        "Removes /dev/shm/scalecomm-* segments left by dead processes of this PID namespace; returns how many.");
  m.attr("built_with_mpi") = mpiCompiledIn();
  m.attr("version") = kVersion;
  m.def(
      "mpi_library_version", [] { return mpiActive() ? mpiLibraryVersion() : std::string(); },
      "The MPI library's version string while MPI is initialised, else ''.");
#ifdef SCALECOMM_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.attr("built_with_nccl") = NcclGroups::available();
}

}  // namespace

void bindTables(py::module& m) {
  bindSettings(m);
  bindAlgorithmTable(m);
  bindCodecTable(m);
  bindBuild(m);
}

}  // namespace scalecomm
