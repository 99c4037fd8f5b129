//! Process-wide tuning for the libtorch steps (train, mine_hard, generate).

use std::os::unix::process::CommandExt;

/// libgomp (libtorch's OpenMP) spin-waits between parallel regions by default. On a
/// machine whose cores are busy with anything else, a spinning thread waits for a
/// peer that is not scheduled, and a small model trains 5-10x slower (measured:
/// 1.6 vs 9.7 steps/s for the tiny model on two loaded cores). Passive waiting costs
/// little on an idle machine. libgomp reads the setting once, when it is loaded, so
/// the process re-executes itself (same pid) with `OMP_WAIT_POLICY=PASSIVE`, unless
/// the user set `OMP_WAIT_POLICY` themselves.
pub fn passive_openmp() {
    if std::env::var_os("OMP_WAIT_POLICY").is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let err = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env("OMP_WAIT_POLICY", "PASSIVE")
        .exec();
    // Only reached when exec failed: train on, at default speed.
    eprintln!(
        "warning: could not restart {} with OMP_WAIT_POLICY=PASSIVE ({err}); continuing",
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
    passive_openmp();
    keep_freed_memory();
}
