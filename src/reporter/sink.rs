//! Where statuses go: the Kubernetes API (server-side apply), or a file /
//! stdout for debugging without a cluster and for tests. The file holds
//! exactly the apply body the API would receive.

use super::profile_api::{ApiError, ProfileWriter, status_apply_body};
use crate::api::NodeNetfilterProfileStatus;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Why a status did not reach its destination.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("writing {path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding the status: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("no answer within {} s", .0.as_secs())]
    Timeout(Duration),
}

#[async_trait::async_trait]
pub trait StatusSink: Send {
    async fn write(&mut self, status: &NodeNetfilterProfileStatus) -> Result<(), SinkError>;
}

pub struct KubeSink(pub ProfileWriter);

#[async_trait::async_trait]
impl StatusSink for KubeSink {
    async fn write(&mut self, status: &NodeNetfilterProfileStatus) -> Result<(), SinkError> {
        Ok(self.0.write(status).await?)
    }
}

/// `-` prints one JSON document per line on stdout; any other path is
/// replaced atomically (temp file + rename) so readers never see half a file.
pub struct FileSink {
    pub path: PathBuf,
    pub node_name: String,
}

#[async_trait::async_trait]
impl StatusSink for FileSink {
    async fn write(&mut self, status: &NodeNetfilterProfileStatus) -> Result<(), SinkError> {
        let body = status_apply_body(&self.node_name, status);
        if self.path.as_os_str() == "-" {
            let line = serde_json::to_string(&body)?;
            let mut out = std::io::stdout().lock();
            return writeln!(out, "{line}")
                .and_then(|_| out.flush())
                .map_err(|source| SinkError::File {
                    path: "stdout".into(),
                    source,
                });
        }
        let text = serde_json::to_vec_pretty(&body)?;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, &text)
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            .map_err(|source| SinkError::File {
                path: self.path.display().to_string(),
                source,
            })
    }
}
