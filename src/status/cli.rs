//! `nfguard status [-o wide|json|yaml] [--kubeconfig PATH] [--context NAME]`.
//! Exit 0 with the report; any failure is an Err (exit 2, one line).

use super::{build_report, fetch, table};
use crate::kubeclient::{ClusterArgs, connect};
use crate::output::{Format, render_structured};
use anyhow::Context;
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
    /// Give up on the API server after this many seconds.
    #[arg(long, env = "NFGUARD_REQUEST_TIMEOUT", default_value_t = 30)]
    pub request_timeout: u64,
}

/// The report rendered as asked.
pub fn render(
    report: &super::StatusReport,
    format: Option<StatusFormat>,
) -> anyhow::Result<String> {
    let structured = match format {
        None => return Ok(table::render(report, false)),
        Some(StatusFormat::Wide) => return Ok(table::render(report, true)),
        Some(StatusFormat::Json) => Format::Json,
        Some(StatusFormat::Yaml) => Format::Yaml,
    };
    render_structured(report, structured)?.context("rendering the status report")
}

/// List through `client` (already connected to `server`) and build the report.
pub async fn report_from(
    client: &kube::Client,
    server: &str,
    timeout: Duration,
) -> anyhow::Result<super::StatusReport> {
    let listed = tokio::time::timeout(timeout, fetch::list(client, server))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "no answer from the API server {server} within {}s",
                timeout.as_secs()
            )
        })??;
    let now = k8s_openapi::jiff::Timestamp::now();
    Ok(build_report(&listed.profiles, &listed.nodes, now))
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    let conn = connect(
        args.cluster.kubeconfig.as_deref(),
        args.cluster.context.as_deref(),
    )
    .await?;
    let timeout = Duration::from_secs(args.request_timeout.max(1));
    let report = report_from(&conn.client, &conn.server, timeout).await?;
    print!("{}", render(&report, args.output)?);
    Ok(0)
}
