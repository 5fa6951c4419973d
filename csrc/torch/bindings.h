// scalecomm torch adapter: the pieces of the Python module pyscalecomm._C.
//
// Contract: PYBIND11_MODULE (torch/bindings.cc) calls each bind function once.
// The module holds what users and pyscalecomm call; hooks that exist only for
// tests go on its `_testing` submodule (pyscalecomm._C._testing). A binding
// turns scalecomm's Error into ValueError with its message (valueErrors).
#pragma once

#include <torch/python.h>

#include <utility>

#include "algo/cost_model.h"
#include "core/error.h"

namespace scalecomm {

namespace py = pybind11;

void bindBackend(py::module& m);  // torch/bind_backend.cc: BackendConfig, ScalecommBackend
void bindTables(py::module& m);   // torch/bind_tables.cc: settings, sizes, algorithms, codecs, build facts
void bindDirect(py::module& m);   // torch/bind_direct.cc: pyscalecomm.allreduce's fast path
void bindModels(py::module& m);   // torch/bind_models.cc: the cost model, tuning caches, the desync verdict
void bindCodecs(py::module& m, py::module& testing);  // torch/bind_codecs.cc: codec round trips, wire bytes
void bindKernels(py::module& testing);                // torch/kernel_bindings.cc: the reduction kernels
void bindDdpHook(py::module& m);                      // torch/ddp_hook.cc: the C++ DDP comm hook

// The cost model's time terms by name (algo/cost_model.h, kModelFields).
py::dict modelDict(const CostParams& c);

// fn(), with scalecomm's Error raised as ValueError.
template <typename F>
auto valueErrors(F&& fn) -> decltype(fn()) {
  try {
    return std::forward<F>(fn)();
  } catch (const Error& e) {
    throw py::value_error(e.what());
  }
}

}  // namespace scalecomm
