//! How much memory image inspection may use, derived from the container's
//! memory limit: the shared byte budget every retained layer byte is reserved
//! from (in-flight layers and the layer cache together), the layer cache's
//! share of it, one inspection's share, and how many inspections stream
//! layers at once (each holds a decompressor window and a channel of
//! network batches outside the budget).

use crate::rootfs::MemoryBudget;
use std::path::Path;

/// Assumed when no limit is known (no cgroup limit, not a container): the
/// webhook's and controller's default limit.
pub const ASSUMED_LIMIT: u64 = 512 << 20;
/// Transient bytes one streaming inspection holds outside the budget: the
/// decompressor's window (at most 2^`stream::MAX_ZSTD_WINDOW_LOG`), the network channel
/// (`stream::CHANNEL_CHUNKS` batches of `stream::BATCH_BYTES`), a manifest and
/// a config being parsed. Used to size `inspections`.
const TRANSIENT_PER_INSPECTION: u64 = (1 << super::stream::MAX_ZSTD_WINDOW_LOG)
    + (super::stream::CHANNEL_CHUNKS * super::stream::BATCH_BYTES) as u64
    + super::MAX_MANIFEST_BYTES
    + (8 << 20);

/// Memory for image inspection in one process.
#[derive(Debug, Clone)]
pub struct MemoryPlan {
    /// The container limit it was derived from.
    pub limit: u64,
    /// Every retained layer byte of every inspection and cache.
    pub budget: MemoryBudget,
    /// The layer cache's share of `budget` (weighed in bytes).
    pub layer_cache_bytes: u64,
    /// One layer's, and one inspection's, share of `budget`.
    pub per_inspection_bytes: u64,
    /// Inspections streaming layers at once.
    pub inspections: usize,
    /// Request bodies (AdmissionReviews) being read and judged at once, in
    /// bytes (the webhook raises it to one largest body).
    pub request_body_bytes: u64,
}

/// What the parser child needs besides the image data and the transient
/// buffers: its own binary's data, the allocator's slack.
const PARSER_BASELINE: u64 = 64 << 20;

impl MemoryPlan {
    /// The hard data-memory limit of one parser child: one inspection's
    /// share of retained data (granted from `budget` as it grows, so the
    /// children together stay within it), its transient buffers, a baseline.
    pub fn parser_memory_bytes(&self) -> u64 {
        self.per_inspection_bytes + TRANSIENT_PER_INSPECTION + PARSER_BASELINE
    }

    /// Three eighths of the limit for retained image data (the layer cache an
    /// eighth of the limit), a quarter for the streams' transient buffers,
    /// an eighth for request bodies in flight, the rest for everything else
    /// the process keeps (watch caches, connections, answers).
    pub fn for_limit(limit: u64) -> Self {
        let limit = limit.max(64 << 20);
        let budget = limit / 8 * 3;
        let streams = (limit / 4 / TRANSIENT_PER_INSPECTION).clamp(2, 16) as usize;
        MemoryPlan {
            limit,
            budget: MemoryBudget::new(budget),
            layer_cache_bytes: limit / 8,
            per_inspection_bytes: (budget / 2).min(128 << 20),
            inspections: streams,
            request_body_bytes: limit / 8,
        }
    }

    /// From `explicit` (a flag), else this container's cgroup limit, else
    /// `ASSUMED_LIMIT`.
    pub fn detect(explicit: Option<u64>) -> Self {
        Self::for_limit(
            explicit
                .or_else(|| cgroup_memory_limit(Path::new("/sys/fs/cgroup")))
                .unwrap_or(ASSUMED_LIMIT),
        )
    }
}

impl Default for MemoryPlan {
    fn default() -> Self {
        Self::for_limit(ASSUMED_LIMIT)
    }
}

/// The memory limit of the cgroup this process runs in: cgroup v2's
/// `memory.max` or v1's `memory.limit_in_bytes` under `root`. None when
/// unlimited (`max`, or v1's page-rounded i64::MAX) or unreadable.
pub fn cgroup_memory_limit(root: &Path) -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    let raw = read("memory.max").or_else(|| read("memory/memory.limit_in_bytes"))?;
    let v: u64 = raw.trim().parse().ok()?;
    // cgroup v1 says "no limit" with a huge number.
    (v < (1 << 62)).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_for_the_webhooks_default_limit() {
        let p = MemoryPlan::for_limit(512 << 20);
        assert_eq!(p.budget.limit(), 192 << 20);
        assert_eq!(p.layer_cache_bytes, 64 << 20);
        assert_eq!(p.per_inspection_bytes, 96 << 20);
        assert_eq!(p.inspections, 4);
        assert_eq!(p.request_body_bytes, 64 << 20);
        // The parser child's hard data limit (docs/image-inspection.md).
        assert_eq!(p.parser_memory_bytes(), 192 << 20);
        // Retained data plus every stream's transient buffers stay within
        // five eighths of the limit.
        let transient = p.inspections as u64 * TRANSIENT_PER_INSPECTION;
        assert!(p.budget.limit() + transient <= (512 << 20) / 8 * 5);
        // Request bodies take another eighth: a quarter stays for the rest.
        assert!(p.budget.limit() + transient + p.request_body_bytes <= (512 << 20) / 8 * 6);
    }

    #[test]
    fn plans_scale_and_stay_sane() {
        let small = MemoryPlan::for_limit(1);
        assert_eq!(small.limit, 64 << 20);
        assert_eq!(small.inspections, 2);
        let big = MemoryPlan::for_limit(8 << 30);
        assert_eq!(big.per_inspection_bytes, 128 << 20);
        assert_eq!(big.inspections, 16);
    }

    #[test]
    fn reads_cgroup_v2_and_v1_limits() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_memory_limit(d.path()), None);
        std::fs::create_dir(d.path().join("memory")).unwrap();
        std::fs::write(
            d.path().join("memory/memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(cgroup_memory_limit(d.path()), None, "v1 unlimited");
        std::fs::write(d.path().join("memory/memory.limit_in_bytes"), "268435456\n").unwrap();
        assert_eq!(cgroup_memory_limit(d.path()), Some(256 << 20));
        std::fs::write(d.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_memory_limit(d.path()), None, "v2 unlimited");
        std::fs::write(d.path().join("memory.max"), "536870912\n").unwrap();
        assert_eq!(cgroup_memory_limit(d.path()), Some(512 << 20));
    }
}
