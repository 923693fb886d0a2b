//! Blob bytes from the network to a synchronous reader, verified on the way:
//! an async pump hashes and counts every chunk and hands it over a small
//! bounded channel to a blocking thread, which decompresses and parses. When
//! the inspection is dropped (timeout), the channel closes and the blocking
//! side stops at its next read.

use super::RegistryError;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// zstd windows above this are refused (`zstd --long`/`--ultra` levels); every
/// ordinary level, and the registries' and build tools' defaults, stay below.
pub const MAX_ZSTD_WINDOW_LOG: u32 = 24;
/// Batches in flight between the pump and the parser (bounds memory:
/// `memory::TRANSIENT_PER_INSPECTION` counts them).
pub const CHANNEL_CHUNKS: usize = 4;
/// Network chunks are small (KBs); handing each one to another thread costs a
/// wake-up, which dominates on a loaded machine. Coalesce into ~1 MiB batches.
pub const BATCH_BYTES: usize = 1 << 20;

pub type ChunkSender = mpsc::Sender<io::Result<Bytes>>;

pub fn channel() -> (ChunkSender, ChannelReader) {
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    (
        tx,
        ChannelReader {
            rx,
            current: Bytes::new(),
        },
    )
}

/// Forward `stream` into `tx`, verifying size and sha256 against `digest`.
/// Returns Ok when the blob was complete and correct, or when the reader hung
/// up early (its own error is then the one to report).
pub async fn pump<S>(
    mut stream: S,
    tx: ChunkSender,
    digest: &str,
    expected_size: Option<u64>,
    fetched: &AtomicU64,
) -> Result<(), RegistryError>
where
    S: Stream<Item = io::Result<Bytes>> + Unpin,
{
    let expected_hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| RegistryError::Protocol {
            reference: digest.into(),
            detail: format!("unsupported digest algorithm in {digest:?} (only sha256)"),
        })?;
    let mut hasher = Sha256::new();
    let mut got: u64 = 0;
    let mut batch = bytes::BytesMut::with_capacity(BATCH_BYTES);
    let fail = |e: RegistryError, tx: &ChunkSender| {
        // The reader sees a plain I/O error; the caller reports `e`.
        let _ = tx.try_send(Err(io::Error::other(e.to_string())));
        Err(e)
    };
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let actual = format!("sha256:{}", hex::encode(hasher.clone().finalize()));
                let err = match expected_size {
                    // The client's own verification fails the stream's end on a mismatch.
                    Some(exp) if got == exp && actual != digest => RegistryError::DigestMismatch {
                        digest: digest.into(),
                        actual,
                    },
                    Some(exp) if got < exp => RegistryError::Truncated {
                        digest: digest.into(),
                        expected: exp,
                        got,
                    },
                    _ => RegistryError::BlobStream {
                        digest: digest.into(),
                        got,
                        detail: e.to_string(),
                    },
                };
                return fail(err, &tx);
            }
        };
        got += chunk.len() as u64;
        fetched.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        if let Some(exp) = expected_size
            && got > exp
        {
            return fail(
                RegistryError::BlobTooLong {
                    digest: digest.into(),
                    expected: exp,
                },
                &tx,
            );
        }
        hasher.update(&chunk);
        if batch.is_empty() && chunk.len() >= BATCH_BYTES {
            if tx.send(Ok(chunk)).await.is_err() {
                return Ok(()); // reader gave up; it reports why
            }
            continue;
        }
        batch.extend_from_slice(&chunk);
        if batch.len() >= BATCH_BYTES && tx.send(Ok(batch.split().freeze())).await.is_err() {
            return Ok(());
        }
    }
    if !batch.is_empty() && tx.send(Ok(batch.split().freeze())).await.is_err() {
        return Ok(());
    }
    if let Some(exp) = expected_size
        && got < exp
    {
        return fail(
            RegistryError::Truncated {
                digest: digest.into(),
                expected: exp,
                got,
            },
            &tx,
        );
    }
    let actual = hex::encode(hasher.finalize());
    if actual != expected_hex {
        return fail(
            RegistryError::DigestMismatch {
                digest: digest.into(),
                actual: format!("sha256:{actual}"),
            },
            &tx,
        );
    }
    Ok(())
}

/// The blocking end of the channel.
pub struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

impl ChannelReader {
    /// Read to the end so the pump can finish verifying the digest.
    pub fn drain(&mut self) -> io::Result<()> {
        io::copy(self, &mut io::sink()).map(|_| ())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn from_media_type(media_type: &str) -> Self {
        if media_type.ends_with("gzip") {
            Compression::Gzip
        } else if media_type.ends_with("zstd") {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// Magic bytes win over the media type (registries and tools mislabel).
    pub fn sniff(prefix: &[u8], hint: Compression) -> Self {
        if prefix.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if prefix.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else if prefix.len() >= 262 && &prefix[257..262] == b"ustar" {
            Compression::None
        } else {
            hint
        }
    }
}

/// Fails once more than `limit` bytes came through, remembering that it did.
pub struct LimitedReader<R> {
    inner: R,
    limit: u64,
    seen: u64,
    pub exceeded: bool,
}

impl<R: Read> LimitedReader<R> {
    pub fn new(inner: R, limit: u64) -> Self {
        Self {
            inner,
            limit,
            seen: 0,
            exceeded: false,
        }
    }
}

impl<R: Read> Read for LimitedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seen += n as u64;
        if self.seen > self.limit {
            self.exceeded = true;
            return Err(io::Error::other(format!(
                "decompressed stream exceeds {} bytes",
                self.limit
            )));
        }
        Ok(n)
    }
}

/// Decompress `raw` (sniffed) and hand the tar stream to `parse`, bounded by
/// `limit` decompressed bytes. `parse` errors are returned as they are;
/// decompression failures and the limit become `RegistryError`s.
pub fn decompress_into<T, E>(
    raw: &mut impl Read,
    hint: Compression,
    limit: u64,
    digest: &str,
    parse: impl FnOnce(&mut dyn Read) -> Result<T, E>,
) -> Result<Result<T, E>, RegistryError> {
    let mut buffered = BufReader::with_capacity(256 << 10, raw);
    let prefix = buffered.fill_buf().map_err(|e| RegistryError::BlobStream {
        digest: digest.into(),
        got: 0,
        detail: e.to_string(),
    })?;
    let kind = Compression::sniff(prefix, hint);
    let decoder: Box<dyn Read + '_> = match kind {
        Compression::None => Box::new(buffered),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zstd => {
            let decompress_err = |e: io::Error| RegistryError::Decompress {
                digest: digest.into(),
                detail: e.to_string(),
            };
            let mut d =
                zstd::stream::read::Decoder::with_buffer(buffered).map_err(decompress_err)?;
            // A frame may ask for a window of up to 2 GiB, allocated before any
            // output: refuse windows no ordinary compression level uses.
            d.window_log_max(MAX_ZSTD_WINDOW_LOG)
                .map_err(decompress_err)?;
            Box::new(d)
        }
    };
    let mut limited = LimitedReader::new(decoder, limit);
    let out = parse(&mut limited);
    if limited.exceeded {
        return Err(RegistryError::DecompressedTooLarge {
            digest: digest.into(),
            limit,
        });
    }
    Ok(out)
}

/// Count bytes handed out (for the "not downloaded" figures).
pub fn counter() -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sha(data: &[u8]) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(data)))
    }

    async fn run(
        data: Vec<u8>,
        digest: String,
        size: Option<u64>,
    ) -> (Result<(), RegistryError>, Vec<u8>) {
        let (tx, mut rx) = channel();
        let chunks: Vec<io::Result<Bytes>> = data
            .chunks(7)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let fetched = AtomicU64::new(0);
        let reader = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let _ = rx.read_to_end(&mut out);
            out
        });
        let r = pump(futures::stream::iter(chunks), tx, &digest, size, &fetched).await;
        (r, reader.await.unwrap())
    }

    #[tokio::test]
    async fn verifies_digest_and_size() {
        let data = b"hello layer bytes".to_vec();
        let d = sha(&data);
        let (ok, out) = run(data.clone(), d.clone(), Some(data.len() as u64)).await;
        assert!(ok.is_ok());
        assert_eq!(out, data);
        let (bad, _) = run(data.clone(), sha(b"other"), None).await;
        assert!(
            matches!(bad, Err(RegistryError::DigestMismatch { .. })),
            "{bad:?}"
        );
        let (short, _) = run(data.clone(), d.clone(), Some(100)).await;
        assert!(
            matches!(short, Err(RegistryError::Truncated { got: 17, .. })),
            "{short:?}"
        );
        let (long, _) = run(data.clone(), d, Some(5)).await;
        assert!(
            matches!(long, Err(RegistryError::BlobTooLong { .. })),
            "{long:?}"
        );
    }

    #[test]
    fn sniffs_magic_over_media_type() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"x").unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(
            Compression::sniff(&gz, Compression::None),
            Compression::Gzip
        );
        let zs = zstd::encode_all(&b"x"[..], 1).unwrap();
        assert_eq!(
            Compression::sniff(&zs, Compression::Gzip),
            Compression::Zstd
        );
        let mut tar = vec![0u8; 512];
        tar[257..262].copy_from_slice(b"ustar");
        assert_eq!(
            Compression::sniff(&tar, Compression::Gzip),
            Compression::None
        );
        assert_eq!(
            Compression::from_media_type("application/vnd.oci.image.layer.v1.tar+zstd"),
            Compression::Zstd
        );
    }

    #[test]
    fn limited_reader_stops() {
        let mut r = LimitedReader::new(io::repeat(0).take(1000), 100);
        let e = io::copy(&mut r, &mut io::sink()).unwrap_err();
        assert!(r.exceeded, "{e}");
    }
}
