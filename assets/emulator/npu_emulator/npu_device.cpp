// The native half of the emulated `npu` device.
//
// On torch < 2.10 (no Python PrivateUse1 backends: torch.utils.backend_registration lacks
// _setup_privateuseone_for_python_backend) torch's C++ core asks every device type for a device guard (the
// current device, streams, the device count): without one, indexing, backward() and device guards fail with
// "PyTorch is not linked with support for npu devices". This file registers a guard for PrivateUse1 there and,
// on every torch, the PrivateUse1 hooks interface, whose pinned-memory allocator (torch >= 2.3) DDP's reducer
// needs and torch's Python hooks of torch >= 2.10 cannot give. Nothing else lives here: tensors on the emulated
// device stay npu_emulator's NPUTensor wrappers, and every op on them goes through its __torch_dispatch__ and
// the one restriction table of npu_emulator._rules, on every torch.
//
// The guard answers as the Python guard of torch >= 2.10 does for a one-stream device: every op is
// synchronous, so events are no-ops and streams are the default stream. The device count is set from
// Python at install time (set_device_count), so several emulated devices can exist.
//
// Built on first use by npu_emulator._native (torch.utils.cpp_extension.load, or one compiler call without
// ninja); the module name comes from TORCH_EXTENSION_NAME, which that build defines. Plain CPython C API: no
// pybind11, so the build stays short.

#include <Python.h>

#include <atomic>
#include <mutex>
#include <unordered_set>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#define NPU_EMULATOR_TORCH_BEFORE(major, minor) \
  (TORCH_VERSION_MAJOR < (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR < (minor)))

#if NPU_EMULATOR_TORCH_BEFORE(2, 10)
#include <c10/core/impl/HermeticPyObjectTLS.h>
#endif

namespace {

std::atomic<int> g_device_count{1};
thread_local c10::DeviceIndex t_current_device = 0;

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      index >= 0 && index < g_device_count.load(),
      "Invalid device id ", static_cast<int>(index), " [emulated npu: the emulated device has ",
      g_device_count.load(), " device(s); rule source: the emulator (NPU_EMULATOR_DEVICE_COUNT)]");
}

struct EmulatedGuard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device old = getDevice();
    setDevice(device);
    return old;
  }

  c10::Device getDevice() const override { return c10::Device(kType, t_current_device); }

  void setDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kType);
    c10::DeviceIndex index = device.has_index() ? device.index() : 0;
    check_index(index);
    t_current_device = index;
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    t_current_device = device.has_index() ? device.index() : 0;
  }

  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*isHighPriority*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }

  // Ops run synchronously on the emulated device: every event has already happened.
  void record(void** /*event*/, const c10::Stream& /*stream*/, const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {}
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* /*event*/, const c10::DeviceIndex /*device_index*/) const noexcept override {}
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
};

#if NPU_EMULATOR_TORCH_BEFORE(2, 10)
// torch >= 2.10 keeps its Python device guard (npu_emulator._install); only the hooks below come from here.
C10_REGISTER_GUARD_IMPL(PrivateUse1, EmulatedGuard);
#endif

// Pinned host memory, as torch_npu's NPU hooks provide it (torch-npu 2.14.0 torch_npu/csrc/core/npu/
// NPUHooksInterface.h: getPinnedMemoryAllocator, isPinnedPtr). The emulated device is host memory, so "pinned"
// memory is ordinary host memory from torch's CPU allocation functions; the allocator remembers which blocks it
// handed out, so that isPinnedPtr (and Tensor.is_pinned()) answers for them. DDP's reducer copies its map of used
// parameters through such a block (find_unused_parameters=True, static_graph=True) and asserts that it is pinned.
// The set and its mutex are never destroyed: blocks may be freed during interpreter shutdown, after static
// destructors would have run.
std::mutex& pinned_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

std::unordered_set<const void*>& pinned_blocks() {
  static auto* blocks = new std::unordered_set<const void*>();
  return *blocks;
}

void free_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(pinned_mutex());
    pinned_blocks().erase(data);
  }
  c10::free_cpu(data);
}

bool is_pinned_block(const void* data) {
  std::lock_guard<std::mutex> lock(pinned_mutex());
  return data != nullptr && pinned_blocks().count(data) > 0;
}

#if !NPU_EMULATOR_TORCH_BEFORE(2, 3)
// torch >= 2.3's Allocator: allocate() is not const and copy_data() is pure virtual.
struct EmulatedPinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(pinned_mutex());
      pinned_blocks().insert(data);
    }
    return {data, data, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

c10::Allocator* pinned_allocator() {
  static auto* allocator = new EmulatedPinnedAllocator();
  return allocator;
}
#endif

// torch 2.1 declares only getDefaultGenerator/getDeviceFromPtr (both unused here; their defaults raise torch's
// own "register PrivateUse1HooksInterface" error); later releases derive it from AcceleratorHooksInterface,
// whose hasPrimaryContext the autograd engine and torch.accelerator ask, and whose getPinnedMemoryAllocator
// pinned host tensors (DDP's reducer) ask. Declared without `override` so that each overrides where the base
// class has it and is a plain method where it does not. From torch 2.10 on these hooks replace the Python
// backend's (torch.utils.backend_registration._DummyPrivateUse1Hook: built, available, a primary context).
struct EmulatedHooks final : public at::PrivateUse1HooksInterface {
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const { return true; }
#if !NPU_EMULATOR_TORCH_BEFORE(2, 3)
  c10::Allocator* getPinnedMemoryAllocator() const { return pinned_allocator(); }
  bool isPinnedPtr(const void* data) const { return is_pinned_block(data); }
#endif
#if !NPU_EMULATOR_TORCH_BEFORE(2, 10)
  bool isBuilt() const { return true; }
  bool isAvailable() const { return true; }
#endif
};

#if NPU_EMULATOR_TORCH_BEFORE(2, 4)
}  // namespace

// torch < 2.4 keeps the PrivateUse1 autocast state behind these functions (ATen/autocast_mode.h), and its
// torch.autocast asks the backend module to read and write it. Declared here rather than through that header,
// which pulls in all of ATen and would make the build several times longer.
namespace at::autocast {
TORCH_API bool is_privateuseone_enabled();
TORCH_API void set_privateuseone_enabled(bool enabled);
TORCH_API at::ScalarType get_autocast_privateuseone_dtype();
TORCH_API void set_autocast_privateuseone_dtype(at::ScalarType dtype);
}  // namespace at::autocast

namespace {

PyObject* autocast_enabled(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyBool_FromLong(at::autocast::is_privateuseone_enabled() ? 1 : 0);
}

PyObject* set_autocast_enabled(PyObject* /*self*/, PyObject* arg) {
  int on = PyObject_IsTrue(arg);
  if (on < 0) {
    return nullptr;
  }
  at::autocast::set_privateuseone_enabled(on != 0);
  Py_RETURN_NONE;
}

// dtypes travel as c10::ScalarType numbers (npu_emulator._native maps them to torch dtypes).
PyObject* autocast_dtype(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLong(static_cast<long>(at::autocast::get_autocast_privateuseone_dtype()));
}

PyObject* set_autocast_dtype(PyObject* /*self*/, PyObject* arg) {
  long value = PyLong_AsLong(arg);
  if (value == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  at::autocast::set_autocast_privateuseone_dtype(static_cast<at::ScalarType>(value));
  Py_RETURN_NONE;
}
#endif

PyObject* set_device_count(PyObject* /*self*/, PyObject* arg) {
  long count = PyLong_AsLong(arg);
  if (count == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  if (count < 1 || count > 64) {
    PyErr_Format(PyExc_ValueError, "device count must be between 1 and 64, not %ld", count);
    return nullptr;
  }
  g_device_count.store(static_cast<int>(count));
  Py_RETURN_NONE;
}

PyObject* device_count(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLong(g_device_count.load());
}

PyObject* is_pinned_ptr(PyObject* /*self*/, PyObject* arg) {
  void* data = PyLong_AsVoidPtr(arg);
  if (data == nullptr && PyErr_Occurred()) {
    return nullptr;
  }
  return PyBool_FromLong(is_pinned_block(data) ? 1 : 0);
}

PyObject* register_hooks(PyObject* /*self*/, PyObject* /*unused*/) {
  static EmulatedHooks* hooks = nullptr;
  if (hooks == nullptr) {
    hooks = new EmulatedHooks();
    try {
      at::RegisterPrivateUse1HooksInterface(hooks);
    } catch (const std::exception& error) {
      PyErr_SetString(PyExc_RuntimeError, error.what());
      return nullptr;
    }
  }
  Py_RETURN_NONE;
}

#if NPU_EMULATOR_TORCH_BEFORE(2, 10)
// torch < 2.3 runs every Python kernel without a Python-key tensor argument (factories such as empty, copies
// from a CPU tensor) in "hermetic" mode, where creating a tensor subclass with __torch_dispatch__ trips an
// internal assert. That mode exists for multipy/torch::deploy interpreters, which the emulator never runs
// under; npu_emulator turns it off around its own kernels only, and puts the previous state back.
PyObject* set_hermetic(PyObject* /*self*/, PyObject* arg) {
  int on = PyObject_IsTrue(arg);
  if (on < 0) {
    return nullptr;
  }
  bool previous = c10::impl::HermeticPyObjectTLS::get_state();
  c10::impl::HermeticPyObjectTLS::set_state(on != 0);
  return PyBool_FromLong(previous ? 1 : 0);
}
#endif

PyMethodDef kMethods[] = {
#if NPU_EMULATOR_TORCH_BEFORE(2, 10)
    {"set_hermetic", set_hermetic, METH_O, "Set torch's hermetic-PyObject state; returns the previous one."},
#endif
    {"set_device_count", set_device_count, METH_O, "Set how many emulated npu devices the guard reports."},
    {"device_count", device_count, METH_NOARGS, "How many emulated npu devices the guard reports."},
    {"register_hooks", register_hooks, METH_NOARGS, "Register the PrivateUse1 hooks interface (once)."},
    {"is_pinned_ptr", is_pinned_ptr, METH_O, "Whether an address starts a block of the emulated pinned allocator."},
#if NPU_EMULATOR_TORCH_BEFORE(2, 4)
    {"autocast_enabled", autocast_enabled, METH_NOARGS, "Whether npu autocast is on (torch < 2.4)."},
    {"set_autocast_enabled", set_autocast_enabled, METH_O, "Turn npu autocast on or off (torch < 2.4)."},
    {"autocast_dtype", autocast_dtype, METH_NOARGS, "The npu autocast dtype as a ScalarType number."},
    {"set_autocast_dtype", set_autocast_dtype, METH_O, "Set the npu autocast dtype (a ScalarType number)."},
#endif
    {nullptr, nullptr, 0, nullptr},
};

#define NPU_EMULATOR_STR2(x) #x
#define NPU_EMULATOR_STR(x) NPU_EMULATOR_STR2(x)
#define NPU_EMULATOR_CAT2(a, b) a##b
#define NPU_EMULATOR_CAT(a, b) NPU_EMULATOR_CAT2(a, b)

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, NPU_EMULATOR_STR(TORCH_EXTENSION_NAME),
    "Device guard and hooks of the emulated npu device (see npu_emulator._native).", -1, kMethods,
};

}  // namespace

PyMODINIT_FUNC NPU_EMULATOR_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&kModule); }
