//! A response body read as it arrives, a field or a frame at a time: a list
//! of 100,000 pods is never held whole, only the object being decoded. Each
//! length read from the wire is checked against a bound before a byte of
//! it is buffered.

use super::wire::WireError;
use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use std::pin::Pin;

pub type Body = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading the response: {0}")]
    Io(#[from] std::io::Error),
    /// The body ended inside a field or frame: the connection's doing, not
    /// the bytes' (retried, where a malformed message is not).
    #[error("the response ended inside a field")]
    Ended,
    #[error(transparent)]
    Wire(#[from] WireError),
}

pub struct Reader {
    body: Body,
    buf: BytesMut,
    /// Bytes consumed since the start of the body.
    pub pos: u64,
}

impl Reader {
    pub fn new(body: Body) -> Self {
        Reader {
            body,
            buf: BytesMut::new(),
            pos: 0,
        }
    }

    /// Buffers at least `n` bytes; false if the body ends first.
    async fn fill(&mut self, n: usize) -> Result<bool, ReadError> {
        while self.buf.len() < n {
            match self.body.next().await {
                Some(chunk) => self.buf.extend_from_slice(&chunk?),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// True when the body has ended with every byte consumed.
    pub async fn at_end(&mut self) -> Result<bool, ReadError> {
        Ok(!self.fill(1).await?)
    }

    /// The next `n` bytes, `n` checked against `max` first.
    pub async fn take(&mut self, n: u64, max: u64) -> Result<Bytes, ReadError> {
        if n > max {
            return Err(WireError::TooLarge { len: n, max }.into());
        }
        let n = n as usize;
        if !self.fill(n).await? {
            return Err(ReadError::Ended);
        }
        self.pos += n as u64;
        Ok(self.buf.split_to(n).freeze())
    }

    /// Passes over `n` bytes without keeping them.
    pub async fn skip(&mut self, mut n: u64) -> Result<(), ReadError> {
        while n > 0 {
            if !self.fill(1).await? {
                return Err(ReadError::Ended);
            }
            let step = n.min(self.buf.len() as u64);
            self.buf.advance(step as usize);
            self.pos += step;
            n -= step;
        }
        Ok(())
    }

    /// A varint, or None if the body ends before its first byte.
    pub async fn varint(&mut self) -> Result<Option<u64>, ReadError> {
        for want in 1..=10 {
            if !self.fill(want).await? {
                if want == 1 {
                    return Ok(None);
                }
                return Err(ReadError::Ended);
            }
            if self.buf[want - 1] < 0x80 {
                let (v, n) = super::wire::varint(&self.buf)?;
                self.buf.advance(n);
                self.pos += n as u64;
                return Ok(Some(v));
            }
        }
        Err(WireError::LongVarint.into())
    }

    /// A field's key, or None at the end of the body.
    pub async fn key(&mut self) -> Result<Option<(u32, u8)>, ReadError> {
        Ok(self
            .varint()
            .await?
            .map(|k| ((k >> 3) as u32, (k & 7) as u8)))
    }

    /// Passes over a field's value, of any wire type, without keeping it.
    pub async fn skip_value(&mut self, wire_type: u8) -> Result<(), ReadError> {
        match wire_type {
            0 => self.varint().await?.map(|_| ()).ok_or(ReadError::Ended),
            1 => self.skip(8).await,
            2 => {
                let len = self.varint().await?.ok_or(ReadError::Ended)?;
                self.skip(len).await
            }
            5 => self.skip(4).await,
            other => Err(WireError::WireType(other).into()),
        }
    }

    /// A 4-byte big-endian length and that many bytes (a watch frame), or
    /// None at the end of the body.
    pub async fn frame(&mut self, max: u64) -> Result<Option<Bytes>, ReadError> {
        if !self.fill(4).await? {
            return if self.buf.is_empty() {
                Ok(None)
            } else {
                Err(ReadError::Ended)
            };
        }
        let len = u64::from(self.buf.get_u32());
        self.pos += 4;
        self.take(len, max).await.map(Some)
    }
}

#[cfg(test)]
pub fn body_of(chunks: Vec<Vec<u8>>) -> Body {
    Box::pin(futures::stream::iter(
        chunks.into_iter().map(|c| Ok(Bytes::from(c))),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every split of the input into two chunks reads the same.
    #[tokio::test]
    async fn fields_and_frames_read_alike_however_the_body_is_cut() {
        let mut whole = vec![0x96, 0x01]; // varint 150
        whole.extend_from_slice(&[0, 0, 0, 3, b'a', b'b', b'c']);
        for cut in 0..=whole.len() {
            let mut r = Reader::new(body_of(vec![whole[..cut].to_vec(), whole[cut..].to_vec()]));
            assert_eq!(r.varint().await.unwrap(), Some(150), "cut {cut}");
            assert_eq!(
                &r.frame(16).await.unwrap().unwrap()[..],
                b"abc",
                "cut {cut}"
            );
            assert!(r.at_end().await.unwrap(), "cut {cut}");
            assert_eq!(r.pos, whole.len() as u64);
        }
    }

    #[tokio::test]
    async fn a_length_over_its_bound_is_refused_before_it_is_buffered() {
        // Claims 4 GiB and sends 3 bytes: refused at once, nothing awaited.
        let mut r = Reader::new(body_of(vec![vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3]]));
        match r.frame(1 << 20).await {
            Err(ReadError::Wire(WireError::TooLarge { len, max })) => {
                assert_eq!((len, max), (u64::from(u32::MAX), 1 << 20))
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_body_ending_inside_a_frame_is_truncated() {
        let mut r = Reader::new(body_of(vec![vec![0, 0, 0, 9, 1, 2]]));
        assert!(matches!(r.frame(16).await, Err(ReadError::Ended)));
        let mut r = Reader::new(body_of(vec![vec![0, 0]]));
        assert!(matches!(r.frame(16).await, Err(ReadError::Ended)));
    }
}
