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

/// What the C allocator holds, in bytes: the same figures for every
/// component, so an RSS far above `in_use` reads as memory the allocator
/// keeps, not memory the program holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapStats {
    /// Handed out to the program from the arenas.
    pub in_use: u64,
    /// Freed into the arenas and kept there for reuse (resident once
    /// touched, until trimmed).
    pub free: u64,
    /// Handed out as their own mappings (at least `MMAP_THRESHOLD` each).
    pub mapped: u64,
}

/// The allocator's figures now, summed over every arena (glibc only; it
/// walks the free lists under each arena's lock, so call it per scrape,
/// not per allocation).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap_stats() -> Option<HeapStats> {
    // SAFETY: mallinfo2 only reads the allocator's own bookkeeping.
    let info = unsafe { libc::mallinfo2() };
    Some(HeapStats {
        in_use: info.uordblks as u64,
        free: info.fordblks as u64,
        mapped: info.hblkhd as u64,
    })
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_stats() -> Option<HeapStats> {
    None
}

/// Give the arenas' free pages back to the kernel (glibc's `malloc_trim`,
/// which also releases whole free pages inside each arena, not only at its
/// top). For the end of a phase that freed much, e.g. a controller's
/// first lists: the next phase then grows from the pages it needs, not on
/// top of those a thread's arena kept. Costs a walk of the free lists.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory; live allocations stay.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `<prefix>_allocator_bytes{state="in_use|free|mapped"}` on every scrape.
#[derive(Debug)]
pub struct HeapCollector;

impl prometheus_client::collector::Collector for HeapCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::gauge::ConstGauge;
        let Some(stats) = heap_stats() else {
            return Ok(());
        };
        let gauge = ConstGauge::new(0i64);
        let mut family = encoder.encode_descriptor(
            "allocator_bytes",
            "Bytes the C allocator holds: in_use by the program, free (kept in its arenas for reuse), mapped (large allocations mapped alone)",
            None,
            gauge.metric_type(),
        )?;
        for (state, bytes) in [
            ("in_use", stats.in_use),
            ("free", stats.free),
            ("mapped", stats.mapped),
        ] {
            let labels = [("state", state)];
            let value = i64::try_from(bytes).unwrap_or(i64::MAX);
            ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
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

    #[test]
    fn heap_stats_see_an_allocation_and_its_free() {
        if !cfg!(all(target_os = "linux", target_env = "gnu")) {
            return;
        }
        let before = heap_stats().unwrap();
        // Over glibc's largest mmap threshold (32 MiB), whatever it rose to:
        // mapped alone, and unmapped on free. Slack for other threads.
        let block = vec![0u8; 64 << 20];
        let during = heap_stats().unwrap();
        assert!(
            during.mapped >= before.mapped + (48 << 20),
            "{before:?} {during:?}"
        );
        drop(block);
        let after = heap_stats().unwrap();
        assert!(
            after.mapped + (48 << 20) <= during.mapped,
            "{during:?} {after:?}"
        );
        release_free_pages();
    }

    #[test]
    fn the_collector_writes_three_states() {
        let mut registry = prometheus_client::registry::Registry::with_prefix("nfguard_test");
        registry.register_collector(Box::new(HeapCollector));
        let text = crate::runtime::admin::encode(&registry);
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            for state in ["in_use", "free", "mapped"] {
                let line = format!("nfguard_test_allocator_bytes{{state=\"{state}\"}} ");
                assert!(text.contains(&line), "{text}");
            }
            assert!(
                text.contains("# TYPE nfguard_test_allocator_bytes gauge"),
                "{text}"
            );
        }
    }
}
