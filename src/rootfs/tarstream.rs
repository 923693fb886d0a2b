//! A minimal streaming tar reader for layer tars (ustar, GNU and PAX
//! extensions). Written here rather than taken from the `tar` crate because
//! that crate reads GNU long names and PAX headers of any size into memory
//! (a hostile 4 GiB "long name" is a 4 GiB allocation); here every extension
//! is capped, every number checked, and nothing panics on input.

use std::io::{ErrorKind, Read};

const BLOCK: usize = 512;
/// GNU long name / long link data kept at most (Linux PATH_MAX is 4096).
pub const MAX_LONG_NAME: u64 = 64 << 10;
/// PAX extended header data kept at most.
pub const MAX_PAX: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum TarError {
    #[error("{0}")]
    Malformed(String),
    #[error("truncated: {0}")]
    Truncated(&'static str),
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    HardLink,
    Other,
}

/// One entry's header, extensions applied. Its data (`size` bytes) is read
/// with `TarReader::read_data` or skipped by the next `next_entry` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarEntry {
    /// As stored (lossy UTF-8), not normalized.
    pub path: String,
    pub kind: Kind,
    pub size: u64,
    pub link: String,
}

pub struct TarReader<R> {
    inner: R,
    /// Data bytes of the current entry not yet consumed, plus padding.
    pending: u64,
    scratch: Vec<u8>,
    done: bool,
}

fn octal_or_base256(field: &[u8], what: &str) -> Result<u64, TarError> {
    if let Some(&first) = field.first()
        && first & 0x80 != 0
    {
        // GNU base-256: big-endian, the first byte's high bit is the marker.
        if first == 0xff {
            return Err(TarError::Malformed(format!("negative {what}")));
        }
        let mut v: u64 = u64::from(first & 0x7f);
        for &b in &field[1..] {
            v = v
                .checked_mul(256)
                .and_then(|v| v.checked_add(u64::from(b)))
                .ok_or_else(|| TarError::Malformed(format!("{what} overflows")))?;
        }
        return Ok(v);
    }
    // Octal digits, optionally space-padded, ended by NUL or space.
    let digits = field
        .iter()
        .copied()
        .skip_while(|b| *b == b' ')
        .take_while(|b| *b != 0 && *b != b' ');
    let mut v: u64 = 0;
    for b in digits {
        if !(b'0'..=b'7').contains(&b) {
            return Err(TarError::Malformed(format!("{what} is not octal")));
        }
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or_else(|| TarError::Malformed(format!("{what} overflows")))?;
    }
    Ok(v)
}

/// (all bytes zero, sum of the bytes) of a header block, eight bytes at a
/// time: one header per entry makes this the hot loop for layers of many
/// small files.
fn block_sum(h: &[u8; BLOCK]) -> (bool, u64) {
    const LANES: u64 = 0x00ff_00ff_00ff_00ff;
    let mut any = 0u64;
    let mut acc = 0u64;
    for chunk in h.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let w = u64::from_le_bytes(w);
        any |= w;
        // Four 16-bit lanes; 64 words * 510 fits in 16 bits.
        acc += (w & LANES) + ((w >> 8) & LANES);
    }
    let sum = (acc & 0xffff) + ((acc >> 16) & 0xffff) + ((acc >> 32) & 0xffff) + (acc >> 48);
    (any == 0, sum)
}

fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

fn padded(size: u64) -> Result<u64, TarError> {
    size.checked_add(BLOCK as u64 - 1)
        .map(|s| s / BLOCK as u64 * BLOCK as u64)
        .ok_or_else(|| TarError::Malformed("entry size overflows".into()))
}

/// Values of `path`, `linkpath` and `size` in PAX records ("%d key=value\n").
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    size: Option<u64>,
}

fn parse_pax(mut data: &[u8]) -> Result<Pax, TarError> {
    let bad = || TarError::Malformed("malformed PAX record".into());
    let mut pax = Pax::default();
    while !data.is_empty() && data[0] != 0 {
        let sp = data.iter().position(|&b| b == b' ').ok_or_else(bad)?;
        let len: usize = std::str::from_utf8(&data[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        if len <= sp + 1 || len > data.len() {
            return Err(bad());
        }
        let record = &data[sp + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        let eq = record.iter().position(|&b| b == b'=').ok_or_else(bad)?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        match key {
            b"path" => pax.path = Some(value.to_vec()),
            b"linkpath" => pax.link = Some(value.to_vec()),
            b"size" => {
                pax.size = Some(
                    std::str::from_utf8(value)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(bad)?,
                )
            }
            _ => {}
        }
        data = &data[len..];
    }
    Ok(pax)
}

impl<R: Read> TarReader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            pending: 0,
            scratch: vec![0; 64 << 10],
            done: false,
        }
    }

    /// Fill `buf` completely; Ok(false) on a clean EOF before any byte.
    fn read_block(&mut self, buf: &mut [u8; BLOCK]) -> Result<bool, TarError> {
        let mut got = 0;
        while got < BLOCK {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => return Err(TarError::Truncated("header block")),
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    fn skip(&mut self, mut n: u64) -> Result<(), TarError> {
        while n > 0 {
            let want = n.min(self.scratch.len() as u64) as usize;
            match self.inner.read(&mut self.scratch[..want]) {
                Ok(0) => return Err(TarError::Truncated("entry data")),
                Ok(k) => n -= k as u64,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Read `size` data bytes (capped by the caller) then the padding.
    fn read_exact_data(&mut self, size: u64) -> Result<Vec<u8>, TarError> {
        let mut out = Vec::with_capacity(size.min(16 << 20) as usize);
        (&mut self.inner).take(size).read_to_end(&mut out)?;
        if (out.len() as u64) < size {
            return Err(TarError::Truncated("entry data"));
        }
        self.skip(padded(size)? - size)?;
        Ok(out)
    }

    /// The current entry's data; `Err` unless called right after `next_entry`
    /// with the entry's size.
    pub fn read_data(&mut self, size: u64) -> Result<Vec<u8>, TarError> {
        if padded(size)? != self.pending {
            return Err(TarError::Malformed("data read out of step".into()));
        }
        self.pending = 0;
        self.read_exact_data(size)
    }

    /// The next entry, or None at the end of the archive.
    pub fn next_entry(&mut self) -> Result<Option<TarEntry>, TarError> {
        if self.done {
            return Ok(None);
        }
        let pending = std::mem::take(&mut self.pending);
        self.skip(pending)?;
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut pax = Pax::default();
        let mut h = [0u8; BLOCK];
        loop {
            if !self.read_block(&mut h)? {
                // EOF without the end-of-archive blocks: accept, like GNU tar.
                self.done = true;
                return Ok(None);
            }
            let (all_zero, unsigned) = block_sum(&h);
            if all_zero {
                self.done = true;
                return Ok(None);
            }
            // The checksum field counts as eight spaces.
            let field: u64 = h[148..156].iter().map(|&b| u64::from(b)).sum();
            let unsigned = unsigned - field + 8 * 32;
            let want = octal_or_base256(&h[148..156], "checksum")?;
            if want != unsigned {
                // Some old writers summed signed bytes.
                let signed: i64 = h
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| {
                        if (148..156).contains(&i) {
                            32
                        } else {
                            i64::from(b as i8)
                        }
                    })
                    .sum();
                if want as i64 != signed {
                    return Err(TarError::Malformed("header checksum mismatch".into()));
                }
            }
            let mut size = octal_or_base256(&h[124..136], "size")?;
            let flag = h[156];
            match flag {
                b'L' | b'K' => {
                    if size > MAX_LONG_NAME {
                        return Err(TarError::Malformed(format!(
                            "GNU long name of {size} bytes (limit {MAX_LONG_NAME})"
                        )));
                    }
                    let mut data = self.read_exact_data(size)?;
                    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                    data.truncate(end);
                    if flag == b'L' {
                        long_name = Some(data);
                    } else {
                        long_link = Some(data);
                    }
                    continue;
                }
                b'x' => {
                    if size > MAX_PAX {
                        return Err(TarError::Malformed(format!(
                            "PAX header of {size} bytes (limit {MAX_PAX})"
                        )));
                    }
                    let data = self.read_exact_data(size)?;
                    pax = parse_pax(&data)?;
                    continue;
                }
                b'g' => {
                    // Global PAX defaults: nothing here uses them.
                    self.skip(padded(size)?)?;
                    continue;
                }
                _ => {}
            }
            if flag == b'S' && h[482] != 0 {
                // Old GNU sparse: extension blocks follow the header.
                let mut ext = [0u8; BLOCK];
                loop {
                    if !self.read_block(&mut ext)? {
                        return Err(TarError::Truncated("sparse header"));
                    }
                    if ext[504] == 0 {
                        break;
                    }
                }
            }
            if let Some(s) = pax.size {
                size = s;
            }
            let name = match (pax.path.take(), long_name.take()) {
                (Some(p), _) | (None, Some(p)) => p,
                (None, None) => {
                    let name = cstr(&h[0..100]);
                    let prefix = cstr(&h[345..500]);
                    // POSIX ustar splits long names into prefix/name; GNU's
                    // magic ("ustar  ") uses that space for other fields.
                    if &h[257..263] == b"ustar\0" && !prefix.is_empty() {
                        let mut p = prefix.to_vec();
                        p.push(b'/');
                        p.extend_from_slice(name);
                        p
                    } else {
                        name.to_vec()
                    }
                }
            };
            let link = match (pax.link.take(), long_link.take()) {
                (Some(l), _) | (None, Some(l)) => l,
                (None, None) => cstr(&h[157..257]).to_vec(),
            };
            let kind = match flag {
                b'0' | 0 | b'7' => Kind::File,
                b'5' => Kind::Dir,
                b'2' => Kind::Symlink,
                b'1' => Kind::HardLink,
                _ => Kind::Other,
            };
            // Old tars mark directories by a trailing slash on a file entry.
            let kind = if kind == Kind::File && name.ends_with(b"/") {
                Kind::Dir
            } else {
                kind
            };
            // Header-only types carry no data whatever the size field says
            // (Go's archive/tar, which writes and reads most OCI layers).
            let framed = if matches!(flag, b'1'..=b'6') { 0 } else { size };
            self.pending = padded(framed)?;
            return Ok(Some(TarEntry {
                path: String::from_utf8_lossy(&name).into_owned(),
                kind,
                size: framed,
                link: String::from_utf8_lossy(&link).into_owned(),
            }));
        }
    }
}
