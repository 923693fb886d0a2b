//! nfguard's SQLite file-format reader (`rootfs::sqlite`) against databases
//! written by real SQLite (rusqlite, bundled): multi-level b-trees, overflow
//! chains, and hostile files (schema tricks, cycles, truncation, absurd
//! sizes, random corruption). Nothing here runs the database's SQL through
//! nfguard; rusqlite only writes the files.

use nfguard::rootfs::probes::rpm::{self, PACKAGES_TABLE, TAGS, build_header};
use nfguard::rootfs::sqlite::{
    MAX_FILE_BYTES, MAX_PAYLOAD_BYTES, MAX_ROWS, MAX_TREE_DEPTH, SqliteError as E, for_each_blob,
};
use proptest::prelude::*;
use rusqlite::Connection;
use std::time::{Duration, Instant};

const RPM_SCHEMA: &str =
    "CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT,blob BLOB NOT NULL)";

/// A database file as SQLite wrote it, and where `Packages` is rooted.
struct Db {
    bytes: Vec<u8>,
    root: u32,
}

/// Run `schema` on an empty database of `page_size`-byte pages, insert
/// `blobs` into `Packages` when it is a table, and serialize the file.
fn build(page_size: u32, schema: &str, blobs: &[Vec<u8>]) -> Db {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(&format!("PRAGMA page_size={page_size}; {schema}"))
        .unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for b in blobs {
        tx.execute("INSERT INTO Packages (blob) VALUES (?1)", [b])
            .unwrap();
    }
    tx.commit().unwrap();
    let root: i64 = conn
        .query_row(
            "SELECT coalesce(max(rootpage), 0) FROM sqlite_schema WHERE name = 'Packages'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let bytes = conn.serialize("main").unwrap().to_vec();
    assert_eq!(page_size_of(&bytes), page_size as usize);
    Db {
        bytes,
        root: root as u32,
    }
}

fn rpm_db(page_size: u32, blobs: &[Vec<u8>]) -> Db {
    build(page_size, RPM_SCHEMA, blobs)
}

fn header_blob(name: &str) -> Vec<u8> {
    build_header(&[(TAGS.0, name), (TAGS.1, "1.8.10"), (TAGS.2, "11.el9")])
}

/// Deterministic bytes that do not repeat within a blob (so a page's content
/// can be located in it).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn blobs(db: &[u8]) -> Result<Vec<Vec<u8>>, E> {
    let mut out = Vec::new();
    for_each_blob(db, &PACKAGES_TABLE, |b| out.push(b.to_vec()))?;
    Ok(out)
}

// ---- Page surgery on real files ----

fn be16(b: &[u8], at: usize) -> usize {
    u16::from_be_bytes([b[at], b[at + 1]]) as usize
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn page_size_of(db: &[u8]) -> usize {
    match be16(db, 16) {
        1 => 65536,
        n => n,
    }
}

fn page_count(db: &[u8]) -> u32 {
    (db.len() / page_size_of(db)) as u32
}

/// Byte offset of page `n`'s b-tree header.
fn btree_header(db: &[u8], n: u32) -> usize {
    (n as usize - 1) * page_size_of(db) + if n == 1 { 100 } else { 0 }
}

fn is_interior(db: &[u8], n: u32) -> bool {
    db[btree_header(db, n)] == 0x05
}

/// Offset of an interior page's right-most child pointer.
fn right_pointer(db: &[u8], n: u32) -> usize {
    assert!(is_interior(db, n), "page {n} is not interior");
    btree_header(db, n) + 8
}

/// Grow the file by `n` zero pages, keeping the header's page count right.
fn append_pages(db: &mut Vec<u8>, n: u32) -> u32 {
    let first = page_count(db) + 1;
    db.resize(db.len() + n as usize * page_size_of(db), 0);
    let count = page_count(db);
    put32(db, 28, count);
    first
}

fn varint(mut v: u64) -> Vec<u8> {
    if v > 0x00ff_ffff_ffff_ffff {
        let mut out: Vec<u8> = (0..8)
            .rev()
            .map(|i| 0x80 | (v >> (8 + 7 * i)) as u8)
            .collect();
        out.push(v as u8);
        return out;
    }
    let mut out = vec![(v & 0x7f) as u8];
    v >>= 7;
    while v > 0 {
        out.insert(0, 0x80 | (v & 0x7f) as u8);
        v >>= 7;
    }
    out
}

/// A Packages record (hnum stored as NULL: it is the rowid) holding `blob`.
fn record(blob: &[u8]) -> Vec<u8> {
    let serial = varint(blob.len() as u64 * 2 + 12);
    let mut r = vec![(2 + serial.len()) as u8, 0];
    r.extend_from_slice(&serial);
    r.extend_from_slice(blob);
    r
}

/// A table-leaf cell whose payload fits the page.
fn leaf_cell(rowid: u64, payload: &[u8]) -> Vec<u8> {
    let mut c = varint(payload.len() as u64);
    c.extend(varint(rowid));
    c.extend_from_slice(payload);
    c
}

/// Rewrite page `n` as a table leaf of `count` cell pointers that all point
/// at one copy of `cell` (overlapping cells: only a hostile file has them).
fn write_shared_leaf(db: &mut [u8], n: u32, cell: &[u8], count: usize) {
    let ps = page_size_of(db);
    let hdr = btree_header(db, n);
    let page_end = n as usize * ps;
    let at = page_end - cell.len();
    assert!(hdr + 8 + 2 * count <= at, "cell does not fit");
    db[at..page_end].copy_from_slice(cell);
    let rel = (at - (n as usize - 1) * ps) as u16;
    db[hdr..hdr + 8].copy_from_slice(&[0x0D, 0, 0, 0, 0, 0, 0, 0]);
    db[hdr + 3..hdr + 5].copy_from_slice(&(count as u16).to_be_bytes());
    db[hdr + 5..hdr + 7].copy_from_slice(&rel.to_be_bytes());
    for i in 0..count {
        let p = hdr + 8 + 2 * i;
        db[p..p + 2].copy_from_slice(&rel.to_be_bytes());
    }
}

/// Rewrite page `n` as an interior table page over `children`, the last
/// one as the right-most pointer.
fn write_interior(db: &mut [u8], n: u32, children: &[u32]) {
    let ps = page_size_of(db);
    let hdr = btree_header(db, n);
    let base = (n as usize - 1) * ps;
    let (last, cells) = children.split_last().unwrap();
    db[hdr..hdr + 12].fill(0);
    db[hdr] = 0x05;
    db[hdr + 3..hdr + 5].copy_from_slice(&(cells.len() as u16).to_be_bytes());
    put32(db, hdr + 8, *last);
    let mut at = base + ps;
    for (i, child) in cells.iter().enumerate() {
        let mut cell = child.to_be_bytes().to_vec();
        cell.extend(varint(i as u64 + 1));
        at -= cell.len();
        db[at..at + cell.len()].copy_from_slice(&cell);
        let p = hdr + 12 + 2 * i;
        db[p..p + 2].copy_from_slice(&((at - base) as u16).to_be_bytes());
    }
    assert!(hdr + 12 + 2 * cells.len() <= at, "interior page overflows");
    db[hdr + 5..hdr + 7].copy_from_slice(&((at - base) as u16).to_be_bytes());
}

/// Pages holding a slice of `blob` after their 4-byte next pointer: the
/// overflow pages of the row that stores it, with their next pointers.
fn overflow_pages(db: &[u8], blob: &[u8]) -> Vec<(u32, u32)> {
    let ps = page_size_of(db);
    (2..=page_count(db))
        .filter(|&n| {
            let at = (n as usize - 1) * ps + 4;
            let probe = &db[at..at + 32];
            blob.windows(32).any(|w| w == probe)
        })
        .map(|n| (n, be32(db, (n as usize - 1) * ps)))
        .collect()
}

// ---- Real databases read back ----

#[test]
fn multi_level_btree_of_thousands_of_rows_reads_every_row_in_order() {
    let want: Vec<Vec<u8>> = (0..5000)
        .map(|i| header_blob(&format!("pkg-{i}")))
        .collect();
    let db = rpm_db(512, &want);
    // Three levels at least: the root and its right-most child are interior.
    assert!(is_interior(&db.bytes, db.root));
    let child = be32(&db.bytes, right_pointer(&db.bytes, db.root));
    assert!(is_interior(&db.bytes, child), "only two levels");
    assert_eq!(blobs(&db.bytes).unwrap(), want);
    let pkgs = rpm::packages(&db.bytes).unwrap();
    assert_eq!(pkgs.len(), 5000);
    assert_eq!(pkgs[4999].name, "pkg-4999");
    assert_eq!(pkgs[0].release, "11.el9");
}

#[test]
fn overflow_chains_are_followed_for_blobs_larger_than_a_page() {
    let sizes = [479usize, 480, 600, 5_000, 70_000, 300_000];
    let want: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| noise(n, i as u64))
        .collect();
    for page_size in [512, 4096, 65536] {
        let db = rpm_db(page_size, &want);
        assert_eq!(blobs(&db.bytes).unwrap(), want, "page size {page_size}");
    }
    // An rpm header as large as big packages' (a few MiB of file lists),
    // padded after the tags it needs.
    let mut big = header_blob("kernel-devel");
    big.extend(noise(3 << 20, 9));
    let db = rpm_db(4096, std::slice::from_ref(&big));
    let pkgs = rpm::packages(&db.bytes).unwrap();
    assert_eq!(pkgs[0].name, "kernel-devel");
}

#[test]
fn schema_spanning_several_pages_and_reserved_bytes_are_read() {
    // rpm's ~50 schema rows fill several 512-byte pages: sqlite_schema is
    // itself a multi-level b-tree. Reserved bytes shrink the usable size.
    let mut schema = String::from(RPM_SCHEMA);
    for i in 0..60 {
        schema.push_str(&format!(
            "; CREATE TABLE 'Index{i}' (key 'TEXT' NOT NULL, hnum INTEGER NOT NULL, idx INTEGER NOT NULL); \
             CREATE INDEX 'Index{i}_key_idx' ON 'Index{i}'(key ASC)"
        ));
    }
    let want: Vec<Vec<u8>> = (0..50).map(|i| noise(700 + i * 13, i as u64)).collect();
    let db = build(512, &schema, &want);
    assert!(is_interior(&db.bytes, 1), "schema fits one page");
    assert_eq!(blobs(&db.bytes).unwrap(), want);

    let reserved = {
        // Reserved bytes are fixed when the file is created: start SQLite
        // from an empty one-page file that reserves 32 bytes per page (as
        // encryption extensions do), then let it write the tables and rows.
        let mut d = vec![0u8; 1024];
        d[..16].copy_from_slice(b"SQLite format 3\0");
        d[16..18].copy_from_slice(&1024u16.to_be_bytes());
        d[18..24].copy_from_slice(&[1, 1, 32, 64, 32, 32]);
        put32(&mut d, 24, 1); // change counter
        put32(&mut d, 28, 1); // pages
        put32(&mut d, 44, 4); // schema format
        put32(&mut d, 56, 1); // UTF-8
        put32(&mut d, 92, 1); // version-valid-for
        d[100] = 0x0D; // page 1: an empty table leaf
        d[105..107].copy_from_slice(&(1024u16 - 32).to_be_bytes());
        let mut conn = Connection::open_in_memory().unwrap();
        conn.deserialize_read_exact("main", &d[..], d.len(), false)
            .unwrap();
        conn.execute_batch(RPM_SCHEMA).unwrap();
        for b in &want {
            conn.execute("INSERT INTO Packages (blob) VALUES (?1)", [b])
                .unwrap();
        }
        conn.serialize("main").unwrap().to_vec()
    };
    assert_eq!(reserved[20], 32);
    assert_eq!(blobs(&reserved).unwrap(), want);
}

// ---- Schema tricks: refused before any page of the table is read ----

const ENDLESS_VIEW: &str = "CREATE VIEW Packages AS WITH RECURSIVE r(n) AS \
    (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n AS hnum, zeroblob(16) AS blob FROM r";

#[test]
fn endless_recursive_view_is_refused_at_once() {
    let db = build(4096, ENDLESS_VIEW, &[]);
    let started = Instant::now();
    let e = rpm::packages(&db.bytes).unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        e.to_string(),
        "not a usable sqlite rpm database: Packages is a view, refusing to evaluate SQL from an image"
    );
    eprintln!("endless view refused in {took:?}");
    assert!(took < Duration::from_millis(50), "took {took:?}");
}

#[test]
fn view_disguised_as_a_table_row_is_still_a_view() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(&format!(
        "{ENDLESS_VIEW}; PRAGMA writable_schema = ON; \
         UPDATE sqlite_schema SET type = 'table' WHERE name = 'Packages'"
    ))
    .unwrap();
    let db = conn.serialize("main").unwrap().to_vec();
    assert_eq!(blobs(&db), Err(E::View("Packages")));
}

#[test]
fn without_rowid_virtual_and_generated_tables_are_refused() {
    let cases = [
        (
            "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, blob BLOB NOT NULL) WITHOUT ROWID",
            E::WithoutRowid("Packages"),
        ),
        (
            "CREATE VIRTUAL TABLE Packages USING fts5(blob)",
            E::VirtualTable("Packages"),
        ),
    ];
    for (schema, want) in cases {
        let db = build(4096, schema, &[]);
        assert_eq!(blobs(&db.bytes), Err(want), "{schema}");
    }
    for schema in [
        "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, blob BLOB NOT NULL, \
         size INTEGER GENERATED ALWAYS AS (length(blob)) STORED)",
        "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, \
         blob BLOB GENERATED ALWAYS AS (zeroblob(1000000000)) VIRTUAL)",
        "CREATE TABLE Packages (hnum INT PRIMARY KEY, blob BLOB)",
    ] {
        let db = build(4096, schema, &[]);
        let e = blobs(&db.bytes).unwrap_err();
        assert!(matches!(e, E::UnexpectedSchema { .. }), "{schema}: {e:?}");
        assert!(!e.to_string().contains("zeroblob"), "echoes the file: {e}");
    }
}

#[test]
fn a_trigger_or_another_table_is_no_packages_table() {
    for schema in [
        "CREATE TABLE t (x); CREATE TRIGGER Packages AFTER INSERT ON t BEGIN SELECT 1; END",
        "CREATE TABLE packages (hnum INTEGER PRIMARY KEY, blob BLOB NOT NULL)",
        "CREATE TABLE Other (hnum INTEGER PRIMARY KEY, blob BLOB NOT NULL)",
    ] {
        let db = build(4096, schema, &[]);
        assert_eq!(blobs(&db.bytes), Err(E::NoTable("Packages")), "{schema}");
    }
}

#[test]
fn triggers_on_a_real_packages_table_are_ignored() {
    // Nothing is executed, so a trigger cannot matter: rows still read.
    let want = vec![header_blob("iptables-nft")];
    let db = rpm_db(4096, &want);
    let mut conn = Connection::open_in_memory().unwrap();
    conn.deserialize_read_exact("main", &db.bytes[..], db.bytes.len(), false)
        .unwrap();
    conn.execute_batch("CREATE TRIGGER Packages_t AFTER INSERT ON Packages BEGIN SELECT 1; END")
        .unwrap();
    let with_trigger = conn.serialize("main").unwrap().to_vec();
    assert_eq!(blobs(&with_trigger).unwrap(), want);
}

// ---- Structural attacks: patched bytes in real files ----

fn three_levels() -> Db {
    let rows: Vec<Vec<u8>> = (0..3000).map(|i| header_blob(&format!("p{i}"))).collect();
    rpm_db(512, &rows)
}

#[test]
fn child_pointer_cycles_are_errors_not_loops() {
    let db = three_levels();
    let root = db.root;
    let child = be32(&db.bytes, right_pointer(&db.bytes, root));

    // The root points at itself.
    let mut d = db.bytes.clone();
    let at = right_pointer(&d, root);
    put32(&mut d, at, root);
    assert_eq!(blobs(&d), Err(E::PageRevisited { page: root }));

    // A grandchild link back to the root (an ancestor).
    let mut d = db.bytes.clone();
    let at = right_pointer(&d, child);
    put32(&mut d, at, root);
    assert_eq!(blobs(&d), Err(E::PageRevisited { page: root }));

    // Into the schema's page 1.
    let mut d = db.bytes.clone();
    let at = right_pointer(&d, child);
    put32(&mut d, at, 1);
    assert_eq!(blobs(&d), Err(E::PageRevisited { page: 1 }));

    // Two parents sharing one child.
    let mut d = db.bytes.clone();
    let first_cell = btree_header(&d, root) + 12;
    let first_child_at = (root as usize - 1) * 512 + be16(&d, first_cell);
    let first_child = be32(&d, first_child_at);
    let at = right_pointer(&d, root);
    put32(&mut d, at, first_child);
    assert_eq!(blobs(&d), Err(E::PageRevisited { page: first_child }));
}

#[test]
fn page_numbers_past_the_end_and_zero_are_errors() {
    let db = three_levels();
    let count = page_count(&db.bytes);
    for bad in [0, count + 1, count + 5, u32::MAX] {
        let mut d = db.bytes.clone();
        let at = right_pointer(&d, db.root);
        put32(&mut d, at, bad);
        assert_eq!(
            blobs(&d),
            Err(E::PageOutOfRange {
                page: bad.into(),
                count
            })
        );
    }
}

#[test]
fn a_chain_deeper_than_the_depth_cap_is_refused() {
    let mut db = rpm_db(512, &[header_blob("a")]);
    let extra = MAX_TREE_DEPTH as u32 + 5;
    let first = append_pages(&mut db.bytes, extra);
    // root -> first -> first+1 -> ... every page interior with no cells.
    let mut prev = db.root;
    for n in first..first + extra {
        write_interior(&mut db.bytes, prev, &[n]);
        prev = n;
    }
    assert_eq!(
        blobs(&db.bytes),
        Err(E::TooDeep {
            max: MAX_TREE_DEPTH
        })
    );
}

#[test]
fn overflow_chain_cycles_and_bad_links_are_errors() {
    let blob = noise(5000, 42);
    let db = rpm_db(512, std::slice::from_ref(&blob));
    let chain = overflow_pages(&db.bytes, &blob);
    assert!(chain.len() >= 9, "{chain:?}");
    let ps = 512usize;
    let next_at = |n: u32| (n as usize - 1) * ps;
    let (x, y) = chain.iter().copied().find(|&(_, next)| next != 0).unwrap();

    // A page that points at itself.
    let mut d = db.bytes.clone();
    put32(&mut d, next_at(x), x);
    assert_eq!(blobs(&d), Err(E::PageRevisited { page: x }));

    // Two pages pointing at each other.
    let mut d = db.bytes.clone();
    put32(&mut d, next_at(y), x);
    assert_eq!(blobs(&d), Err(E::PageRevisited { page: x }));

    // Past the end, and a chain that stops early.
    let mut d = db.bytes.clone();
    put32(&mut d, next_at(x), 99_999);
    assert!(matches!(
        blobs(&d),
        Err(E::PageOutOfRange { page: 99_999, .. })
    ));
    let mut d = db.bytes.clone();
    put32(&mut d, next_at(x), 0);
    assert!(
        matches!(blobs(&d), Err(E::Corrupt { .. })),
        "{:?}",
        blobs(&d)
    );
}

#[test]
fn truncated_files_are_errors() {
    let db = three_levels();
    let len = db.bytes.len();
    for cut in [len - 512, len - 3 * 512, len / 2 + 17, 4096, 600] {
        let e = blobs(&db.bytes[..cut]).unwrap_err();
        assert!(matches!(e, E::Truncated { .. }), "cut at {cut}: {e:?}");
    }
    for cut in [0, 15, 99, 100, 511] {
        assert!(blobs(&db.bytes[..cut]).is_err(), "cut at {cut}");
    }
    assert!(matches!(rpm::packages(&[]), Err(rpm::RpmError::Empty)));
}

#[test]
fn absurd_payload_and_record_header_sizes_are_refused() {
    let mut db = rpm_db(4096, &[header_blob("a")]);
    let root = db.root;
    // 2^64-1 bytes announced (a 9-byte varint).
    let mut cell = varint(u64::MAX);
    cell.extend([1, 0, 0]);
    write_shared_leaf(&mut db.bytes, root, &cell, 1);
    assert_eq!(
        blobs(&db.bytes),
        Err(E::PayloadTooLarge {
            size: u64::MAX,
            max: MAX_PAYLOAD_BYTES
        })
    );
    // Just over the cap: refused before any allocation or chain walk.
    let mut cell = varint(MAX_PAYLOAD_BYTES as u64 + 1);
    cell.extend([1, 0, 0, 0, 0, 0]);
    write_shared_leaf(&mut db.bytes, root, &cell, 1);
    assert!(matches!(blobs(&db.bytes), Err(E::PayloadTooLarge { .. })));
    // A record header of 300 bytes.
    let mut payload = varint(300);
    payload.resize(310, 0);
    write_shared_leaf(&mut db.bytes, root, &leaf_cell(1, &payload), 1);
    assert!(matches!(blobs(&db.bytes), Err(E::Record(_))));
    // A blob announced longer than its record.
    let mut payload = record(&[7; 40]);
    payload.truncate(30);
    write_shared_leaf(&mut db.bytes, root, &leaf_cell(1, &payload), 1);
    assert!(matches!(blobs(&db.bytes), Err(E::Record(_))));
}

#[test]
fn overlapping_cells_cannot_assemble_more_than_the_file() {
    let mut db = rpm_db(65536, &[]);
    let root = db.root;
    // 15,000 pointers at one 30,000-byte cell: 450 MB if each were handed
    // over; the read stops once the file's own 192 KiB are assembled.
    let cell = leaf_cell(1, &record(&noise(30_000, 1)));
    write_shared_leaf(&mut db.bytes, root, &cell, 15_000);
    assert_eq!(
        blobs(&db.bytes),
        Err(E::PayloadBudget {
            max: db.bytes.len()
        })
    );
    // Tiny cells instead: the row cap ends it.
    let mut db = rpm_db(65536, &[]);
    let first = append_pages(&mut db.bytes, 8);
    let leaves: Vec<u32> = (first..first + 8).collect();
    write_interior(&mut db.bytes, root, &leaves);
    for &leaf in &leaves {
        write_shared_leaf(&mut db.bytes, leaf, &leaf_cell(1, &record(&[])), 30_000);
    }
    assert_eq!(blobs(&db.bytes), Err(E::TooManyRows { max: MAX_ROWS }));
}

/// 64 MiB, the largest file read (65536-byte pages): an interior root over
/// 1,021 leaves of 97 pointers each at one 670-byte rpm header of 40
/// non-matching tags: 99,037 rows and 63.7 MiB of payload, just inside the
/// row and payload caps: the most work a file can ask for. And the same
/// file with leaves of 20,000 pointers, stopped by the payload cap.
#[test]
fn hostile_64_mib_file_is_read_in_bounded_time() {
    let mut db = rpm_db(65536, &[]);
    let root = db.root;
    let first = append_pages(&mut db.bytes, 0);
    let total = (MAX_FILE_BYTES / 65536) as u32;
    let missing = total - page_count(&db.bytes);
    append_pages(&mut db.bytes, missing);
    assert_eq!(db.bytes.len(), MAX_FILE_BYTES);
    let leaves: Vec<u32> = (first..=total).collect();
    write_interior(&mut db.bytes, root, &leaves);
    let tags: Vec<(u32, String)> = (0..40).map(|i| (5000 + i, format!("v{i:03}"))).collect();
    let tags: Vec<(u32, &str)> = tags.iter().map(|(t, v)| (*t, v.as_str())).collect();
    let mut header = build_header(&tags);
    header.resize(670, 0);
    let cell = leaf_cell(1, &record(&header));
    let per_leaf = 97;
    for &leaf in &leaves {
        write_shared_leaf(&mut db.bytes, leaf, &cell, per_leaf);
    }
    let rows = leaves.len() * per_leaf;
    assert!(rows <= MAX_ROWS, "{rows}");

    let started = Instant::now();
    let pkgs = rpm::packages(&db.bytes).unwrap();
    let within_caps = started.elapsed();
    assert!(pkgs.is_empty());
    let mut n = 0;
    for_each_blob(&db.bytes, &PACKAGES_TABLE, |_| n += 1).unwrap();
    assert_eq!(n, rows);

    for &leaf in &leaves {
        write_shared_leaf(&mut db.bytes, leaf, &cell, 20_000);
    }
    let started = Instant::now();
    let e = rpm::packages(&db.bytes).unwrap_err();
    let over_caps = started.elapsed();
    assert!(e.to_string().contains("overlapping cells"), "{e}");

    eprintln!(
        "64 MiB hostile rpmdb: {rows} rows within the caps in {within_caps:?}; \
         overlapping cells stopped in {over_caps:?}"
    );
    // Generous for an unoptimised test build on a loaded 2-core machine.
    assert!(within_caps < Duration::from_secs(5), "{within_caps:?}");
    assert!(over_caps < Duration::from_secs(5), "{over_caps:?}");
}

// ---- Random corruption of a valid file ----

fn valid_base() -> Vec<u8> {
    let mut rows: Vec<Vec<u8>> = (0..400).map(|i| header_blob(&format!("p{i}"))).collect();
    for i in 0..8 {
        rows.insert(i * 50, noise(1500 + i * 700, i as u64));
    }
    rpm_db(512, &rows).bytes
}

thread_local! {
    static BASE: Vec<u8> = valid_base();
}

/// Read a (corrupted) file: a result or an error, never a panic, and never
/// more rows or bytes than the caps and the file allow, in bounded time.
fn bounded_read(db: &[u8]) -> Result<(), TestCaseError> {
    let started = Instant::now();
    let (mut rows, mut bytes) = (0usize, 0usize);
    let read = for_each_blob(db, &PACKAGES_TABLE, |b| {
        rows += 1;
        bytes += b.len();
    });
    let took = started.elapsed();
    prop_assert!(rows <= MAX_ROWS);
    prop_assert!(
        bytes <= db.len(),
        "{bytes} bytes from a {}-byte file",
        db.len()
    );
    prop_assert!(took < Duration::from_secs(1), "{took:?} ({read:?})");
    // The probe's path too.
    let _ = rpm::packages(db);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_byte_mutations_never_panic_and_stay_bounded(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..24),
    ) {
        let mut db = BASE.with(|b| b.clone());
        for (at, byte) in &edits {
            let i = at.index(db.len());
            db[i] = *byte;
        }
        bounded_read(&db)?;
    }

    /// Aimed at structure: the first 24 bytes of pages (b-tree headers,
    /// right-most and first cell pointers, overflow next pointers) and the
    /// file header.
    #[test]
    fn page_header_and_pointer_mutations_never_panic_and_stay_bounded(
        edits in proptest::collection::vec(
            (any::<prop::sample::Index>(), 0usize..24, any::<u8>()), 1..8),
    ) {
        let mut db = BASE.with(|b| b.clone());
        let pages = db.len() / 512;
        for (page, off, byte) in &edits {
            let p = page.index(pages + 1);
            // Index `pages` stands for the file header's bytes 16..40.
            let at = if p == pages { 16 + off } else { p * 512 + if p == 0 { 100 } else { 0 } + off };
            db[at] = *byte;
        }
        bounded_read(&db)?;
    }
}
