//! `nfguard status [-o wide|json|yaml] [--kubeconfig PATH] [--context NAME]
//! [--assume-nodes SELECTOR --assume PATCH...]`. Exit 0 with the report (a
//! predicted deny too); any failure is an Err (exit 2, one line).
//!
//! With `--context` repeated or `--all-contexts`, one table over several
//! clusters, read in parallel, each within `--request-timeout`; a cluster
//! without status is a row saying why, and makes the exit status 2.

use super::clusters::{ClusterStatus, ClustersReport};
use super::{build_report, fetch, table};
use crate::check::cli::{AssumeArgs, LookupArgs, predict_running};
use crate::judgement::ImageLookup;
use crate::output::{Format, render_structured, terminal_safe};
use crate::runtime::client::connect;
use anyhow::Context;
use futures::StreamExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Clusters read at once with several contexts.
const PARALLEL_CLUSTERS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    /// The table with more columns.
    Wide,
    Json,
    Yaml,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, env = "NFGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    /// Repeated (or comma-separated): one table over those clusters.
    #[arg(long = "context", env = "NFGUARD_CONTEXT", value_delimiter = ',')]
    pub contexts: Vec<String>,
    /// One table over every context of the kubeconfig.
    #[arg(long, conflicts_with = "contexts")]
    pub all_contexts: bool,
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
    Ok(listed_report_from(client, server, timeout).await?.0)
}

/// `report_from`, with the profiles and nodes it listed (the what-if then
/// judges the same snapshot instead of listing them again).
pub async fn listed_report_from(
    client: &kube::Client,
    server: &str,
    timeout: Option<Duration>,
) -> anyhow::Result<(super::StatusReport, fetch::Listed)> {
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
    Ok((report, listed))
}

/// `report` with the what-if section `check --running` predicts for
/// `args`' assumed change (nothing read or looked up without `--assume`).
/// Bounded by the request timeout plus the look-ups' own `--timeout`.
/// `images`: a fixed image lookup (tests); None: the registry inspector.
/// `listed`: the profiles and nodes the report was built from (None: the
/// what-if lists them).
pub async fn add_what_if(
    report: &mut super::StatusReport,
    client: &kube::Client,
    args: &Args,
    limit: Option<Duration>,
    images: Option<Arc<dyn ImageLookup>>,
    listed: Option<fetch::Listed>,
) -> anyhow::Result<()> {
    let predicting = predict_running(client.clone(), &args.lookup, &args.what_if, images, listed);
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
    let limit = Some(args.request_timeout).filter(|t| !t.is_zero());
    if args.all_contexts || args.contexts.len() > 1 {
        return run_clusters(&args, limit).await;
    }
    let conn = connect(
        args.kubeconfig.as_deref(),
        args.contexts.first().map(String::as_str),
    )
    .await?;
    let (mut report, listed) = listed_report_from(&conn.client, &conn.server, limit).await?;
    add_what_if(&mut report, &conn.client, &args, limit, None, Some(listed)).await?;
    print!("{}", render(&report, args.output)?);
    Ok(0)
}

/// Several clusters: the table, then exit 2 if any gave no status.
async fn run_clusters(args: &Args, limit: Option<Duration>) -> anyhow::Result<u8> {
    if !args.what_if.assume.is_empty() {
        anyhow::bail!(
            "the what-if (--assume-nodes, --assume) reads one cluster: give one --context"
        );
    }
    let contexts = if args.all_contexts {
        context_names(args.kubeconfig.as_deref())?
    } else {
        args.contexts.clone()
    };
    let report = clusters_report(args.kubeconfig.as_deref(), contexts, limit).await;
    let text = match args.output {
        None => terminal_safe(super::clusters::render(&report, false)),
        Some(StatusFormat::Wide) => terminal_safe(super::clusters::render(&report, true)),
        Some(StatusFormat::Json) => {
            render_structured(&report, Format::Json)?.context("rendering the status report")?
        }
        Some(StatusFormat::Yaml) => {
            render_structured(&report, Format::Yaml)?.context("rendering the status report")?
        }
    };
    print!("{text}");
    Ok(if report.failed == 0 { 0 } else { 2 })
}

/// Every context of the kubeconfig (`--kubeconfig`, else KUBECONFIG's files
/// merged, else ~/.kube/config), in its order.
pub fn context_names(kubeconfig: Option<&Path>) -> anyhow::Result<Vec<String>> {
    let kc = match kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?,
        None => kube::config::Kubeconfig::read()
            .context("reading the kubeconfig (KUBECONFIG or ~/.kube/config)")?,
    };
    let names: Vec<String> = kc.contexts.into_iter().map(|c| c.name).collect();
    if names.is_empty() {
        anyhow::bail!("--all-contexts: the kubeconfig has no context");
    }
    Ok(names)
}

/// Each context's status, read in parallel ([`PARALLEL_CLUSTERS`] at
/// once), each within `limit` (connecting, credentials and the lists
/// together): a cluster that does not answer is an error in its row, never
/// a hang. In the order given.
pub async fn clusters_report(
    kubeconfig: Option<&Path>,
    contexts: Vec<String>,
    limit: Option<Duration>,
) -> ClustersReport {
    let one = |context: String| async move {
        let mut server = None;
        let reading = async {
            let conn = connect(kubeconfig, Some(&context)).await?;
            server = Some(conn.server.clone());
            report_from(&conn.client, &conn.server, None).await
        };
        let result = match limit {
            None => reading.await,
            Some(limit) => match tokio::time::timeout(limit, reading).await {
                Ok(r) => r,
                Err(_) => Err(anyhow::anyhow!("no answer within {}s", limit.as_secs())),
            },
        };
        let (status, error) = match result {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        };
        ClusterStatus {
            context,
            server,
            status,
            error,
        }
    };
    let clusters = futures::stream::iter(contexts)
        .map(one)
        .buffered(PARALLEL_CLUSTERS)
        .collect()
        .await;
    ClustersReport::new(clusters)
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
