//! Picking the compute device: `auto` takes CUDA, then MPS, then the CPU; `cuda:N`
//! names a GPU. The worker is one process on one device.

use anyhow::{Result, anyhow};
use lavender::config::{ConfigOrigins, Device as Choice};
use tch::Device;

/// libtorch's lib/ folder this binary was linked against (set by build.rs).
const LIBTORCH_LIB: &str = env!("LAVENDER_LIBTORCH_LIB");

pub fn parse(s: &str) -> Result<Choice> {
    s.parse().map_err(|e| anyhow!("--device: {e}"))
}

/// The device a command runs on: its `--device` flag when given, else the config's
/// `device` (an error then names where it was set, `origins`).
pub fn from_flag(
    flag: Option<&str>,
    configured: Choice,
    origins: &ConfigOrigins,
) -> Result<Device> {
    match flag {
        Some(d) => {
            let choice = parse(d)?;
            select(choice, "--device").map_err(|why| anyhow!("--device {choice}: {why}"))
        }
        None => select(configured, "device:").map_err(|why| {
            crate::cli::config_error(origins, "device", format!("{configured}: {why}"))
        }),
    }
}

/// The device `choice` names on this machine, or why it cannot be used and what to
/// do (`set`: how the choice is made, `--device` or `device:`).
fn select(choice: Choice, set: &str) -> Result<Device, String> {
    match choice {
        Choice::Cpu => Ok(Device::Cpu),
        Choice::Cuda(index) => {
            if !cuda_available() {
                return Err(format!(
                    "no usable CUDA device (driver, GPU, or a CUDA build of libtorch in {LIBTORCH_LIB} is missing); use {set} auto or cpu"
                ));
            }
            let n = index.unwrap_or(0) as usize;
            let count = tch::Cuda::device_count().max(0) as usize;
            if n >= count {
                return Err(format!(
                    "this machine has {count} CUDA device(s), numbered 0..{}; pick one of them (CUDA_VISIBLE_DEVICES renumbers them)",
                    count.saturating_sub(1)
                ));
            }
            Ok(Device::Cuda(n))
        }
        Choice::Mps => {
            if tch::utils::has_mps() {
                Ok(Device::Mps)
            } else {
                Err(format!(
                    "this machine or libtorch build has no MPS; use {set} auto or cpu"
                ))
            }
        }
        Choice::Auto => Ok(if cuda_available() {
            Device::Cuda(0)
        } else if tch::utils::has_mps() {
            Device::Mps
        } else {
            Device::Cpu
        }),
    }
}

/// `cpu`, `cuda:N`, `mps`: the name events and messages give a device.
pub fn name(d: Device) -> String {
    match d {
        Device::Cpu => "cpu".into(),
        Device::Cuda(n) => format!("cuda:{n}"),
        Device::Mps => "mps".into(),
        Device::Vulkan => "vulkan".into(),
    }
}

/// The linker keeps only the libtorch libraries the binary calls into, so the CUDA
/// backend is not loaded by default. Load it on demand, and only when a driver is
/// present, so CPU machines pay nothing for the check.
fn cuda_available() -> bool {
    if !cfg!(target_os = "linux") || LIBTORCH_LIB.is_empty() {
        return tch::Cuda::is_available();
    }
    let lib = std::path::Path::new(LIBTORCH_LIB).join("libtorch_cuda.so");
    if !lib.exists() || dlopen("libcuda.so.1").is_null() {
        return false;
    }
    !dlopen(&lib.to_string_lossy()).is_null() && tch::Cuda::is_available()
}

fn dlopen(name: &str) -> *mut libc::c_void {
    let Ok(c) = std::ffi::CString::new(name) else {
        return std::ptr::null_mut();
    };
    // SAFETY: dlopen with a valid C string; the handle is kept open for the
    // process's lifetime on purpose (libtorch registers its CUDA backend on load).
    unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
}

/// The compute capability (major, minor) of CUDA device `index`, from the driver
/// (libtorch does not expose device properties); `None` off CUDA or when the driver
/// cannot say.
pub fn cuda_capability(index: usize) -> Option<(i32, i32)> {
    type Init = unsafe extern "C" fn(u32) -> i32;
    type Get = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type Attribute = unsafe extern "C" fn(*mut i32, i32, i32) -> i32;
    // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR.
    const MAJOR: i32 = 75;
    const MINOR: i32 = 76;
    let lib = dlopen("libcuda.so.1");
    if lib.is_null() {
        return None;
    }
    let sym = |name: &str| {
        let c = std::ffi::CString::new(name).ok()?;
        // SAFETY: looking a symbol up in a library handle we hold open.
        let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    // SAFETY: the driver API's documented signatures (cuda.h): cuInit(unsigned),
    // cuDeviceGet(CUdevice*, int), cuDeviceGetAttribute(int*, CUdevice_attribute, CUdevice).
    unsafe {
        let init: Init = std::mem::transmute(sym("cuInit")?);
        let get: Get = std::mem::transmute(sym("cuDeviceGet")?);
        let attribute: Attribute = std::mem::transmute(sym("cuDeviceGetAttribute")?);
        if init(0) != 0 {
            return None;
        }
        let mut device = 0;
        if get(&mut device, i32::try_from(index).ok()?) != 0 {
            return None;
        }
        let (mut major, mut minor) = (0, 0);
        if attribute(&mut major, MAJOR, device) != 0 || attribute(&mut minor, MINOR, device) != 0 {
            return None;
        }
        Some((major, minor))
    }
}
