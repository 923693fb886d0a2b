//! The sandbox's one wire format: `[tag: u8][length: u32 LE][payload]`.
//! Each side reads with a cap per tag, so neither can make the other
//! allocate more than it expects.

use bytes::Bytes;
use std::io::{self, Read, Write};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

// Parent to child: requests.
/// A layer record from the parent's cache: push it under the read layers.
pub const CACHED: u8 = b'C';
/// A layer blob follows on request: `[compression hint][decompressed limit u64]`.
pub const BLOB: u8 = b'B';
/// One chunk of the blob (the answer to `MORE`).
pub const DATA: u8 = b'D';
/// The blob ended and its digest verified (the answer to `MORE`).
pub const END: u8 = b'E';
/// Probe the layers pushed so far: `[complete u8][labels JSON]`.
pub const COLLECT: u8 = b'K';
/// Try what the sandbox must refuse (`probe::Probe` JSON).
pub const PROBE: u8 = b'T';
/// The answer to `GRANT`: `[granted u8][bytes u64]` (the limit when refused).
pub const GRANTED: u8 = b'g';

// Child to parent: answers and the two questions it may ask meanwhile.
/// The next blob chunk, please.
pub const MORE: u8 = b'N';
/// Bytes the child wants to retain: `[bytes u64]`.
pub const GRANT: u8 = b'G';
/// A cached layer was pushed.
pub const OK: u8 = b'O';
/// The parsed blob as a layer record (`rootfs::Layer::write_wire`).
pub const LAYER: u8 = b'L';
/// `rootfs::Collected` as JSON.
pub const FACTS: u8 = b'F';
/// `probe::Report` as JSON.
pub const REPORT: u8 = b'S';
/// The request is refused: `refusal::Refusal`.
pub const REFUSED: u8 = b'X';

pub fn header(tag: u8, len: usize) -> io::Result<[u8; 5]> {
    let len = u32::try_from(len).map_err(|_| io::Error::other("frame over 4 GiB"))?;
    let mut h = [0u8; 5];
    h[0] = tag;
    h[1..].copy_from_slice(&len.to_le_bytes());
    Ok(h)
}

pub fn write(w: &mut impl Write, tag: u8, payload: &[u8]) -> io::Result<()> {
    w.write_all(&header(tag, payload.len())?)?;
    w.write_all(payload)?;
    w.flush()
}

/// The next frame, or None at a clean end of stream; a payload over `cap`
/// is refused before it is read.
pub fn read(r: &mut impl Read, cap: u64) -> io::Result<Option<(u8, Bytes)>> {
    let mut h = [0u8; 5];
    match r.read_exact(&mut h[..1]) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        other => other?,
    }
    r.read_exact(&mut h[1..])?;
    let len = u32::from_le_bytes(h[1..].try_into().expect("4 bytes")) as u64;
    if len > cap {
        return Err(io::Error::other(format!(
            "frame {:?} of {len} bytes is over its {cap}-byte cap",
            h[0] as char
        )));
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    Ok(Some((h[0], Bytes::from(payload))))
}

pub async fn send(w: &mut (impl AsyncWrite + Unpin), tag: u8, payload: &[u8]) -> io::Result<()> {
    w.write_all(&header(tag, payload.len())?).await?;
    w.write_all(payload).await?;
    w.flush().await
}

/// `read`, for the parent; `cap` per tag (None: a tag it never accepts).
pub async fn recv(
    r: &mut (impl AsyncRead + Unpin),
    cap: impl Fn(u8) -> Option<u64>,
) -> io::Result<Option<(u8, Bytes)>> {
    let mut h = [0u8; 5];
    match r.read_exact(&mut h[..1]).await {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        other => other?,
    };
    let tag = h[0];
    let cap = cap(tag).ok_or_else(|| {
        io::Error::other(format!(
            "unexpected frame {:?}",
            (tag as char).escape_default()
        ))
    })?;
    r.read_exact(&mut h[1..]).await?;
    let len = u32::from_le_bytes(h[1..].try_into().expect("4 bytes")) as u64;
    if len > cap {
        return Err(io::Error::other(format!(
            "frame {:?} of {len} bytes is over its {cap}-byte cap",
            tag as char
        )));
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload).await?;
    Ok(Some((tag, Bytes::from(payload))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_caps_hold() {
        let mut buf = Vec::new();
        write(&mut buf, DATA, b"hello").unwrap();
        write(&mut buf, END, b"").unwrap();
        let mut r = &buf[..];
        assert_eq!(
            read(&mut r, 5).unwrap(),
            Some((DATA, Bytes::from_static(b"hello")))
        );
        assert_eq!(read(&mut r, 0).unwrap(), Some((END, Bytes::new())));
        assert_eq!(read(&mut r, 0).unwrap(), None);
        let e = read(&mut &buf[..], 4).unwrap_err();
        assert!(e.to_string().contains("over its 4-byte cap"), "{e}");
        let e = read(&mut &buf[..3], 5).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn the_parent_refuses_unknown_tags_and_oversized_frames() {
        let mut buf = Vec::new();
        write(&mut buf, FACTS, &[b'x'; 100]).unwrap();
        let caps = |tag| (tag == FACTS).then_some(100);
        assert!(recv(&mut &buf[..], caps).await.unwrap().is_some());
        let e = recv(&mut &buf[..], |_| Some(99)).await.unwrap_err();
        assert!(e.to_string().contains("cap"), "{e}");
        let e = recv(&mut &buf[..], |_| None).await.unwrap_err();
        assert!(e.to_string().contains("unexpected frame"), "{e}");
    }
}
