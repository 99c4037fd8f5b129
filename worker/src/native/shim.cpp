// The few libtorch calls tch 0.26 does not bind: autocast on any device with a
// chosen dtype (tch binds only CUDA's, as float16), TF32 matmuls, setting a
// parameter's gradient tensor, a non-blocking copy into an existing tensor, and
// device events. Every function returns NULL, or an error message the caller frees
// with lv_free_error; no C++ exception crosses into Rust.

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstdlib>
#include <cstring>
#include <exception>

namespace {

char* error_of(const std::exception& e) { return strdup(e.what()); }

// Our device codes: 0 CPU, 1 CUDA, 2 MPS.
c10::DeviceType device_type(int device) {
  switch (device) {
    case 1:
      return c10::DeviceType::CUDA;
    case 2:
      return c10::DeviceType::MPS;
    default:
      return c10::DeviceType::CPU;
  }
}

// Our precision codes: 1 bfloat16, 2 float16.
c10::ScalarType scalar_type(int precision) {
  return precision == 2 ? c10::ScalarType::Half : c10::ScalarType::BFloat16;
}

}  // namespace

#define LV_GUARD(body)                      \
  try {                                     \
    body;                                   \
    return nullptr;                         \
  } catch (const std::exception& e) {       \
    return error_of(e);                     \
  } catch (...) {                           \
    return strdup("unknown C++ exception"); \
  }

extern "C" {

void lv_free_error(char* message) { free(message); }

// As torch.autocast.__enter__: remembers the device's autocast state, enables it
// with the precision's dtype and enters one more nesting level.
char* lv_autocast_enter(int device, int precision, bool* was_enabled,
                        int* was_dtype) {
  LV_GUARD({
    auto type = device_type(device);
    *was_enabled = at::autocast::is_autocast_enabled(type);
    *was_dtype = static_cast<int>(at::autocast::get_autocast_dtype(type));
    at::autocast::set_autocast_dtype(type, scalar_type(precision));
    at::autocast::set_autocast_enabled(type, true);
    at::autocast::increment_nesting();
  })
}

// As torch.autocast.__exit__: leaving the outermost level clears the cache of
// weights cast for it; the device's earlier state comes back.
char* lv_autocast_exit(int device, bool was_enabled, int was_dtype) {
  LV_GUARD({
    auto type = device_type(device);
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(type, was_enabled);
    at::autocast::set_autocast_dtype(type, static_cast<c10::ScalarType>(was_dtype));
  })
}

char* lv_set_tf32(bool enabled) {
  LV_GUARD({
    at::globalContext().setAllowTF32CuBLAS(enabled);
    at::globalContext().setAllowTF32CuDNN(enabled);
  })
}

// Makes `grad` the gradient tensor of `param`; backward then accumulates into it in
// place (it is a view of one flat buffer for all parameters).
char* lv_set_grad(at::Tensor* param, const at::Tensor* grad) {
  LV_GUARD({ param->mutable_grad() = *grad; })
}

char* lv_copy(at::Tensor* dst, const at::Tensor* src, bool non_blocking) {
  LV_GUARD({ dst->copy_(*src, non_blocking); })
}

char* lv_event_new(int device, void** out) {
  LV_GUARD({ *out = new c10::Event(device_type(device)); })
}

// Records the event on the current stream of device `index`.
char* lv_event_record(void* event, int device, int index) {
  LV_GUARD({
    auto type = device_type(device);
    c10::impl::VirtualGuardImpl impl(type);
    auto stream = impl.getStream(c10::Device(type, static_cast<c10::DeviceIndex>(index)));
    static_cast<c10::Event*>(event)->record(stream);
  })
}

// Waits until the work recorded before the event is done (at once if never recorded).
char* lv_event_synchronize(void* event) {
  LV_GUARD({ static_cast<c10::Event*>(event)->synchronize(); })
}

void lv_event_free(void* event) { delete static_cast<c10::Event*>(event); }

}  // extern "C"
