//! The database header and the walk of a table b-tree: interior (0x05) and
//! leaf (0x0D) pages, cells, overflow chains. Each page is read at most once
//! per file; rows and assembled payload bytes are counted against the caps.

use super::record::varint;
use super::{MAX_FILE_BYTES, MAX_PAYLOAD_BYTES, MAX_ROWS, MAX_TREE_DEPTH, SqliteError as E};

const MAGIC: &[u8; 16] = b"SQLite format 3\0";
const HEADER_BYTES: usize = 100;
const INTERIOR_TABLE: u8 = 0x05;
const LEAF_TABLE: u8 = 0x0D;

/// One database file being read: its geometry, and what the read has spent.
pub(super) struct File<'a> {
    db: &'a [u8],
    page_size: usize,
    /// Page size minus the reserved bytes at each page's end.
    usable: usize,
    page_count: u32,
    visited: Vec<bool>,
    rows: usize,
    payload_bytes: usize,
    /// Reused for payloads that spill to overflow pages.
    spill: Vec<u8>,
}

fn be16(b: &[u8], at: usize) -> usize {
    u16::from_be_bytes([b[at], b[at + 1]]) as usize
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<'a> File<'a> {
    /// Check the 100-byte header: magic, page size, reserved bytes, format
    /// versions, payload fractions, text encoding, page count.
    pub(super) fn open(db: &'a [u8]) -> Result<Self, E> {
        if db.len() > MAX_FILE_BYTES {
            return Err(E::TooLarge {
                len: db.len(),
                max: MAX_FILE_BYTES,
            });
        }
        if db.len() < HEADER_BYTES || &db[..16] != MAGIC {
            return Err(E::NotSqlite);
        }
        let page_size = match be16(db, 16) {
            1 => 65536,
            n if (512..=32768).contains(&n) && n.is_power_of_two() => n,
            _ => {
                return Err(E::BadHeader(
                    "page size is not a power of two in 512..=65536",
                ));
            }
        };
        // 1: rollback journal, 2: WAL. The main file reads the same either
        // way (an image ships it checkpointed; a -wal file is not read).
        if !(1..=2).contains(&db[18]) || !(1..=2).contains(&db[19]) {
            return Err(E::BadHeader("unknown file format version"));
        }
        let usable = page_size - db[20] as usize;
        // SQLite refuses usable sizes under 480: cell size maths needs them.
        if usable < 480 {
            return Err(E::BadHeader("too many reserved bytes per page"));
        }
        // Fixed by the format; the overflow maths below assumes them.
        if db[21..24] != [64, 32, 32] {
            return Err(E::BadHeader("payload fractions are not 64/32/32"));
        }
        // 0 is an empty database's; names are only compared as UTF-8.
        if !matches!(be32(db, 56), 0 | 1) {
            return Err(E::BadHeader("text encoding is not UTF-8"));
        }
        let held = u32::try_from(db.len() / page_size).unwrap_or(u32::MAX);
        // The in-header size is valid when the change counter matches
        // "version-valid-for"; else SQLite sizes the database by the file.
        let announced = be32(db, 28);
        if announced != 0 && be32(db, 24) == be32(db, 92) && announced > held {
            return Err(E::Truncated { announced, held });
        }
        if held == 0 {
            return Err(E::Truncated {
                announced: announced.max(1),
                held,
            });
        }
        Ok(Self {
            db,
            page_size,
            usable,
            page_count: held,
            visited: vec![false; held as usize + 1],
            rows: 0,
            payload_bytes: 0,
            spill: Vec::new(),
        })
    }

    /// Mark `page` read: out of range or already read is an error.
    fn visit(&mut self, page: u32) -> Result<(), E> {
        if page == 0 || page > self.page_count {
            return Err(E::PageOutOfRange {
                page: page.into(),
                count: self.page_count,
            });
        }
        if std::mem::replace(&mut self.visited[page as usize], true) {
            return Err(E::PageRevisited { page });
        }
        Ok(())
    }

    /// The usable bytes of a page (offsets stay relative to the page start).
    fn page(&self, page: u32) -> &'a [u8] {
        let start = (page as usize - 1) * self.page_size;
        &self.db[start..start + self.usable]
    }

    /// Call `row` with the record payload of every leaf cell of the table
    /// b-tree rooted at `root`, in key order.
    pub(super) fn walk(
        &mut self,
        root: u32,
        row: &mut dyn FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.walk_page(root, 1, row)
    }

    fn walk_page(
        &mut self,
        page: u32,
        depth: usize,
        row: &mut dyn FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if depth > MAX_TREE_DEPTH {
            return Err(E::TooDeep {
                max: MAX_TREE_DEPTH,
            });
        }
        self.visit(page)?;
        let data = self.page(page);
        let hdr = if page == 1 { HEADER_BYTES } else { 0 };
        let corrupt = |what| E::Corrupt { page, what };
        let kind = data[hdr];
        let hdr_len = match kind {
            LEAF_TABLE => 8,
            INTERIOR_TABLE => 12,
            _ => return Err(E::BadPageType { page, kind }),
        };
        let cells = be16(data, hdr + 3);
        let first_cell = hdr + hdr_len + 2 * cells;
        if first_cell > data.len() {
            return Err(corrupt("cell pointer array past the page end"));
        }
        let cell_at = |i: usize| -> Result<usize, E> {
            let at = be16(data, hdr + hdr_len + 2 * i);
            if at < first_cell || at >= data.len() {
                return Err(corrupt("cell pointer outside the cell content area"));
            }
            Ok(at)
        };
        if kind == INTERIOR_TABLE {
            for i in 0..cells {
                let at = cell_at(i)?;
                if at + 4 > data.len() {
                    return Err(corrupt("child pointer past the page end"));
                }
                self.walk_page(be32(data, at), depth + 1, row)?;
            }
            return self.walk_page(be32(data, hdr + 8), depth + 1, row);
        }
        for i in 0..cells {
            self.rows += 1;
            if self.rows > MAX_ROWS {
                return Err(E::TooManyRows { max: MAX_ROWS });
            }
            let at = cell_at(i)?;
            let payload = self.leaf_payload(page, data, at)?;
            row(payload)?;
        }
        Ok(())
    }

    /// The payload of the leaf cell at `at`: borrowed when it fits the page,
    /// else assembled (into `spill`) from its overflow chain.
    fn leaf_payload(&mut self, page: u32, data: &'a [u8], at: usize) -> Result<&[u8], E> {
        let corrupt = |what| E::Corrupt { page, what };
        let (size, n) = varint(&data[at..]).ok_or(corrupt("cell payload size"))?;
        let (_rowid, m) = varint(&data[at + n..]).ok_or(corrupt("cell rowid"))?;
        if size > MAX_PAYLOAD_BYTES as u64 {
            return Err(E::PayloadTooLarge {
                size,
                max: MAX_PAYLOAD_BYTES,
            });
        }
        let size = size as usize;
        self.payload_bytes += size;
        if self.payload_bytes > self.db.len() {
            return Err(E::PayloadBudget { max: self.db.len() });
        }
        let start = at + n + m;
        let local = self.local_bytes(size);
        let end = start + local;
        if end > data.len() || (local < size && end + 4 > data.len()) {
            return Err(corrupt("cell payload past the page end"));
        }
        if local == size {
            return Ok(&data[start..end]);
        }
        let mut spill = std::mem::take(&mut self.spill);
        spill.clear();
        spill.reserve(size);
        spill.extend_from_slice(&data[start..end]);
        let mut next = be32(data, end);
        while spill.len() < size {
            if next == 0 {
                return Err(corrupt("overflow chain ends before the payload does"));
            }
            self.visit(next)?;
            let over = self.page(next);
            let take = (size - spill.len()).min(self.usable - 4);
            spill.extend_from_slice(&over[4..4 + take]);
            next = be32(over, 0);
        }
        self.spill = spill;
        Ok(&self.spill)
    }

    /// How much of a table-leaf payload of `size` bytes is kept on the page
    /// (the rest spills): the file format's rule for table leaves.
    fn local_bytes(&self, size: usize) -> usize {
        let u = self.usable;
        let max_local = u - 35;
        if size <= max_local {
            return size;
        }
        let min_local = (u - 12) * 32 / 255 - 23;
        let k = min_local + (size - min_local) % (u - 4);
        if k <= max_local { k } else { min_local }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(page_size: u16, pages: u32) -> Vec<u8> {
        let mut db = vec![0u8; page_size as usize * pages as usize];
        db[..16].copy_from_slice(MAGIC);
        db[16..18].copy_from_slice(&page_size.to_be_bytes());
        db[18] = 1;
        db[19] = 1;
        db[21..24].copy_from_slice(&[64, 32, 32]);
        db[56..60].copy_from_slice(&1u32.to_be_bytes());
        db[100] = LEAF_TABLE;
        db
    }

    #[test]
    fn header_checks_name_the_bad_field() {
        assert!(File::open(&header(4096, 1)).is_ok());
        let mut odd = header(4096, 1);
        odd[16..18].copy_from_slice(&3000u16.to_be_bytes());
        assert!(matches!(File::open(&odd), Err(E::BadHeader(w)) if w.contains("page size")));
        let mut reserved = header(512, 1);
        reserved[20] = 40;
        assert!(matches!(File::open(&reserved), Err(E::BadHeader(w)) if w.contains("reserved")));
        let mut utf16 = header(4096, 1);
        utf16[56..60].copy_from_slice(&2u32.to_be_bytes());
        assert!(matches!(File::open(&utf16), Err(E::BadHeader(w)) if w.contains("UTF-8")));
        let mut v3 = header(4096, 1);
        v3[18] = 3;
        assert!(matches!(File::open(&v3), Err(E::BadHeader(_))));
        assert_eq!(File::open(b"SQLite format 3").err(), Some(E::NotSqlite));
    }

    #[test]
    fn page_size_65536_is_encoded_as_1() {
        let mut db = header(512, 128); // 64 KiB of bytes
        db[16..18].copy_from_slice(&1u16.to_be_bytes());
        let f = File::open(&db).unwrap();
        assert_eq!((f.page_size, f.page_count), (65536, 1));
    }

    #[test]
    fn announced_pages_beyond_the_file_are_truncation() {
        let mut db = header(512, 2);
        db[28..32].copy_from_slice(&5u32.to_be_bytes());
        db[24..28].copy_from_slice(&7u32.to_be_bytes());
        db[92..96].copy_from_slice(&7u32.to_be_bytes());
        assert_eq!(
            File::open(&db).err(),
            Some(E::Truncated {
                announced: 5,
                held: 2
            })
        );
    }

    #[test]
    fn local_payload_follows_the_format_rule() {
        // 4096-byte pages: up to 4061 bytes stay local; beyond, the minimum
        // 489 plus the remainder modulo 4092, unless that exceeds 4061.
        let db = header(4096, 1);
        let f = File::open(&db).unwrap();
        assert_eq!(f.local_bytes(4061), 4061);
        assert_eq!(f.local_bytes(4062), 489);
        assert_eq!(f.local_bytes(10_000), 1816);
    }
}
