//! Picking the compute device: `auto` takes CUDA, then MPS, then the CPU.

use anyhow::{Result, bail};
use lavender::config::Device as Choice;
use tch::Device;

/// libtorch's lib/ folder this binary was linked against (set by build.rs).
const LIBTORCH_LIB: &str = env!("LAVENDER_LIBTORCH_LIB");

pub fn parse(s: &str) -> Result<Choice> {
    Ok(match s {
        "auto" => Choice::Auto,
        "cpu" => Choice::Cpu,
        "cuda" => Choice::Cuda,
        "mps" => Choice::Mps,
        other => bail!("--device {other:?} is not one of auto, cpu, cuda, mps"),
    })
}

/// The device a command runs on: its `--device` flag when given, else the config's.
pub fn from_flag(flag: Option<&str>, configured: Choice) -> Result<Device> {
    select(match flag {
        Some(d) => parse(d)?,
        None => configured,
    })
}

pub fn select(choice: Choice) -> Result<Device> {
    match choice {
        Choice::Cpu => Ok(Device::Cpu),
        Choice::Cuda => {
            if cuda_available() {
                Ok(Device::Cuda(0))
            } else {
                bail!(
                    "--device cuda: no usable CUDA device (driver, GPU, or a CUDA build of libtorch in {LIBTORCH_LIB} is missing); use --device auto or cpu"
                )
            }
        }
        Choice::Mps => {
            if tch::utils::has_mps() {
                Ok(Device::Mps)
            } else {
                bail!(
                    "--device mps: this machine or libtorch build has no MPS; use --device auto or cpu"
                )
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

pub fn name(d: Device) -> &'static str {
    match d {
        Device::Cpu => "cpu",
        Device::Cuda(_) => "cuda",
        Device::Mps => "mps",
        Device::Vulkan => "vulkan",
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
    if !lib.exists() || !dlopen("libcuda.so.1") {
        return false;
    }
    dlopen(&lib.to_string_lossy()) && tch::Cuda::is_available()
}

fn dlopen(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: dlopen with a valid C string; the handle is kept open for the
    // process's lifetime on purpose (libtorch registers its CUDA backend on load).
    unsafe { !libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL).is_null() }
}
