//! Process-wide tuning for the libtorch steps (train, mine_hard, generate).

use std::os::unix::process::CommandExt;

/// The short OpenMP spin of [`lavender::openmp`] for this process: libgomp reads it
/// once, when it is loaded, so the process re-executes itself (same pid) with
/// `GOMP_SPINCOUNT` set, unless the user set it or `OMP_WAIT_POLICY`.
pub fn short_openmp_spin() {
    let Some((var, value)) = lavender::openmp::short_spin() else {
        return;
    };
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let err = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env(var, value)
        .exec();
    // Only reached when exec failed: train on, at default speed.
    eprintln!(
        "warning: could not restart {} with {var}={value} ({err}); continuing",
        exe.display()
    );
}

/// glibc's allocator returns freed memory to the kernel eagerly (mmap for large
/// blocks, trimming the heap top). libtorch frees and reallocates the same large
/// activation buffers every step, so each step paid for fresh page faults: a
/// quarter of the CPU time of a small model. Keeping freed memory in the heap
/// removes that; the cost is a resident size near the peak, which training has anyway.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator parameters; called before the heavy
    // allocations start. A rejected value leaves glibc's default in place.
    unsafe {
        // 32 MiB is glibc's largest mmap threshold on 64-bit.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

/// Both of the above; call first thing in a libtorch step.
pub fn tune() {
    short_openmp_spin();
    keep_freed_memory();
}
