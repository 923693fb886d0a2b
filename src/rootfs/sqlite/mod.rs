//! A read-only reader of the SQLite file format, for databases that come from
//! images. It executes nothing: no SQL engine sees the file, so a schema
//! trick (a view over an endless recursive query, a trigger, a generated
//! column) cannot run. It reads one rowid table's b-tree and hands over one
//! BLOB column of each row; freelist, pointer-map, WAL and index b-trees are
//! never read.
//!
//! Every page is visited at most once (a page reached twice is an error, so a
//! cycle ends the read instead of looping), and rows, payload sizes, record
//! headers and tree depth are capped: the work is linear in the file, which is
//! itself capped at [`MAX_FILE_BYTES`] (measured worst case there).
//!
//! Errors name numbers and fixed words only, never text from the file.

mod btree;
mod record;
mod schema;

pub use schema::TableShape;

/// Largest file read: the probes' own cap on a package database. Measured
/// worst case for a hostile file of this size, 99,037 rows of one shared
/// 670-byte header, just inside the row and payload caps
/// (`tests/it/sqlite_reader.rs`, `hostile_64_mib_file_is_read_in_bounded_time`):
/// 111 ms through `rpm::packages` in the unoptimised test build, on the
/// shared 2-core machine at load 10.
pub const MAX_FILE_BYTES: usize = crate::rootfs::probes::MAX_DB_BYTES as usize;
/// Deepest table b-tree followed. SQLite itself gives up at 20 levels
/// (`BTCURSOR_MAX_DEPTH`); a 64 MiB file of 512-byte pages needs fewer than 10.
pub const MAX_TREE_DEPTH: usize = 20;
/// Most rows (leaf cells, schema rows included) read from one file. A full
/// Fedora workstation has about 3,000 packages; 100,000 leaves a wide margin
/// and bounds the callbacks a file of overlapping cells can cause.
pub const MAX_ROWS: usize = 100_000;
/// Largest BLOB handed over. An rpm header is kilobytes to a few hundred
/// kilobytes (kernel-devel, with ~20,000 files, is a few MiB); rpm before 4.16
/// refused header data over 16 MiB. Larger is not a header we need.
pub const MAX_BLOB_BYTES: usize = 16 << 20;
/// Largest record header (the serial-type list). The schema table has 5
/// columns and rpm's Packages 2, at most 9 bytes each; 256 leaves margin.
pub const MAX_RECORD_HEADER_BYTES: usize = 256;
/// Largest payload of one row: a capped BLOB plus its record header. Checked
/// before anything is allocated, whatever size a cell announces.
pub const MAX_PAYLOAD_BYTES: usize = MAX_BLOB_BYTES + MAX_RECORD_HEADER_BYTES;
/// Longest `CREATE TABLE` statement parsed. rpm's is 86 bytes.
pub const MAX_SCHEMA_SQL_BYTES: usize = 4096;
// Total payload bytes assembled are capped at the file's own length: each
// payload byte of an honest file is stored once, so only overlapping cells
// (a hostile file) could assemble more.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqliteError {
    #[error("file of {len} bytes is over the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("not an SQLite 3 database (bad magic)")]
    NotSqlite,
    #[error("bad database header: {0}")]
    BadHeader(&'static str),
    #[error("truncated: the header announces {announced} pages, the file holds {held}")]
    Truncated { announced: u32, held: u32 },
    #[error("page {page} is past the end of the file ({count} pages)")]
    PageOutOfRange { page: u64, count: u32 },
    #[error("page {page} is reached twice (a cycle or shared page)")]
    PageRevisited { page: u32 },
    #[error("table b-tree deeper than {max} levels")]
    TooDeep { max: usize },
    #[error("page {page} has type {kind:#04x}, not a table b-tree page")]
    BadPageType { page: u32, kind: u8 },
    #[error("page {page} is corrupt: {what}")]
    Corrupt { page: u32, what: &'static str },
    #[error("more than {max} rows")]
    TooManyRows { max: usize },
    #[error("a row announces {size} payload bytes, over the {max}-byte limit")]
    PayloadTooLarge { size: u64, max: usize },
    #[error("rows assemble more payload than the {max}-byte file holds (overlapping cells)")]
    PayloadBudget { max: usize },
    #[error("corrupt record: {0}")]
    Record(&'static str),
    #[error("no table named {0}")]
    NoTable(&'static str),
    #[error("{0} is a view, refusing to evaluate SQL from an image")]
    View(&'static str),
    #[error("{0} is a virtual table, refusing to evaluate SQL from an image")]
    VirtualTable(&'static str),
    #[error("{0} is a WITHOUT ROWID table (an index b-tree), not the table rpm writes")]
    WithoutRowid(&'static str),
    #[error("{table} is not the table rpm writes: {what}")]
    UnexpectedSchema {
        table: &'static str,
        what: &'static str,
    },
}

/// Calls `each` with the BLOB column of every row of the rowid table `shape`
/// describes, in rowid order. Rows whose column is not a BLOB (NULL, text,
/// a number) are skipped, as a typed read of the column would skip them.
pub fn for_each_blob(
    db: &[u8],
    shape: &TableShape,
    mut each: impl FnMut(&[u8]),
) -> Result<(), SqliteError> {
    let mut file = btree::File::open(db)?;
    let table = schema::find_table(&mut file, shape)?;
    file.walk(table.root, &mut |payload| {
        if let record::Value::Blob(b) = record::column(payload, table.blob_column)? {
            if b.len() > MAX_BLOB_BYTES {
                return Err(SqliteError::PayloadTooLarge {
                    size: b.len() as u64,
                    max: MAX_BLOB_BYTES,
                });
            }
            each(b);
        }
        Ok(())
    })
}
