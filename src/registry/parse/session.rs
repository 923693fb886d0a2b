//! The parent's side of one inspection's parser: a confined child process
//! (`Parser::Sandbox`) or a thread of this process (`Parser::InProcess`),
//! spoken to over pipes with the same frames either way. The session asks,
//! the parser answers; while answering it may ask for the next blob chunk
//! (sent only as the digest pump delivers it, END only once the digest
//! verified) or for memory, granted from this process's budget. Dropping
//! the session kills the child.

use super::child::{ARG, ChildLimits};
use super::probe::{Probe, Report};
use super::refusal::Refusal;
use super::{Parser, frame, worker};
use crate::registry::RegistryError;
use crate::registry::stream::Compression;
use crate::rootfs::{Collected, LayerError, LayerLimits, Reservation};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// Largest answers accepted from a parser.
const MAX_FACTS: u64 = 1 << 20;
const MAX_REPORT: u64 = 64 << 10;
const MAX_REFUSAL: u64 = 4 << 10;

/// Why a parser request failed.
#[derive(Debug)]
pub enum Failure {
    /// The parser refused the input (what an in-process parse would say).
    Refused(Refusal),
    /// The blob's own stream failed (network, size, digest).
    Upstream(RegistryError),
    /// The parser was stopped: killed at a limit, or crashed.
    Stopped(String),
    /// The parser broke the protocol or could not be started.
    Broken(String),
}

impl Failure {
    /// The error for the layer `digest` (or the image, for a collect).
    pub fn into_error(self, digest: &str) -> RegistryError {
        match self {
            Failure::Refused(r) => r.into_error(digest),
            Failure::Upstream(e) => e,
            Failure::Stopped(why) => RegistryError::Layer {
                digest: digest.into(),
                source: LayerError::Limit(why),
            },
            Failure::Broken(why) => RegistryError::Internal(why),
        }
    }
}

/// A blob on its way in: chunks from the digest pump, and the pump itself.
pub struct Feed {
    chunks: mpsc::Receiver<io::Result<Bytes>>,
    /// None once awaited.
    pump: Option<tokio::task::JoinHandle<Result<(), RegistryError>>>,
    pending: Bytes,
    ended: bool,
}

impl Feed {
    pub fn new(
        chunks: mpsc::Receiver<io::Result<Bytes>>,
        pump: tokio::task::JoinHandle<Result<(), RegistryError>>,
    ) -> Self {
        Feed {
            chunks,
            pump: Some(pump),
            pending: Bytes::new(),
            ended: false,
        }
    }

    /// The next frame for the parser: a chunk, or END once the pump verified.
    async fn next(&mut self) -> Result<(u8, Bytes), Failure> {
        if self.pending.is_empty() {
            match self.chunks.recv().await {
                Some(Ok(chunk)) => self.pending = chunk,
                _ => {
                    let Some(pump) = self.pump.take() else {
                        return Err(Failure::Broken("the blob was already read".into()));
                    };
                    return match pump.await {
                        Ok(Ok(())) => {
                            self.ended = true;
                            Ok((frame::END, Bytes::new()))
                        }
                        Ok(Err(e)) => Err(Failure::Upstream(e)),
                        Err(e) => Err(Failure::Broken(format!("blob pump: {e}"))),
                    };
                }
            }
        }
        let n = self.pending.len().min(worker::MAX_CHUNK);
        Ok((frame::DATA, self.pending.split_to(n)))
    }
}

impl Feed {
    /// The pump's own error, if it already failed (a network or digest
    /// failure explains any parse failure).
    pub async fn failed_upstream(&mut self) -> Option<RegistryError> {
        if !self.pump.as_ref()?.is_finished() {
            return None;
        }
        match self.pump.take()?.await {
            Ok(Err(e)) => Some(e),
            _ => None,
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Some(pump) = &self.pump {
            pump.abort();
        }
    }
}

enum Runner {
    Child(tokio::process::Child),
    Thread,
}

pub struct Session {
    to: Box<dyn AsyncWrite + Unpin + Send>,
    from: tokio::io::BufReader<Box<dyn AsyncRead + Unpin + Send>>,
    runner: Runner,
    /// What the parser holds of this process's budget.
    grants: Reservation,
    grant_cap: u64,
    layer_cap: u64,
}

impl Session {
    /// Start a parser for one inspection with `limits` (their budget grants
    /// the child's memory) and `cpu_seconds` of CPU.
    pub fn start(
        parser: &Parser,
        limits: &LayerLimits,
        cpu_seconds: u64,
    ) -> Result<Self, RegistryError> {
        let cannot =
            |e: io::Error| RegistryError::Internal(format!("cannot start the image parser: {e}"));
        let (to, from, runner): (
            Box<dyn AsyncWrite + Unpin + Send>,
            Box<dyn AsyncRead + Unpin + Send>,
            _,
        ) = match parser {
            Parser::Sandbox(sandbox) => {
                let child_limits = ChildLimits {
                    memory_bytes: sandbox.memory_bytes,
                    cpu_seconds,
                    max_entries: limits.max_entries,
                    max_file_bytes: limits.max_file_bytes,
                    max_retained_bytes: limits.max_retained_bytes,
                };
                let mut child = tokio::process::Command::new(&sandbox.program)
                    .arg(ARG)
                    .args(child_limits.to_args())
                    .env_clear()
                    .current_dir("/")
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(cannot)?;
                let to = child.stdin.take().expect("piped");
                let from = child.stdout.take().expect("piped");
                (Box::new(to), Box::new(from), Runner::Child(child))
            }
            Parser::InProcess => {
                let (req_r, req_w) = std::io::pipe().map_err(cannot)?;
                let (ans_r, ans_w) = std::io::pipe().map_err(cannot)?;
                let thread_limits = limits.clone();
                std::thread::Builder::new()
                    .name("image-parser".into())
                    .spawn(move || {
                        let _ =
                            worker::serve(worker::Link::new(req_r, ans_w), thread_limits, false);
                    })
                    .map_err(cannot)?;
                let to =
                    tokio::net::unix::pipe::Sender::from_owned_fd(req_w.into()).map_err(cannot)?;
                let from = tokio::net::unix::pipe::Receiver::from_owned_fd(ans_r.into())
                    .map_err(cannot)?;
                (Box::new(to), Box::new(from), Runner::Thread)
            }
        };
        Ok(Session {
            to,
            from: tokio::io::BufReader::with_capacity(64 << 10, from),
            runner,
            grants: limits.budget.reservation(),
            grant_cap: limits.max_retained_bytes.saturating_add(4 << 20),
            layer_cap: limits.max_retained_bytes.saturating_add(1 << 20),
        })
    }

    /// Still able to answer: a thread always; a child that has not exited.
    pub fn alive(&mut self) -> bool {
        match &mut self.runner {
            Runner::Child(c) => matches!(c.try_wait(), Ok(None)),
            Runner::Thread => true,
        }
    }

    /// The child's process id (None in process).
    pub fn pid(&self) -> Option<u32> {
        match &self.runner {
            Runner::Child(c) => c.id(),
            Runner::Thread => None,
        }
    }

    async fn send(&mut self, tag: u8, payload: &[u8]) -> Result<(), Failure> {
        match frame::send(&mut self.to, tag, payload).await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.stopped().await),
        }
    }

    /// Why the parser is gone: its exit status, when it is a child.
    async fn stopped(&mut self) -> Failure {
        let Runner::Child(child) = &mut self.runner else {
            return Failure::Broken("the in-process image parser stopped".into());
        };
        let status = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
            Ok(Ok(s)) => s,
            _ => {
                let _ = child.start_kill();
                return Failure::Broken("the image parser hung up and did not exit".into());
            }
        };
        use std::os::unix::process::ExitStatusExt;
        Failure::Stopped(match status.signal() {
            Some(libc::SIGXCPU) | Some(libc::SIGKILL) => {
                "the image parser was stopped at its CPU limit".to_string()
            }
            Some(libc::SIGABRT) | Some(libc::SIGSEGV) | Some(libc::SIGBUS) => {
                "the image parser was stopped at its memory limit (or crashed)".to_string()
            }
            Some(libc::SIGSYS) => "the image parser made a forbidden system call".to_string(),
            Some(s) => format!("the image parser was killed by signal {s}"),
            None => format!("the image parser exited ({status})"),
        })
    }

    /// Read the parser's frames until its answer, serving its questions.
    async fn answer(&mut self, mut feed: Option<&mut Feed>) -> Result<(u8, Bytes), Failure> {
        loop {
            let layer_cap = self.layer_cap;
            let caps = move |tag| match tag {
                frame::MORE | frame::OK => Some(0),
                frame::GRANT => Some(8),
                frame::LAYER => Some(layer_cap),
                frame::FACTS => Some(MAX_FACTS),
                frame::REPORT => Some(MAX_REPORT),
                frame::REFUSED => Some(MAX_REFUSAL),
                _ => None,
            };
            let (tag, payload) = match frame::recv(&mut self.from, caps).await {
                Ok(Some(f)) => f,
                Ok(None) => return Err(self.stopped().await),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(self.stopped().await);
                }
                Err(e) => return Err(Failure::Broken(format!("image parser: {e}"))),
            };
            match tag {
                frame::GRANT => {
                    let want = u64::from_le_bytes(payload[..].try_into().expect("capped at 8"));
                    let mut answer = [0u8; 9];
                    let within = self.grants.bytes().saturating_add(want) <= self.grant_cap;
                    match within.then(|| self.grants.grow(want)) {
                        Some(Ok(())) => {
                            answer[0] = 1;
                            answer[1..].copy_from_slice(&want.to_le_bytes());
                        }
                        Some(Err(e)) => answer[1..].copy_from_slice(&e.limit.to_le_bytes()),
                        None => answer[1..].copy_from_slice(&self.grant_cap.to_le_bytes()),
                    }
                    self.send(frame::GRANTED, &answer).await?;
                }
                frame::MORE => {
                    let Some(feed) = feed.as_deref_mut().filter(|f| !f.ended) else {
                        return Err(Failure::Broken(
                            "the image parser asked for data out of turn".into(),
                        ));
                    };
                    let (tag, chunk) = feed.next().await?;
                    self.send(tag, &chunk).await?;
                }
                frame::REFUSED => return Err(Failure::Refused(Refusal::decode(&payload))),
                _ => return Ok((tag, payload)),
            }
        }
    }

    fn expect(got: u8, want: u8) -> Result<(), Failure> {
        if got == want {
            return Ok(());
        }
        Err(Failure::Broken(format!(
            "the image parser answered {:?} where {:?} was due",
            (got as char).escape_default().to_string(),
            want as char
        )))
    }

    /// Push a layer record from the cache under the layers pushed so far.
    pub async fn push_cached(&mut self, record: &Bytes) -> Result<(), Failure> {
        self.send(frame::CACHED, record).await?;
        let (tag, _) = self.answer(None).await?;
        Self::expect(tag, frame::OK)
    }

    /// Parse a blob (decompressed at most `limit` bytes) into a layer under
    /// the others; its record comes back for the cache.
    pub async fn push_blob(
        &mut self,
        hint: Compression,
        limit: u64,
        feed: &mut Feed,
    ) -> Result<Bytes, Failure> {
        let mut request = vec![worker::hint_code(hint)];
        request.extend_from_slice(&limit.to_le_bytes());
        self.send(frame::BLOB, &request).await?;
        let (tag, record) = self.answer(Some(feed)).await?;
        Self::expect(tag, frame::LAYER)?;
        if !feed.ended {
            // A layer before its blob verified is not one to keep.
            return Err(Failure::Broken(
                "the image parser answered before the blob ended".into(),
            ));
        }
        Ok(record)
    }

    /// Probe the layers pushed so far.
    pub async fn collect(
        &mut self,
        complete: bool,
        labels: &BTreeMap<String, String>,
    ) -> Result<Collected, Failure> {
        let mut request = vec![u8::from(complete)];
        serde_json::to_writer(&mut request, labels).map_err(|e| Failure::Broken(e.to_string()))?;
        self.send(frame::COLLECT, &request).await?;
        let (tag, json) = self.answer(None).await?;
        Self::expect(tag, frame::FACTS)?;
        serde_json::from_slice(&json)
            .map_err(|_| Failure::Broken("the image parser's facts do not parse".into()))
    }

    /// The sandbox self-check (children only: see `probe`).
    pub async fn probe(&mut self, p: &Probe) -> Result<Report, Failure> {
        let request = serde_json::to_vec(p).map_err(|e| Failure::Broken(e.to_string()))?;
        self.send(frame::PROBE, &request).await?;
        let (tag, json) = self.answer(None).await?;
        Self::expect(tag, frame::REPORT)?;
        serde_json::from_slice(&json)
            .map_err(|_| Failure::Broken("the image parser's report does not parse".into()))
    }

    /// Wait for what the parser does after its last answer (a probe's
    /// `then_*`): how it stopped.
    pub async fn outcome(mut self) -> Failure {
        self.stopped().await
    }
}
