//! The parsing side of the sandbox: reads requests from its parent, parses
//! what they carry (decompression, tar, then every probe over the layers
//! pushed so far) and answers. The same loop runs in the confined child
//! process and, for `Parser::InProcess`, on a thread of the caller.

use super::frame;
use super::refusal::Refusal;
use crate::registry::RegistryError;
use crate::registry::stream::{self, Compression};
use crate::rootfs::{
    self, BudgetExhausted, Layer, LayerError, LayerLimits, LayeredRoot, MemoryBudget,
};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::io::{self, BufWriter, Read, Write};
use std::sync::{Arc, Mutex};

/// Largest blob chunk the parent sends.
pub const MAX_CHUNK: usize = 1 << 20;
/// Grants are asked in steps of at least this many bytes.
const GRANT_STEP: u64 = 1 << 20;
/// Labels are an image config's (at most 8 MiB of JSON).
const MAX_COLLECT: u64 = 9 << 20;
const MAX_PROBE: u64 = 64 << 10;

/// Both directions of the pipe to the parent.
pub struct Link {
    pub from: Box<dyn Read + Send>,
    pub to: BufWriter<Box<dyn Write + Send>>,
}

impl Link {
    pub fn new(from: impl Read + Send + 'static, to: impl Write + Send + 'static) -> Self {
        Link {
            from: Box::new(from),
            to: BufWriter::with_capacity(64 << 10, Box::new(to)),
        }
    }
}

type Shared = Arc<Mutex<Link>>;

fn lock(link: &Shared) -> std::sync::MutexGuard<'_, Link> {
    link.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ask the parent for `n` more bytes of its memory budget.
fn ask_grant(link: &Shared, n: u64) -> Result<u64, BudgetExhausted> {
    let n = n.max(GRANT_STEP);
    let refused = |limit| BudgetExhausted { limit };
    let mut l = lock(link);
    frame::write(&mut l.to, frame::GRANT, &n.to_le_bytes()).map_err(|_| refused(0))?;
    let Link { from, .. } = &mut *l;
    match frame::read(from, 9) {
        Ok(Some((frame::GRANTED, p))) if p.len() == 9 => {
            let bytes = u64::from_le_bytes(p[1..9].try_into().expect("8 bytes"));
            if p[0] == 1 {
                Ok(bytes)
            } else {
                Err(refused(bytes))
            }
        }
        _ => Err(refused(0)),
    }
}

/// The blob of one `BLOB` request, pulled chunk by chunk.
struct BlobReader {
    link: Shared,
    current: Bytes,
    ended: bool,
}

impl Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            if self.ended {
                return Ok(0);
            }
            let mut l = lock(&self.link);
            frame::write(&mut l.to, frame::MORE, &[])?;
            let Link { from, .. } = &mut *l;
            match frame::read(from, MAX_CHUNK as u64)? {
                Some((frame::DATA, chunk)) => self.current = chunk,
                Some((frame::END, _)) => self.ended = true,
                _ => return Err(io::Error::other("the blob stream broke off")),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

struct Worker {
    link: Shared,
    limits: LayerLimits,
    /// Pushed layers, top first.
    layers: Vec<Arc<Layer>>,
    retained: u64,
}

/// Serve requests until the parent closes the link. In the `child`, every
/// retained byte is asked of the parent (the child's case); otherwise
/// `limits.budget` is the caller's own.
pub fn serve(link: Link, mut limits: LayerLimits, child: bool) -> io::Result<()> {
    let link: Shared = Arc::new(Mutex::new(link));
    if child {
        let asker = link.clone();
        limits.budget = MemoryBudget::granted_by(Box::new(move |n| ask_grant(&asker, n)));
    }
    let mut w = Worker {
        link,
        limits,
        layers: Vec::new(),
        retained: 0,
    };
    let cached_cap = w.limits.max_retained_bytes.saturating_mul(2) + (1 << 20);
    loop {
        let request = {
            let mut l = lock(&w.link);
            let cap = cached_cap.max(MAX_COLLECT);
            frame::read(&mut l.from, cap)?
        };
        let Some((tag, payload)) = request else {
            return Ok(());
        };
        match tag {
            frame::CACHED => {
                let answer = Layer::from_wire(payload, &w.limits)
                    .map_err(layer_error)
                    .and_then(|l| w.push(l));
                w.answer(answer.map(|()| (frame::OK, Vec::new())))?;
            }
            frame::BLOB => {
                let answer = w.blob(&payload);
                match answer {
                    Ok(layer) => w.send_layer(&layer)?,
                    Err(e) => w.answer(Err(e))?,
                }
            }
            frame::COLLECT => {
                let answer = w.collect(&payload);
                w.answer(answer.map(|json| (frame::FACTS, json)))?;
            }
            // Only a confined child may be asked to misbehave.
            frame::PROBE if child && payload.len() as u64 <= MAX_PROBE => {
                let probe: super::probe::Probe = serde_json::from_slice(&payload)
                    .map_err(|e| io::Error::other(format!("probe: {e}")))?;
                let report = super::probe::attempt(&probe);
                let json = serde_json::to_vec(&report).map_err(io::Error::other)?;
                w.answer(Ok((frame::REPORT, json)))?;
                super::probe::then_exceed(&probe);
            }
            _ => return Err(io::Error::other("unexpected request")),
        }
    }
}

fn layer_error(source: LayerError) -> RegistryError {
    RegistryError::Layer {
        digest: String::new(),
        source,
    }
}

impl Worker {
    fn answer(&self, a: Result<(u8, Vec<u8>), RegistryError>) -> io::Result<()> {
        let (tag, payload) = match a {
            Ok(a) => a,
            Err(e) => (frame::REFUSED, Refusal::from_error(&e).encode()),
        };
        frame::write(&mut lock(&self.link).to, tag, &payload)
    }

    /// Keep `layer` under the others, within the image's cap.
    fn push(&mut self, layer: Layer) -> Result<(), RegistryError> {
        let cap = self.limits.max_retained_bytes;
        self.retained += layer.retained_bytes();
        if self.retained > cap {
            return Err(layer_error(LayerError::Limit(format!(
                "the image's layers retain more than {cap} bytes of probe files"
            ))));
        }
        self.layers.push(Arc::new(layer));
        Ok(())
    }

    fn blob(&mut self, request: &[u8]) -> Result<Arc<Layer>, RegistryError> {
        let (hint, limit) = match request {
            [h, rest @ ..] if rest.len() == 8 => (
                match h {
                    1 => Compression::Gzip,
                    2 => Compression::Zstd,
                    _ => Compression::None,
                },
                u64::from_le_bytes(rest.try_into().expect("8 bytes")),
            ),
            _ => return Err(RegistryError::Internal("malformed blob request".into())),
        };
        let mut reader = BlobReader {
            link: self.link.clone(),
            current: Bytes::new(),
            ended: false,
        };
        let limits = self.limits.clone();
        let parsed = stream::decompress_into(&mut reader, hint, limit, "", |tar| {
            Layer::from_tar(tar, &limits)
        })?;
        let layer = parsed.map_err(layer_error)?;
        // Read to the end: the parent says END only once the digest verified.
        io::copy(&mut reader, &mut io::sink()).map_err(|e| RegistryError::BlobStream {
            digest: String::new(),
            got: 0,
            detail: e.to_string(),
        })?;
        self.push(layer)?;
        Ok(self.layers.last().expect("just pushed").clone())
    }

    fn send_layer(&self, layer: &Layer) -> io::Result<()> {
        let len = usize::try_from(layer.wire_len()).map_err(io::Error::other)?;
        let mut l = lock(&self.link);
        l.to.write_all(&frame::header(frame::LAYER, len)?)?;
        layer.write_wire(&mut l.to)?;
        l.to.flush()
    }

    fn collect(&self, request: &[u8]) -> Result<Vec<u8>, RegistryError> {
        let Some((complete, labels)) = request.split_first() else {
            return Err(RegistryError::Internal("malformed collect request".into()));
        };
        let labels: BTreeMap<String, String> = serde_json::from_slice(labels)
            .map_err(|_| RegistryError::Internal("malformed labels".into()))?;
        let root = LayeredRoot {
            layers: self.layers.clone(),
            complete: *complete == 1,
        };
        let collected = rootfs::collect(&root, &labels);
        serde_json::to_vec(&collected).map_err(|e| RegistryError::Internal(e.to_string()))
    }
}

/// The wire code of a compression hint.
pub fn hint_code(c: Compression) -> u8 {
    match c {
        Compression::None => 0,
        Compression::Gzip => 1,
        Compression::Zstd => 2,
    }
}
