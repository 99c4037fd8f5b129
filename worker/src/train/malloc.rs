//! glibc's allocator returns freed memory to the kernel eagerly (mmap for large
//! blocks, trimming the heap top). libtorch frees and reallocates the same large
//! activation buffers every step, so each step paid for fresh page faults: a
//! quarter of the CPU time of a small model. Keeping freed memory in the heap
//! removes that; the cost is a resident size near the peak, which training has anyway.

/// Tunes glibc's allocator for a training process (no-op elsewhere).
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
