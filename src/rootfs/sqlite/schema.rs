//! Finding one table in `sqlite_schema` (the table b-tree on page 1) and
//! checking, from its `CREATE TABLE` text, that it is a plain rowid table of
//! exactly the expected two columns. The text is tokenized, never run.

use super::btree::File;
use super::record::{self, Value};
use super::{MAX_SCHEMA_SQL_BYTES, SqliteError as E};

/// A rowid table of two columns: `<rowid> INTEGER PRIMARY KEY` (an alias of
/// the rowid, so stored as NULL in each record) and `<blob> BLOB`. rpm
/// writes `CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY
/// AUTOINCREMENT,blob BLOB NOT NULL)`.
#[derive(Debug, Clone, Copy)]
pub struct TableShape {
    pub name: &'static str,
    pub rowid: &'static str,
    pub blob: &'static str,
}

/// Where the table's rows are and which record column holds the blob.
pub(super) struct Table {
    pub root: u32,
    pub blob_column: usize,
}

/// What a schema row named like the table says, copied out of the page.
struct Entry {
    kind: Vec<u8>,
    root: i64,
    sql: Option<Vec<u8>>,
}

pub(super) fn find_table(file: &mut File<'_>, shape: &TableShape) -> Result<Table, E> {
    let mut named = Vec::new();
    // Columns: type, name, tbl_name, rootpage, sql.
    file.walk(1, &mut |payload| {
        let cols = record::columns(payload, 5)?;
        if !matches!(&cols[1], Value::Text(n) if *n == shape.name.as_bytes()) {
            return Ok(());
        }
        let kind = match &cols[0] {
            Value::Text(t) => t.to_vec(),
            _ => Vec::new(),
        };
        let root = match cols[3] {
            Value::Int(r) => r,
            _ => 0,
        };
        let sql = match &cols[4] {
            Value::Text(s) if s.len() <= MAX_SCHEMA_SQL_BYTES => Some(s.to_vec()),
            _ => None,
        };
        named.push(Entry { kind, root, sql });
        Ok(())
    })?;
    let name = shape.name;
    if named.iter().any(|e| e.kind == b"view") {
        return Err(E::View(name));
    }
    // A trigger or an index of that name does not count.
    let mut tables = named.into_iter().filter(|e| e.kind == b"table");
    let table = tables.next().ok_or(E::NoTable(name))?;
    if tables.next().is_some() {
        return Err(E::UnexpectedSchema {
            table: name,
            what: "two schema rows define it",
        });
    }
    let Some(sql) = table.sql else {
        return Err(E::UnexpectedSchema {
            table: name,
            what: "its CREATE TABLE text is missing or too long",
        });
    };
    let blob_column = blob_column(&sql, shape)?;
    if table.root == 0 {
        return Err(E::VirtualTable(name));
    }
    let root = u32::try_from(table.root).map_err(|_| E::Corrupt {
        page: 1,
        what: "schema root page is not a page number",
    })?;
    Ok(Table { root, blob_column })
}

#[derive(Debug, PartialEq)]
enum Tok {
    Word(Vec<u8>),
    Quoted(Vec<u8>),
    Punct(u8),
}

impl Tok {
    fn is(&self, keyword: &str) -> bool {
        matches!(self, Tok::Word(w) if w.eq_ignore_ascii_case(keyword.as_bytes()))
    }

    /// An identifier, bare or quoted.
    fn ident(&self) -> Option<&[u8]> {
        match self {
            Tok::Word(w) | Tok::Quoted(w) => Some(w),
            Tok::Punct(_) => None,
        }
    }

    fn names(&self, name: &str) -> bool {
        self.ident()
            .is_some_and(|i| i.eq_ignore_ascii_case(name.as_bytes()))
    }
}

/// SQL tokens: words, quoted identifiers ('', "", ``, []), punctuation;
/// whitespace and comments dropped. Linear in the (capped) text.
fn tokens(sql: &[u8]) -> Result<Vec<Tok>, &'static str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sql.len() {
        let c = sql[i];
        let rest = &sql[i..];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if rest.starts_with(b"--") {
            i += rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        } else if rest.starts_with(b"/*") {
            i += rest
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(rest.len(), |p| p + 2);
        } else if matches!(c, b'\'' | b'"' | b'`' | b'[') {
            let close = if c == b'[' { b']' } else { c };
            let mut text = Vec::new();
            let mut j = i + 1;
            loop {
                match sql.get(j) {
                    None => return Err("an unterminated quote"),
                    // A doubled quote is the quote itself ('' inside '...').
                    Some(&b) if b == close && c != b'[' && sql.get(j + 1) == Some(&close) => {
                        text.push(b);
                        j += 2;
                    }
                    Some(&b) if b == close => break,
                    Some(&b) => {
                        text.push(b);
                        j += 1;
                    }
                }
            }
            out.push(Tok::Quoted(text));
            i = j + 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
            let len = rest
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80))
                .unwrap_or(rest.len());
            out.push(Tok::Word(rest[..len].to_vec()));
            i += len;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    Ok(out)
}

/// Check `CREATE TABLE <name> (<rowid> INTEGER PRIMARY KEY ..., <blob> BLOB
/// ...)` and return the record column of the blob.
fn blob_column(sql: &[u8], shape: &TableShape) -> Result<usize, E> {
    let name = shape.name;
    let unexpected = |what| E::UnexpectedSchema { table: name, what };
    let toks = tokens(sql).map_err(unexpected)?;
    let mut t = toks.iter().peekable();
    if !t.next().is_some_and(|k| k.is("CREATE")) {
        return Err(unexpected("its schema text is not a CREATE statement"));
    }
    match t.next() {
        Some(k) if k.is("VIRTUAL") => return Err(E::VirtualTable(name)),
        Some(k) if k.is("VIEW") => return Err(E::View(name)),
        Some(k) if k.is("TABLE") => {}
        _ => return Err(unexpected("its schema text does not create a table")),
    }
    if t.peek().is_some_and(|k| k.is("IF")) {
        let words: Vec<_> = t.by_ref().take(3).collect();
        if !(words.len() == 3 && words[1].is("NOT") && words[2].is("EXISTS")) {
            return Err(unexpected("its CREATE TABLE text does not parse"));
        }
    }
    // The file's own schema row names the table; its text must agree.
    if t.next().and_then(Tok::ident) != Some(name.as_bytes()) {
        return Err(unexpected("its CREATE TABLE text names another table"));
    }
    if t.next() != Some(&Tok::Punct(b'(')) {
        return Err(unexpected("its CREATE TABLE text has no column list"));
    }
    let mut columns: Vec<Vec<&Tok>> = vec![Vec::new()];
    loop {
        match t.next() {
            None => return Err(unexpected("its column list is not closed")),
            Some(Tok::Punct(b')')) => break,
            Some(Tok::Punct(b',')) => columns.push(Vec::new()),
            Some(tok) => columns.last_mut().expect("never empty").push(tok),
        }
    }
    if let Some(after) = t.next() {
        return Err(if after.is("WITHOUT") {
            E::WithoutRowid(name)
        } else {
            unexpected("table options after the column list")
        });
    }
    if columns.len() != 2 {
        return Err(unexpected("it does not have exactly two columns"));
    }
    let column = |col: &str, ty: &str, allowed: &[&str]| {
        columns.iter().position(|def| {
            def.len() >= 2
                && def[0].names(col)
                && def[1].names(ty)
                && def[2..].iter().all(|w| allowed.iter().any(|a| w.is(a)))
        })
    };
    // PRIMARY KEY on an INTEGER column makes it the rowid (DESC would not:
    // it is refused with every other word).
    let rowid = column(
        shape.rowid,
        "INTEGER",
        &["PRIMARY", "KEY", "AUTOINCREMENT", "ASC", "NOT", "NULL"],
    )
    .filter(|&i| columns[i].iter().any(|w| w.is("PRIMARY")));
    let blob = column(shape.blob, "BLOB", &["NOT", "NULL"]);
    match (rowid, blob) {
        (Some(_), Some(b)) => Ok(b),
        _ => Err(unexpected(
            "its columns are not an INTEGER PRIMARY KEY and a BLOB",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RPM: TableShape = TableShape {
        name: "Packages",
        rowid: "hnum",
        blob: "blob",
    };

    fn check(sql: &str) -> Result<usize, E> {
        blob_column(sql.as_bytes(), &RPM)
    }

    #[test]
    fn what_rpm_and_sqlite_write_is_accepted() {
        // As rpm 4.18 leaves it in sqlite_schema.
        assert_eq!(
            check(
                "CREATE TABLE 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT,blob BLOB NOT NULL)"
            ),
            Ok(1)
        );
        assert_eq!(
            check(
                "create table if not exists \"Packages\" (\n  [hnum] integer primary key, -- id\n  `blob` blob /* header */)"
            ),
            Ok(1)
        );
        assert_eq!(
            check("CREATE TABLE Packages (blob BLOB, hnum INTEGER PRIMARY KEY)"),
            Ok(0)
        );
    }

    #[test]
    fn anything_else_is_refused_without_echoing_it() {
        let refused = [
            "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, blob BLOB) WITHOUT ROWID",
            "CREATE VIRTUAL TABLE Packages USING fts5(blob)",
            "CREATE VIEW Packages AS SELECT 1",
            "CREATE TABLE Other (hnum INTEGER PRIMARY KEY, blob BLOB)",
            "CREATE TABLE Packages (hnum INT PRIMARY KEY, blob BLOB)",
            "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY DESC, blob BLOB)",
            "CREATE TABLE Packages (hnum INTEGER, blob BLOB)",
            "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, blob BLOB GENERATED ALWAYS AS (x'00'))",
            "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, blob BLOB DEFAULT (randomblob(9)))",
            "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, blob BLOB, extra)",
            "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY, blob BLOB",
            "CREATE TABLE 'Packages (hnum INTEGER PRIMARY KEY, blob BLOB)",
            "CREATE TABLE Packages AS SELECT 1 AS hnum, x'00' AS blob",
        ];
        for sql in refused {
            let e = check(sql).expect_err(sql);
            assert!(!e.to_string().contains("SELECT"), "{sql}: {e}");
        }
        assert_eq!(check(refused[0]), Err(E::WithoutRowid("Packages")));
        assert_eq!(check(refused[1]), Err(E::VirtualTable("Packages")));
        assert_eq!(check(refused[2]), Err(E::View("Packages")));
    }
}
