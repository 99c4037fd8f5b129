//! Process-wide tuning for the libtorch steps (train, mine_hard, generate).

use std::os::unix::process::CommandExt;

/// How long an OpenMP thread spins for the next parallel region before it sleeps:
/// libgomp's `GOMP_SPINCOUNT`, about 0.1 ms here.
pub const SPIN_COUNT: &str = "10000";

/// libgomp (libtorch's OpenMP) waits for the next parallel region by spinning,
/// 300,000 spins (a few ms) by default and for ever with `OMP_WAIT_POLICY=ACTIVE`.
/// On a machine whose cores are busy with anything else, a spinning thread waits for
/// a peer that is not scheduled, and a small model trains 5-10x slower (measured:
/// 1.6 vs 9.7 steps/s for the tiny model on two loaded cores). Not spinning at all
/// (`PASSIVE`) makes every operation of a step end in a sleep and a wake-up, which on
/// a virtual machine costs the host's wake-up latency: the tiny model trained at 40
/// steps/s passive against 56 with a short spin, on the same idle 2-core VM. A spin
/// of [`SPIN_COUNT`] keeps both: it covers the gap between two operations of a step,
/// and under load it gives the core up within a tenth of a millisecond (with two
/// busy loops on the two cores: 16-18 steps/s, passive 15-16). libgomp reads the
/// setting once, when it is loaded, so the process re-executes itself (same pid)
/// with `GOMP_SPINCOUNT` set, unless the user set it or `OMP_WAIT_POLICY`.
pub fn short_openmp_spin() {
    if std::env::var_os("OMP_WAIT_POLICY").is_some() || std::env::var_os("GOMP_SPINCOUNT").is_some()
    {
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
        .env("GOMP_SPINCOUNT", SPIN_COUNT)
        .exec();
    // Only reached when exec failed: train on, at default speed.
    eprintln!(
        "warning: could not restart {} with GOMP_SPINCOUNT={SPIN_COUNT} ({err}); continuing",
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
