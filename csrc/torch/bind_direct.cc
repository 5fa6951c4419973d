// The direct API's fast path: pyscalecomm.allreduce as a C function.
//
// Contract: `_C.direct_allreduce(general, world, codes, backend_of, op_code)`
// returns a callable with pyscalecomm.allreduce's signature (the general
// function's). It serves a synchronous, uncompressed allreduce of a host array
// on a scalecomm group itself, with no Python frame, no torch dispatch and no
// Work: a writable C-contiguous buffer-protocol array (NumPy) or a contiguous
// CPU tensor in place, or with `out=` two buffer-protocol arrays of one type
// and shape, the input only read. Everything else (CUDA, CuPy, async_op,
// codecs, other backends' groups, what must be refused by name, the group's
// default codec) calls `general` with the same arguments, having done
// nothing. Under the GIL it keeps the last group it looked up as a weak
// reference and that group's backend as a weak pointer: it never keeps a
// destroyed group or backend alive, and a new group is looked up anew
// (`backend_of(pg)`: its ScalecommBackend, or None). `op`: a name found in
// `codes` (name -> ReduceOp value), else `op_code(op)` (any spelling, torch's
// ReduceOp; raises ValueError). Errors of the call itself are raised as the
// torch exceptions dist.all_reduce raises (DistBackendError, ValueError).
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <optional>
#include <string>

#include "torch/backend.h"
#include "torch/bindings.h"
#include "torch/gil.h"
#include "torch/tensor_types.h"

namespace scalecomm {

namespace {

// The element type of a buffer-protocol format ("f", "<d", "=e", "q", ...;
// native or little-endian byte order) of `itemsize` bytes, if we reduce it.
std::optional<DataType> bufferType(const char* format, Py_ssize_t itemsize) {
  if (format == nullptr) return DataType::UInt8;  // PEP 3118: unsigned bytes
  if (*format == '@' || *format == '=' || *format == '<') ++format;
  if (format[0] == '\0' || format[1] != '\0') return std::nullopt;
  switch (format[0]) {
    case 'f': return DataType::Float32;
    case 'd': return DataType::Float64;
    case 'e': return DataType::Float16;
    case 'b': return DataType::Int8;
    case 'B': return DataType::UInt8;
    case 'h': return DataType::Int16;
    case 'i':
    case 'l':
    case 'q':
      if (itemsize == 4) return DataType::Int32;
      if (itemsize == 8) return DataType::Int64;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// A buffer-protocol view of an object, released (under the GIL) when it goes;
// empty, with the Python error cleared, where the object cannot give one.
class BufferView {
 public:
  BufferView(PyObject* obj, int flags) : held_(PyObject_GetBuffer(obj, &view_, flags) == 0) {
    if (!held_) PyErr_Clear();
  }
  ~BufferView() {
    if (held_) PyBuffer_Release(&view_);
  }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  explicit operator bool() const { return held_; }
  const Py_buffer* operator->() const { return &view_; }
  // Its element type where we reduce it (and the item size is that type's).
  std::optional<DataType> type() const {
    const std::optional<DataType> t = bufferType(view_.format, view_.itemsize);
    if (t && view_.itemsize != static_cast<Py_ssize_t>(elementSize(*t))) return std::nullopt;
    return t;
  }

 private:
  Py_buffer view_{};
  bool held_;
};

// What the callable holds: strong references for the process's lifetime (the
// module that installs it lives as long), and the last group looked up.
struct DirectState {
  PyObject* general = nullptr;
  PyObject* world = nullptr;
  PyObject* codes = nullptr;
  PyObject* backendOf = nullptr;
  PyObject* opCode = nullptr;
  PyObject* defaultPg = nullptr;                                         // the interned attribute name
  PyObject* sum = nullptr;                                               // the default op, "sum"
  PyObject* lastGroup = nullptr;                                         // a weak reference, or null: nothing kept
  std::optional<c10::weak_intrusive_ptr<ScalecommBackend>> lastBackend;  // empty: not a scalecomm group
  std::string doc;
};

DirectState& state() {
  static auto* s = new DirectState();  // never destroyed: the callable may run during interpreter exit
  return *s;
}

// The object a weak reference points to (borrowed), or Py_None once it died.
PyObject* referent(PyObject* ref) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* obj = nullptr;
  if (PyWeakref_GetRef(ref, &obj) <= 0) return Py_None;
  Py_DECREF(obj);  // the weak reference's holder keeps it; compared by identity only
  return obj;
#else
  return PyWeakref_GET_OBJECT(ref);
#endif
}

// The scalecomm backend serving `pg` (a group), or null: not scalecomm's, or
// destroyed. Sets a Python error and returns false where the lookup raised.
bool backendFor(PyObject* pg, c10::intrusive_ptr<ScalecommBackend>* out) {
  DirectState& s = state();
  if (s.lastGroup == nullptr || referent(s.lastGroup) != pg) {
    PyObject* found = PyObject_CallOneArg(s.backendOf, pg);
    if (found == nullptr) return false;
    std::optional<c10::weak_intrusive_ptr<ScalecommBackend>> backend;
    if (found != Py_None) {
      backend.emplace(py::cast<c10::intrusive_ptr<ScalecommBackend>>(py::handle(found)));
    }
    Py_DECREF(found);
    Py_CLEAR(s.lastGroup);
    s.lastGroup = PyWeakref_NewRef(pg, nullptr);
    if (s.lastGroup == nullptr) PyErr_Clear();  // not weakly referable: looked up every call
    s.lastBackend = std::move(backend);
  }
  if (s.lastBackend) *out = s.lastBackend->lock();
  return true;
}

// The ReduceOp value of `op`, or nullopt with a Python error set.
std::optional<ReduceOp> opOf(PyObject* op) {
  DirectState& s = state();
  PyObject* code = PyUnicode_CheckExact(op) ? PyDict_GetItemWithError(s.codes, op) : nullptr;  // borrowed
  PyObject* owned = nullptr;
  if (code == nullptr) {
    if (PyErr_Occurred()) return std::nullopt;
    code = owned = PyObject_CallOneArg(s.opCode, op);
    if (code == nullptr) return std::nullopt;
  }
  const long v = PyLong_AsLong(code);
  Py_XDECREF(owned);
  if (v == -1 && PyErr_Occurred()) return std::nullopt;
  switch (v) {
    case static_cast<long>(ReduceOp::Sum):
    case static_cast<long>(ReduceOp::Avg):
    case static_cast<long>(ReduceOp::Min):
    case static_cast<long>(ReduceOp::Max):
    case static_cast<long>(ReduceOp::Product): return static_cast<ReduceOp>(v);
    default:
      PyErr_Format(PyExc_ValueError, "scalecomm allreduce: op code %ld is not one of the direct path's", v);
      return std::nullopt;
  }
}

// The call's arguments as the fast path reads them; `fast` is false where
// the general function must take the call (an argument it alone serves, or
// a misspelled one it alone explains).
struct Args {
  PyObject* array = nullptr;
  PyObject* op = nullptr;
  PyObject* group = Py_None;
  PyObject* out = Py_None;
  bool fast = true;
};

bool named(PyObject* key, const char* name) { return PyUnicode_CompareWithASCIIString(key, name) == 0; }

Args parse(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  Args a;
  if (nargs < 1 || nargs > 2 || (nargs == 2 && args[1] != Py_None)) {
    a.fast = false;
    return a;
  }
  a.array = args[0];
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < nkw && a.fast; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    PyObject* value = args[nargs + i];
    if (named(key, "op")) {
      a.op = value;
    } else if (named(key, "group")) {
      a.group = value;
    } else if (named(key, "out")) {
      a.out = value;
    } else if (named(key, "async_op")) {
      a.fast = value == Py_False;
    } else if (named(key, "compression")) {
      a.fast = value == Py_None && nargs == 1;
    } else {
      a.fast = named(key, "key") || named(key, "error_feedback");  // a codec's alone: no meaning without one
    }
  }
  return a;
}

// Runs the call on `backend` if the fast path serves it: true, with `served`
// set (false: nothing was done). False with a Python error set on failure.
bool tryDirect(const Args& a, ScalecommBackend& backend, ReduceOp op, bool* served) {
  *served = false;
  if (a.out == Py_None) {
    if (Py_TYPE(a.array) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) {
      const BufferView view(a.array, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
      const std::optional<DataType> dtype = view ? view.type() : std::nullopt;
      if (dtype) {
        ReleaseGilIfHeld released;
        *served = backend.allreduceHost(view->buf, view->len / view->itemsize, *dtype, op);
        return true;
      }
      if (!THPVariable_Check(a.array)) return true;  // a tensor subclass (a Parameter) goes on below
    }
    const at::Tensor& t = THPVariable_Unpack(a.array);
    if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided || !t.is_contiguous()) return true;
    const std::optional<DataType> dtype = arithmeticType(t.scalar_type());
    if (!dtype) return true;
    ReleaseGilIfHeld released;
    *served = backend.allreduceHost(t.data_ptr(), t.numel(), *dtype, op);
    return true;
  }
  const BufferView in(a.array, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
  const BufferView into(a.out, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
  if (!in || !into) return true;
  const std::optional<DataType> dtype = into.type();
  const auto* from = static_cast<const char*>(in->buf);
  auto* to = static_cast<char*>(into->buf);
  // The same type and shape, and the two either one buffer or apart.
  const bool apart = from == to || from + in->len <= to || to + into->len <= from;
  if (!dtype || in.type() != dtype || in->len != into->len || in->ndim != into->ndim ||
      !std::equal(in->shape, in->shape + in->ndim, into->shape) || !apart) {
    return true;
  }
  ReleaseGilIfHeld released;
  if (from != to) std::copy_n(from, in->len, to);  // host memory (the buffer protocol's), never a device's
  *served = backend.allreduceHost(to, into->len / into->itemsize, *dtype, op);
  return true;
}

PyObject* directAllreduce(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  DirectState& s = state();
  const Args a = parse(args, nargs, kwnames);
  if (a.fast) {
    PyObject* pg = a.group;
    PyObject* owned = nullptr;
    if (pg == Py_None) {
      pg = owned = PyObject_GetAttr(s.world, s.defaultPg);
      if (pg == nullptr) return nullptr;
    }
    c10::intrusive_ptr<ScalecommBackend> backend;
    const bool looked = pg == Py_None || backendFor(pg, &backend);
    Py_XDECREF(owned);
    if (!looked) return nullptr;
    if (backend) {
      const std::optional<ReduceOp> op = opOf(a.op != nullptr ? a.op : s.sum);
      if (!op) return nullptr;
      bool served = false;
      if (!tryDirect(a, *backend, *op, &served)) return nullptr;
      if (served) return Py_NewRef(a.out == Py_None ? a.array : a.out);
    }
  }
  return PyObject_Vectorcall(s.general, args, static_cast<size_t>(nargs), kwnames);
  END_HANDLE_TH_ERRORS
}

}  // namespace

void bindDirect(py::module& m) {
  m.attr("direct_reduce_ops") =
      py::dict(py::arg("sum") = static_cast<int>(ReduceOp::Sum), py::arg("avg") = static_cast<int>(ReduceOp::Avg),
               py::arg("min") = static_cast<int>(ReduceOp::Min), py::arg("max") = static_cast<int>(ReduceOp::Max),
               py::arg("product") = static_cast<int>(ReduceOp::Product));
  m.def(
      "direct_allreduce",
      [](const py::object& general, const py::object& world, const py::dict& codes, const py::object& backendOf,
         const py::object& opCode) {
        DirectState& s = state();
        const auto keep = [](PyObject*& slot, const py::handle& h) { Py_XSETREF(slot, Py_NewRef(h.ptr())); };
        keep(s.general, general);
        keep(s.world, world);
        keep(s.codes, codes);
        keep(s.backendOf, backendOf);
        keep(s.opCode, opCode);
        if (s.defaultPg == nullptr) s.defaultPg = PyUnicode_InternFromString("default_pg");
        if (s.sum == nullptr) s.sum = PyUnicode_InternFromString("sum");
        Py_CLEAR(s.lastGroup);
        s.lastBackend.reset();
        // The general function's signature and documentation (inspect reads
        // the first lines as the signature).
        s.doc =
            "allreduce(array, compression=None, *, op='sum', group=None, async_op=False, key=None, "
            "error_feedback=None, out=None)\n--\n\n" +
            py::cast<std::string>(general.attr("__doc__"));
        static PyMethodDef def{"allreduce",
                               reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&directAllreduce)),
                               METH_FASTCALL | METH_KEYWORDS, nullptr};
        def.ml_doc = s.doc.c_str();
        py::object module = general.attr("__module__");
        PyObject* fn = PyCFunction_NewEx(&def, nullptr, module.ptr());
        if (fn == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(fn);
      },
      py::arg("general"), py::arg("world"), py::arg("codes"), py::arg("backend_of"), py::arg("op_code"),
      "pyscalecomm.allreduce: a C function that serves a synchronous host allreduce on a scalecomm group "
      "itself and calls `general` (the Python function, same signature) for everything else.");
}

}  // namespace scalecomm
