//! The what-if judgement `check` and `status` share: patch the assumed
//! nodes' profiles, judge the same workloads as assumed and as today on the
//! same image answers (one look-up per image), label the predictions.

use super::patch::Patch;
use super::{WhatIfError, annotate, assume, memo::Memo};
use crate::check::{CheckError, Inputs, Report, ResolveOptions, check};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    #[error(transparent)]
    WhatIf(#[from] WhatIfError),
    #[error(transparent)]
    Check(#[from] CheckError),
}

/// Both judgements of the same workloads, results in the same order.
#[derive(Debug, Clone)]
pub struct Prediction {
    /// As assumed, annotated (`what_if` set, findings labelled).
    pub assumed: Report,
    /// On today's profiles.
    pub today: Report,
}

/// Judge `inputs` on the nodes `selector` matches changed by `patches`, and
/// on today's nodes. `opts.lookup` is memoised here, so the two judgements
/// see the same image answers.
pub async fn predict(
    mut inputs: Inputs,
    selector: &str,
    patches: &[Patch],
    opts: ResolveOptions,
) -> Result<Prediction, PredictError> {
    let today_profiles = inputs.profiles.clone();
    let what_if = assume(&mut inputs, selector, patches)?;
    let opts = ResolveOptions {
        lookup: Arc::new(Memo::new(opts.lookup)),
        ..opts
    };
    let mut assumed = check(&inputs, &opts).await?;
    inputs.profiles = today_profiles;
    let today = check(&inputs, &opts).await?;
    annotate(&mut assumed, &today, what_if);
    Ok(Prediction { assumed, today })
}
