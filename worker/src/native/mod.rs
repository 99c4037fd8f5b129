//! The libtorch calls tch 0.26 does not bind, through the small C++ shim in
//! `shim.cpp` (compiled by build.rs): autocast on the CPU, CUDA or MPS with a chosen
//! dtype (tch's `autocast` is CUDA's, float16 only), TF32 matmuls, gradient tensors
//! set by hand, a non-blocking copy into an existing tensor, and device events.

use std::ffi::{CStr, c_char, c_int, c_void};

use anyhow::{Result, anyhow};
use tch::{Device, Tensor};
use torch_sys::C_tensor;

mod ffi {
    use super::*;

    unsafe extern "C" {
        pub fn lv_free_error(message: *mut c_char);
        pub fn lv_autocast_enter(
            device: c_int,
            precision: c_int,
            was_enabled: *mut bool,
            was_dtype: *mut c_int,
        ) -> *mut c_char;
        pub fn lv_autocast_exit(device: c_int, was_enabled: bool, was_dtype: c_int) -> *mut c_char;
        pub fn lv_set_tf32(enabled: bool) -> *mut c_char;
        pub fn lv_set_grad(param: *mut C_tensor, grad: *const C_tensor) -> *mut c_char;
        pub fn lv_copy(dst: *mut C_tensor, src: *const C_tensor, non_blocking: bool)
        -> *mut c_char;
        pub fn lv_event_new(device: c_int, out: *mut *mut c_void) -> *mut c_char;
        pub fn lv_event_record(event: *mut c_void, device: c_int, index: c_int) -> *mut c_char;
        pub fn lv_event_synchronize(event: *mut c_void) -> *mut c_char;
        pub fn lv_event_free(event: *mut c_void);
    }
}

/// The shim's result: NULL, or a message it allocated.
fn check(error: *mut c_char, what: &str) -> Result<()> {
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: a NUL-terminated string from strdup in the shim, freed once here.
    let message = unsafe { CStr::from_ptr(error) }
        .to_string_lossy()
        .into_owned();
    unsafe { ffi::lv_free_error(error) };
    Err(anyhow!("libtorch: {what} failed: {message}"))
}

/// The shim's device codes.
fn device_code(device: Device) -> (c_int, c_int) {
    match device {
        Device::Cuda(n) => (1, n as c_int),
        Device::Mps => (2, 0),
        _ => (0, 0),
    }
}

/// The reduced precision autocast computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfKind {
    BFloat16,
    Float16,
}

/// Autocast enabled for one device while it lives, as `with torch.autocast(…)`:
/// matrix products and attention in the reduced precision, precision-sensitive ops
/// (cross-entropy, …) in fp32, by libtorch's own op lists.
pub struct Autocast {
    device: c_int,
    was_enabled: bool,
    was_dtype: c_int,
}

impl Autocast {
    pub fn enter(device: Device, kind: HalfKind) -> Result<Autocast> {
        let (code, _) = device_code(device);
        let precision = match kind {
            HalfKind::BFloat16 => 1,
            HalfKind::Float16 => 2,
        };
        let (mut was_enabled, mut was_dtype) = (false, 0);
        // SAFETY: plain values and two out-pointers to locals.
        check(
            unsafe { ffi::lv_autocast_enter(code, precision, &mut was_enabled, &mut was_dtype) },
            "entering autocast",
        )?;
        Ok(Autocast {
            device: code,
            was_enabled,
            was_dtype,
        })
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        // SAFETY: plain values; restores what `enter` read.
        let error = unsafe { ffi::lv_autocast_exit(self.device, self.was_enabled, self.was_dtype) };
        if let Err(e) = check(error, "leaving autocast") {
            eprintln!("warning: {e:#}");
        }
    }
}

/// TF32 for CUDA matrix products and cuDNN convolutions.
pub fn set_tf32(enabled: bool) -> Result<()> {
    // SAFETY: a plain value.
    check(unsafe { ffi::lv_set_tf32(enabled) }, "setting TF32")
}

/// Makes `grad` the gradient tensor of `param` (same shape, dtype and device);
/// backward then accumulates into it in place.
pub fn set_grad(param: &mut Tensor, grad: &Tensor) -> Result<()> {
    // SAFETY: both pointers are live tch tensors (at::Tensor*) for the call.
    check(
        unsafe { ffi::lv_set_grad(param.as_mut_ptr(), grad.as_ptr()) },
        "setting a gradient",
    )
}

/// `dst.copy_(src, non_blocking)`: into an existing tensor, without waiting for a
/// host-to-device copy from pinned memory to finish.
pub fn copy(dst: &mut Tensor, src: &Tensor, non_blocking: bool) -> Result<()> {
    // SAFETY: both pointers are live tch tensors for the call.
    check(
        unsafe { ffi::lv_copy(dst.as_mut_ptr(), src.as_ptr(), non_blocking) },
        "copying a tensor",
    )
}

/// A device event: recorded on the device's current stream, waited for from the host.
pub struct Event {
    raw: *mut c_void,
    device: Device,
}

// SAFETY: a c10::Event is owned by one Event and used from one thread at a time.
unsafe impl Send for Event {}

impl Event {
    pub fn new(device: Device) -> Result<Event> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local.
        check(
            unsafe { ffi::lv_event_new(device_code(device).0, &mut raw) },
            "creating an event",
        )?;
        Ok(Event { raw, device })
    }

    /// Marks the point the device's stream has reached in the work queued so far.
    pub fn record(&mut self) -> Result<()> {
        let (code, index) = device_code(self.device);
        // SAFETY: `raw` is the live event this value owns.
        check(
            unsafe { ffi::lv_event_record(self.raw, code, index) },
            "recording an event",
        )
    }

    /// Returns once the work queued before the last `record` is done.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: `raw` is the live event this value owns.
        check(
            unsafe { ffi::lv_event_synchronize(self.raw) },
            "waiting for an event",
        )
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: `raw` came from lv_event_new and is freed once.
        unsafe { ffi::lv_event_free(self.raw) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn autocast_on_the_cpu_computes_matmuls_in_bf16_and_restores_the_state() {
        let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
        assert_eq!(a.matmul(&a).kind(), Kind::Float);
        {
            let _outer = Autocast::enter(Device::Cpu, HalfKind::BFloat16).unwrap();
            assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
            {
                let _inner = Autocast::enter(Device::Cpu, HalfKind::Float16).unwrap();
                assert_eq!(a.matmul(&a).kind(), Kind::Half);
            }
            assert_eq!(
                a.matmul(&a).kind(),
                Kind::BFloat16,
                "the outer dtype is back"
            );
            // Precision-sensitive ops are computed in fp32.
            let logits = a.matmul(&a);
            let targets = Tensor::from_slice(&[0i64, 1, 2, 3]);
            let loss = logits.cross_entropy_loss::<Tensor>(
                &targets,
                None,
                tch::Reduction::Mean,
                -100,
                0.0,
            );
            assert_eq!(loss.kind(), Kind::Float);
        }
        assert_eq!(
            a.matmul(&a).kind(),
            Kind::Float,
            "off again after the guard"
        );
    }

    #[test]
    fn a_set_gradient_is_where_backward_accumulates() {
        let flat = Tensor::zeros([6], (Kind::Float, Device::Cpu));
        let mut w = Tensor::ones([2, 3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        set_grad(&mut w, &flat.view([2, 3])).unwrap();
        (&w * 2.0).sum(Kind::Float).backward();
        (&w * 3.0).sum(Kind::Float).backward();
        assert_eq!(Vec::<f32>::try_from(&flat).unwrap(), vec![5.0; 6]);
    }

    #[test]
    fn copies_into_an_existing_tensor_and_reports_errors() {
        let mut dst = Tensor::zeros([3], (Kind::Int64, Device::Cpu));
        copy(&mut dst, &Tensor::from_slice(&[1i64, 2, 3]), true).unwrap();
        assert_eq!(Vec::<i64>::try_from(&dst).unwrap(), vec![1, 2, 3]);
        let err = copy(&mut dst, &Tensor::from_slice(&[1i64, 2]), false).unwrap_err();
        assert!(err.to_string().contains("copying a tensor failed"), "{err}");
    }
}
