//! The policy reports' judging and writing, on top of the pure report
//! shapes in `crate::reports`: judge every running writer pod from the
//! caches (`judge`), find its workload (`owners`), write only what changed
//! (`write`) and classify what a failed write means (`errors`).
//!
//! May call: `cache`, `plan` (the writer inventory), `metrics`, `timing`
//! and `crate::reports`. Never `apply` or `run`.

pub mod errors;
pub mod judge;
pub mod owners;
pub mod write;
