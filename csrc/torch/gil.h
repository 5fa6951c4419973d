// scalecomm torch adapter: release the GIL around blocking joins.
//
// Contract: ReleaseGilIfHeld releases the Python GIL for its lifetime if (and
// only if) the current thread holds it. The backend uses it where it blocks on
// its worker thread (shutdown): a job finishing there may need the GIL (a
// Python Future callback, the last reference to a Python-owned tensor), and
// destroy_process_group() may run with the GIL held. RAII, not copyable.
#pragma once

#include <Python.h>

namespace scalecomm {

class ReleaseGilIfHeld {
 public:
  ReleaseGilIfHeld() {
    if (Py_IsInitialized() && PyGILState_Check()) state_ = PyEval_SaveThread();
  }
  ~ReleaseGilIfHeld() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  ReleaseGilIfHeld(const ReleaseGilIfHeld&) = delete;
  ReleaseGilIfHeld& operator=(const ReleaseGilIfHeld&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

}  // namespace scalecomm
