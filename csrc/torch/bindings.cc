// scalecomm torch adapter: the Python module pyscalecomm._C.
//
// Contract: exposes the backend class (a subclass of torch's c10d Backend, so
// torch.distributed can hold it), its configuration, the declared tables
// (settings, algorithms, codecs), the cost model and small diagnostics; test
// hooks live on pyscalecomm._C._testing. Registration with torch.distributed
// happens in Python (pyscalecomm/_registration.py).
#include "torch/bindings.h"

#include "torch/backend.h"

PYBIND11_MODULE(_C, m) {
  namespace sc = scalecomm;
  py::module::import("torch.distributed");
  m.doc() = "scalecomm: collective communication for PyTorch (compiled core)";
  py::module testing = m.def_submodule("_testing", "Hooks into the compiled core for scalecomm's own tests.");
  sc::bindBackend(m);
  sc::bindTables(m);
  sc::bindDirect(m);
  sc::bindModels(m);
  sc::bindCodecs(m, testing);
  sc::bindKernels(testing);
  sc::bindDdpHook(m);
  m.def("_shutdown_all_at_exit", &sc::ScalecommBackend::shutdownAllAtExit,
        "Shuts down every live scalecomm group (registered with atexit by pyscalecomm).");
}
