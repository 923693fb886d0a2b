//! How the C allocator gives memory back, set once at start.
//!
//! Image inspection allocates and frees many mid-sized buffers (a hostile
//! layer's thousands of 60 KiB package files, 16-32 MiB databases) on
//! tokio's blocking threads. glibc serves allocations under its mmap
//! threshold (128 KiB, raised at run time up to 32 MiB after each large
//! free) from per-thread arenas that keep freed memory resident: 32
//! concurrent hostile admissions measured 303-429 MiB peak RSS, once 542
//! MiB (over the 512 MiB container limit), while the heap in use peaked at
//! 235 MiB (heaptrack). With a fixed 32 KiB threshold such buffers are
//! mapped alone and unmapped on free: 246-262 MiB in nine runs
//! (`webhook_load::`, docs/benchmarks.md). Smaller allocations, the hot path
//! of an admission, are untouched.

/// Allocations of at least this many bytes are mapped alone (and returned to
/// the kernel when freed).
pub const MMAP_THRESHOLD: i32 = 32 << 10;
/// An operator who sets glibc's own variable keeps it.
const OVERRIDE_VAR: &str = "MALLOC_MMAP_THRESHOLD_";

/// Fix glibc's mmap threshold at `MMAP_THRESHOLD` (which also stops it
/// from rising at run time), unless `MALLOC_MMAP_THRESHOLD_` is set. Call
/// first thing in `main`, before other threads exist. True when applied.
pub fn return_large_frees_to_the_kernel() -> bool {
    if std::env::var_os(OVERRIDE_VAR).is_some() {
        return false;
    }
    set_mmap_threshold(MMAP_THRESHOLD)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_mmap_threshold(bytes: i32) -> bool {
    // SAFETY: mallopt only changes allocator parameters; it is called before
    // the runtime starts any thread.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
}

/// Other C libraries (musl) have no per-thread arenas to tune.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_mmap_threshold(_bytes: i32) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_accepts_the_threshold() {
        // mallopt answers 1 when the value is in range (at most
        // HEAP_MAX_SIZE / 2): a typo'd constant would fail here.
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(set_mmap_threshold(MMAP_THRESHOLD));
        }
    }
}
