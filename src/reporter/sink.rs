//! Where statuses go: the Kubernetes API (server-side apply), or a file /
//! stdout for debugging without a cluster and for tests. The file holds
//! exactly the apply body the API would receive.

use super::profile_api::{ProfileWriter, status_apply_body};
use crate::api::NodeNetfilterProfileStatus;
use std::io::Write;
use std::path::PathBuf;

#[async_trait::async_trait]
pub trait StatusSink: Send {
    async fn write(&mut self, status: &NodeNetfilterProfileStatus) -> Result<(), String>;
}

pub struct KubeSink(pub ProfileWriter);

#[async_trait::async_trait]
impl StatusSink for KubeSink {
    async fn write(&mut self, status: &NodeNetfilterProfileStatus) -> Result<(), String> {
        self.0.write(status).await.map_err(|e| e.to_string())
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
    async fn write(&mut self, status: &NodeNetfilterProfileStatus) -> Result<(), String> {
        let body = status_apply_body(&self.node_name, status);
        if self.path.as_os_str() == "-" {
            let line = serde_json::to_string(&body).map_err(|e| e.to_string())?;
            let mut out = std::io::stdout().lock();
            return writeln!(out, "{line}")
                .and_then(|_| out.flush())
                .map_err(|e| format!("writing to stdout: {e}"));
        }
        let text = serde_json::to_vec_pretty(&body).map_err(|e| e.to_string())?;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, &text)
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            .map_err(|e| format!("writing {}: {e}", self.path.display()))
    }
}
