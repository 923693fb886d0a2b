//! A `Layer` as bytes, for the image parser sandbox: the child parses a tar
//! into a `Layer` and sends it back in this form; the parent keeps it
//! opaque in its layer cache and hands it to the next child that needs it.
//! Only the sandboxed side decodes it, with the same charges as `from_tar`.
//!
//! Little-endian: magic, tar entry count, a table of retained contents (a
//! hard link shares its target's content, so each is written once), the
//! entries, the whiteouts, the opaque directories.

use super::{Content, DROPPED, ENTRY_OVERHEAD, Entry, Layer, LayerError, LayerLimits};
use bytes::Bytes;
use std::collections::HashMap;
use std::io::{self, Write};

const MAGIC: &[u8; 5] = b"NFGL\x01";

const DIR: u8 = 0;
const DIR_IMPLICIT: u8 = 1;
const SYMLINK: u8 = 2;
const FILE_RETAINED: u8 = 3;
const FILE_DROPPED: u8 = 4;
const FILE_OVERSIZE: u8 = 5;
const OTHER: u8 = 6;

/// Contents by identity: hard links share one `Bytes`.
fn content_table(layer: &Layer) -> (Vec<&Bytes>, HashMap<(usize, usize), u32>) {
    let mut table = Vec::new();
    let mut index = HashMap::new();
    let mut paths: Vec<&String> = layer.entries.keys().collect();
    paths.sort(); // one layer, one encoding
    for p in paths {
        if let Some(Entry::File {
            content: Content::Retained(b),
            ..
        }) = layer.entries.get(p)
        {
            index
                .entry((b.as_ptr() as usize, b.len()))
                .or_insert_with(|| {
                    table.push(b);
                    (table.len() - 1) as u32
                });
        }
    }
    (table, index)
}

fn put_str(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u32).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

impl Layer {
    /// Bytes `write_wire` writes.
    pub fn wire_len(&self) -> u64 {
        let mut counter = Counter(0);
        self.write_wire(&mut counter).expect("counting never fails");
        counter.0
    }

    pub fn write_wire(&self, w: &mut impl Write) -> io::Result<()> {
        let (table, index) = content_table(self);
        w.write_all(MAGIC)?;
        w.write_all(&self.tar_entries.to_le_bytes())?;
        w.write_all(&(table.len() as u32).to_le_bytes())?;
        for b in &table {
            w.write_all(&(b.len() as u64).to_le_bytes())?;
            w.write_all(b)?;
        }
        let mut paths: Vec<&String> = self.entries.keys().collect();
        paths.sort();
        w.write_all(&(paths.len() as u32).to_le_bytes())?;
        for p in paths {
            put_str(w, p)?;
            match &self.entries[p] {
                Entry::Dir { implicit: false } => w.write_all(&[DIR])?,
                Entry::Dir { implicit: true } => w.write_all(&[DIR_IMPLICIT])?,
                Entry::Symlink(t) => {
                    w.write_all(&[SYMLINK])?;
                    put_str(w, t)?;
                }
                Entry::File { size, content } => {
                    let (tag, arg) = match content {
                        Content::Retained(b) => (
                            FILE_RETAINED,
                            u64::from(index[&(b.as_ptr() as usize, b.len())]),
                        ),
                        Content::Dropped(why) => (
                            FILE_DROPPED,
                            DROPPED.iter().position(|d| d == why).unwrap_or(0) as u64,
                        ),
                        Content::Oversize(max) => (FILE_OVERSIZE, *max),
                    };
                    w.write_all(&[tag])?;
                    w.write_all(&size.to_le_bytes())?;
                    w.write_all(&arg.to_le_bytes())?;
                }
                Entry::Other => w.write_all(&[OTHER])?,
            }
        }
        for set in [&self.whiteouts, &self.opaque] {
            let mut names: Vec<&String> = set.iter().collect();
            names.sort();
            w.write_all(&(names.len() as u32).to_le_bytes())?;
            for n in names {
                put_str(w, n)?;
            }
        }
        Ok(())
    }

    /// Decode `bytes` (contents stay slices of it), charging what it keeps
    /// to `limits` as `from_tar` would.
    pub fn from_wire(bytes: Bytes, limits: &LayerLimits) -> Result<Layer, LayerError> {
        let mut r = Cursor { bytes, at: 0 };
        if r.take(MAGIC.len())? != MAGIC[..] {
            return Err(LayerError::Malformed("not a layer record"));
        }
        let mut layer = Layer::empty(limits);
        layer.tar_entries = r.u64()?;
        let contents = r.u32()?;
        let mut table = Vec::new();
        for _ in 0..contents {
            let len = r.u64()?;
            let b = r.take(usize::try_from(len).map_err(|_| too_short())?)?;
            layer.charge(b.len() as u64, "/")?;
            table.push(b);
        }
        let entries = r.u32()?;
        for _ in 0..entries {
            let path = r.string()?;
            let entry = match r.u8()? {
                DIR => Entry::Dir { implicit: false },
                DIR_IMPLICIT => Entry::Dir { implicit: true },
                SYMLINK => {
                    let t = r.string()?;
                    layer.charge(t.len() as u64, &path)?;
                    Entry::Symlink(t)
                }
                tag @ (FILE_RETAINED | FILE_DROPPED | FILE_OVERSIZE) => {
                    let size = r.u64()?;
                    let arg = r.u64()?;
                    let content = match tag {
                        FILE_RETAINED => Content::Retained(
                            table
                                .get(usize::try_from(arg).unwrap_or(usize::MAX))
                                .ok_or(LayerError::Malformed("content index out of range"))?
                                .clone(),
                        ),
                        FILE_DROPPED => Content::Dropped(
                            DROPPED
                                .get(usize::try_from(arg).unwrap_or(usize::MAX))
                                .ok_or(LayerError::Malformed("unknown reason code"))?,
                        ),
                        _ => Content::Oversize(arg),
                    };
                    Entry::File { size, content }
                }
                OTHER => Entry::Other,
                _ => return Err(LayerError::Malformed("unknown entry kind")),
            };
            if layer.entries.len() as u64 >= limits.max_entries {
                return Err(LayerError::TooManyEntries(limits.max_entries));
            }
            layer.charge(ENTRY_OVERHEAD + path.len() as u64, &path)?;
            layer.entries.insert(path, entry);
        }
        for opaque in [false, true] {
            let n = r.u32()?;
            for _ in 0..n {
                let name = r.string()?;
                layer.charge(ENTRY_OVERHEAD + name.len() as u64, &name)?;
                if opaque {
                    layer.opaque.insert(name);
                } else {
                    layer.whiteouts.insert(name);
                }
            }
        }
        if r.at != r.bytes.len() {
            return Err(LayerError::Malformed("trailing bytes"));
        }
        Ok(layer)
    }
}

struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn too_short() -> LayerError {
    LayerError::Malformed("record ends early")
}

struct Cursor {
    bytes: Bytes,
    at: usize,
}

impl Cursor {
    fn take(&mut self, n: usize) -> Result<Bytes, LayerError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(too_short)?;
        let b = self.bytes.slice(self.at..end);
        self.at = end;
        Ok(b)
    }
    fn u8(&mut self) -> Result<u8, LayerError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, LayerError> {
        Ok(u32::from_le_bytes(
            self.take(4)?[..].try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, LayerError> {
        Ok(u64::from_le_bytes(
            self.take(8)?[..].try_into().expect("8 bytes"),
        ))
    }
    fn string(&mut self) -> Result<String, LayerError> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| LayerError::Malformed("a name is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rootfs::RootFs;

    fn tar(entries: &[(&str, &[u8])], links: &[(&str, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o755);
            h.set_cksum();
            b.append_data(&mut h, path, *data).unwrap();
        }
        for (path, target) in links {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Link);
            h.set_size(0);
            b.append_link(&mut h, path, target).unwrap();
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "usr/sbin/iptables", "xtables-nft-multi")
            .unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_cksum();
        b.append_data(&mut h, "etc/.wh.old", &[][..]).unwrap();
        b.append_data(&mut h, "var/lib/.wh..wh..opq", &[][..])
            .unwrap();
        b.into_inner().unwrap()
    }

    #[test]
    fn a_layer_survives_the_wire_and_hard_links_are_written_once() {
        let big = vec![7u8; 100_000];
        let t = tar(
            &[
                ("usr/sbin/xtables-nft-multi", &big),
                ("var/lib/dpkg/status", b"Package: iptables\n"),
            ],
            &[
                (
                    "usr/sbin/xtables-legacy-multi",
                    "usr/sbin/xtables-nft-multi",
                ),
                ("usr/sbin/iptables-save", "opt/elsewhere"),
            ],
        );
        let layer = Layer::from_tar(&t[..], &LayerLimits::default()).unwrap();
        let mut wire = Vec::new();
        layer.write_wire(&mut wire).unwrap();
        assert_eq!(wire.len() as u64, layer.wire_len());
        assert!(
            wire.len() < 101_000,
            "one copy of the linked content: {}",
            wire.len()
        );
        let back = Layer::from_wire(Bytes::from(wire.clone()), &LayerLimits::default()).unwrap();
        assert!(back.retained_bytes() <= layer.retained_bytes());
        let mut again = Vec::new();
        back.write_wire(&mut again).unwrap();
        assert_eq!(again, wire, "decode then encode is the identity");
        let root = super::super::LayeredRoot {
            layers: vec![std::sync::Arc::new(back)],
            complete: true,
        };
        let read = |p: &str| root.read(p, 1 << 20).map(|l| format!("{l:?}"));
        assert!(
            read("/usr/sbin/xtables-legacy-multi")
                .unwrap()
                .contains("Found")
        );
        assert!(
            read("/usr/sbin/iptables").unwrap().contains("Found"),
            "symlink kept"
        );
        let dropped = format!("{:?}", root.read("/usr/sbin/iptables-save", 10));
        assert!(dropped.contains("hard link"), "{dropped}");
        assert!(
            format!("{:?}", root.lstat("/etc/old")).contains("Absent"),
            "whiteout kept"
        );
    }

    #[test]
    fn malformed_and_oversized_records_are_refused() {
        let t = tar(&[("var/lib/dpkg/status", &[1u8; 5000])], &[]);
        let layer = Layer::from_tar(&t[..], &LayerLimits::default()).unwrap();
        let mut wire = Vec::new();
        layer.write_wire(&mut wire).unwrap();
        for cut in [0, 3, 10, wire.len() / 2, wire.len() - 1] {
            let e = Layer::from_wire(
                Bytes::copy_from_slice(&wire[..cut]),
                &LayerLimits::default(),
            );
            assert!(
                matches!(e, Err(LayerError::Malformed(_))),
                "cut at {cut}: {e:?}"
            );
        }
        let mut huge = wire.clone();
        // The content table's first length, claiming far more than is there.
        huge[17..25].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Layer::from_wire(Bytes::from(huge), &LayerLimits::default()).is_err());
        let small = LayerLimits {
            max_retained_bytes: 1000,
            ..LayerLimits::default()
        };
        let e = Layer::from_wire(Bytes::from(wire), &small).unwrap_err();
        assert!(matches!(e, LayerError::Limit(_)), "{e}");
    }
}
