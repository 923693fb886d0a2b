//! `nfguard status [-o wide|json|yaml] [--kubeconfig PATH] [--context NAME]
//! [--assume-nodes SELECTOR --assume PATCH...]`. Exit 0 with the report (a
//! predicted deny too); any failure is an Err (exit 2, one line).

use super::{build_report, fetch, table};
use crate::check::cli::{AssumeArgs, LookupArgs, predict_running};
use crate::judgement::ImageLookup;
use crate::output::{Format, render_structured, terminal_safe};
use crate::runtime::client::{ClusterArgs, connect};
use anyhow::Context;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    /// The table with more columns.
    Wide,
    Json,
    Yaml,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format (default: a table).
    #[arg(short = 'o', long, env = "NFGUARD_STATUS_OUTPUT", value_enum)]
    pub output: Option<StatusFormat>,
    /// Give up on the API server after this long, as kubectl's flag: "30",
    /// "30s", "2m", "1h"; "0" waits forever.
    #[arg(long, env = "NFGUARD_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_timeout)]
    pub request_timeout: Duration,
    /// The what-if section: what runs today judged on nodes changed as
    /// assumed (`check`'s flags; docs/kubectl-plugin.md#what-if).
    #[command(flatten)]
    pub what_if: AssumeArgs,
    /// Image look-ups of the what-if (unused without `--assume`).
    #[command(flatten)]
    pub lookup: LookupArgs,
}

/// kubectl's `--request-timeout` values: seconds, or a number with s, m or h;
/// zero means no limit.
pub fn parse_timeout(raw: &str) -> Result<Duration, String> {
    let s = raw.trim();
    let (number, unit) = match s.char_indices().last() {
        Some((i, c @ ('s' | 'm' | 'h'))) => (&s[..i], c),
        _ => (s, 's'),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{raw:?} is not a duration such as 30, 30s, 2m or 1h"))?;
    let secs = match unit {
        'h' => n.saturating_mul(3600),
        'm' => n.saturating_mul(60),
        _ => n,
    };
    Ok(Duration::from_secs(secs))
}

/// The report rendered as asked.
pub fn render(
    report: &super::StatusReport,
    format: Option<StatusFormat>,
) -> anyhow::Result<String> {
    let structured = match format {
        None => return Ok(terminal_safe(table::render(report, false))),
        Some(StatusFormat::Wide) => return Ok(terminal_safe(table::render(report, true))),
        Some(StatusFormat::Json) => Format::Json,
        Some(StatusFormat::Yaml) => Format::Yaml,
    };
    render_structured(report, structured)?.context("rendering the status report")
}

/// List through `client` (already connected to `server`) and build the
/// report; `timeout` None: no limit.
pub async fn report_from(
    client: &kube::Client,
    server: &str,
    timeout: Option<Duration>,
) -> anyhow::Result<super::StatusReport> {
    let listing = async {
        let listed = fetch::list(client, server).await?;
        let reports = fetch::reports(client).await;
        Ok::<_, fetch::FetchError>((listed, reports))
    };
    let (listed, (api, reports, error)) = match timeout {
        None => listing.await?,
        Some(limit) => tokio::time::timeout(limit, listing).await.map_err(|_| {
            anyhow::anyhow!(
                "no answer from the API server {server} within {}s",
                limit.as_secs()
            )
        })??,
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut report = build_report(&listed.profiles, &listed.nodes, now);
    report.reports = super::reports::reports_status(api, &reports, error);
    Ok(report)
}

/// `report` with the what-if section `check --running` predicts for
/// `args`' assumed change (nothing read or looked up without `--assume`).
/// Bounded by the request timeout plus the look-ups' own `--timeout`.
/// `images`: a fixed image lookup (tests); None: the registry inspector.
pub async fn add_what_if(
    report: &mut super::StatusReport,
    client: &kube::Client,
    args: &Args,
    limit: Option<Duration>,
    images: Option<Arc<dyn ImageLookup>>,
) -> anyhow::Result<()> {
    let predicting = predict_running(client.clone(), &args.lookup, &args.what_if, images);
    let prediction = match limit {
        None => predicting.await?,
        Some(limit) => {
            let limit = limit + Duration::from_secs(args.lookup.timeout);
            tokio::time::timeout(limit, predicting)
                .await
                .map_err(|_| {
                    anyhow::anyhow!("the what-if took longer than {}s", limit.as_secs())
                })??
        }
    };
    report.what_if = prediction.as_ref().and_then(super::whatif::whatif_status);
    Ok(())
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    // A bad selector or patch is refused before anything is read.
    args.what_if.parse()?;
    args.lookup.default_platform()?;
    let conn = connect(
        args.cluster.kubeconfig.as_deref(),
        args.cluster.context.as_deref(),
    )
    .await?;
    let limit = Some(args.request_timeout).filter(|t| !t.is_zero());
    let mut report = report_from(&conn.client, &conn.server, limit).await?;
    add_what_if(&mut report, &conn.client, &args, limit, None).await?;
    print!("{}", render(&report, args.output)?);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeout_reads_like_kubectls() {
        let secs = |n| Ok(Duration::from_secs(n));
        assert_eq!(parse_timeout("30"), secs(30));
        assert_eq!(parse_timeout("45s"), secs(45));
        assert_eq!(parse_timeout("2m"), secs(120));
        assert_eq!(parse_timeout("1h"), secs(3600));
        assert_eq!(parse_timeout("0"), secs(0), "no limit");
        assert_eq!(parse_timeout("0s"), secs(0));
        for bad in ["", "s", "1.5s", "-1", "10d", "soon"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }
}
