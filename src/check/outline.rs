//! A positioned outline of manifest text: mappings, sequences and scalars
//! with their 1-based line numbers. serde_yaml 0.9 keeps no spans, so the CI
//! formats (`-o github|sarif|junit`) read the text a second time with this
//! small scanner to say *where* an object and its containers are.
//!
//! It covers what manifests use: block mappings and sequences (including
//! `key:\n- item` at the key's indentation and compact `- name: x` items),
//! flow collections (so JSON too), quoted keys and scalars, comments,
//! anchors and tags, block scalars (skipped), and multi-document streams
//! numbered as serde_yaml numbers them. It never fails: anything it cannot
//! read stays out of the outline, and callers fall back to coarser lines.

/// Deeper nesting than this is not outlined (the loader has its own limit).
const MAX_DEPTH: usize = 128;

/// A node: the line it starts on and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Outline {
    pub line: usize,
    pub shape: Shape,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Map(Vec<Entry>),
    Seq(Vec<Outline>),
    /// The scalar's text, quotes removed; empty for null and block scalars.
    Scalar(String),
}

/// One mapping entry: the key, the line the key is on, the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub line: usize,
    pub value: Outline,
}

impl Outline {
    fn null(line: usize) -> Self {
        Outline {
            line,
            shape: Shape::Scalar(String::new()),
        }
    }

    /// The entry under `key` when this is a mapping.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        match &self.shape {
            Shape::Map(entries) => entries.iter().find(|e| e.key == key),
            _ => None,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Outline> {
        self.entry(key).map(|e| &e.value)
    }

    /// The items when this is a sequence, else none.
    pub fn items(&self) -> &[Outline] {
        match &self.shape {
            Shape::Seq(items) => items,
            _ => &[],
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.shape {
            Shape::Scalar(s) => Some(s),
            _ => None,
        }
    }
}

/// One outline per YAML document, numbered as serde_yaml numbers documents
/// (empty ones included, with only a line).
pub fn yaml_documents(text: &str) -> Vec<Outline> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let raw: Vec<&str> = text.lines().collect();
    split_documents(&raw)
        .into_iter()
        .map(|range| {
            let first = range.start + 1;
            let mut block = Block {
                raw: &raw,
                lines: block_lines(&raw, range),
                pos: 0,
            };
            block.node(0, 0).unwrap_or_else(|| Outline::null(first))
        })
        .collect()
}

/// The JSON text's value; a top-level array gives one outline per item, as
/// the loader makes one document of each.
pub fn json_documents(text: &str) -> Vec<Outline> {
    let raw: Vec<&str> = text.lines().collect();
    let mut flow = Flow {
        raw: &raw,
        line: 0,
        col: 0,
    };
    let root = flow.value(0);
    match root.shape {
        Shape::Seq(items) => items,
        _ => vec![root],
    }
}

// ---- documents and block lines ----

/// `---` or `...` alone or followed by white space.
fn is_marker(line: &str, marker: &str) -> bool {
    line.starts_with(marker) && matches!(line.as_bytes().get(3), None | Some(b' ' | b'\t'))
}

fn is_content(line: &str) -> bool {
    let t = line.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

/// Line ranges of the documents: each `---` opens one, `...` closes one,
/// and content outside any opens one implicitly (directives do not).
fn split_documents(raw: &[&str]) -> Vec<std::ops::Range<usize>> {
    let mut docs = Vec::new();
    let mut open: Option<usize> = None;
    for (i, line) in raw.iter().enumerate() {
        if is_marker(line, "---") {
            if let Some(start) = open {
                docs.push(start..i);
            }
            open = Some(i);
        } else if is_marker(line, "...") {
            if let Some(start) = open.take() {
                docs.push(start..i);
            }
        } else if open.is_none() && is_content(line) && !line.starts_with('%') {
            open = Some(i);
        }
    }
    if let Some(start) = open {
        docs.push(start..raw.len());
    }
    docs
}

/// A content line of block YAML: comment stripped, indentation measured.
#[derive(Clone, Copy, Debug)]
struct Line<'a> {
    /// 1-based line number in the file.
    no: usize,
    indent: usize,
    /// Byte offset of `text` in the raw line.
    col: usize,
    text: &'a str,
}

fn block_lines<'a>(raw: &[&'a str], range: std::ops::Range<usize>) -> Vec<Line<'a>> {
    let mut out = Vec::new();
    for i in range {
        let Some(full) = raw.get(i) else { break };
        // Content after a `---` marker ("--- {a: 1}", "--- !tag") counts too.
        let start = if is_marker(full, "---") { 3 } else { 0 };
        let rest = full.get(start..).unwrap_or("");
        let indent = start + rest.len() - rest.trim_start_matches(' ').len();
        let text = strip_comment(full.get(indent..).unwrap_or(""));
        // A line of only an anchor or a tag ("--- !!map") holds no structure.
        if strip_props(text).is_empty() {
            continue;
        }
        out.push(Line {
            no: i + 1,
            indent,
            col: indent,
            text,
        });
    }
    out
}

/// The line without its comment: `#` at the start or after white space,
/// outside a quoted scalar (quotes count only where a scalar can begin).
fn strip_comment(text: &str) -> &str {
    let b = text.as_bytes();
    let mut i = 0;
    let mut last: Option<u8> = None;
    let mut spaced = false;
    while i < b.len() {
        let c = b[i];
        let scalar_start = match last {
            None => true,
            Some(b'[' | b'{' | b',') => true,
            Some(b':' | b'-' | b'?') => spaced,
            _ => false,
        };
        if (c == b'"' || c == b'\'') && scalar_start {
            i = quoted_end(b, i);
            last = Some(c);
            spaced = false;
            continue;
        }
        if c == b'#' && (i == 0 || spaced) {
            return text.get(..i).unwrap_or(text).trim_end();
        }
        if c == b' ' || c == b'\t' {
            spaced = true;
        } else {
            last = Some(c);
            spaced = false;
        }
        i += 1;
    }
    text.trim_end()
}

/// Index just past the quoted scalar starting at `start` (or the end).
fn quoted_end(b: &[u8], start: usize) -> usize {
    let q = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if q == b'"' => i += 2,
            c if c == q => {
                // '' inside single quotes is an escaped quote.
                if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                    i += 2;
                } else {
                    return i + 1;
                }
            }
            _ => i += 1,
        }
    }
    b.len()
}

/// Offset of an item's content when `text` is a block sequence item.
fn seq_item(text: &str) -> Option<usize> {
    let rest = text.strip_prefix('-')?;
    if rest.is_empty() {
        return Some(1);
    }
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    Some(text.len() - rest.trim_start().len())
}

/// `key: value` (or `key:`): the key and the offset of the value.
fn split_key(text: &str) -> Option<(String, usize)> {
    let b = text.as_bytes();
    if matches!(b.first(), Some(b'"' | b'\'')) {
        let end = quoted_end(b, 0);
        let key = unquote(text.get(..end)?);
        let after = text.get(end..)?;
        let rest = after.trim_start();
        let colon = end + (after.len() - rest.len());
        let tail = rest.strip_prefix(':')?;
        return (tail.is_empty() || tail.starts_with([' ', '\t'])).then(|| (key, colon + 1));
    }
    if matches!(b.first(), None | Some(b'[' | b'{' | b'#')) {
        return None;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] == b':' && matches!(b.get(i + 1), None | Some(b' ' | b'\t')) {
            let key = text.get(..i)?.trim_end();
            return (!key.is_empty()).then(|| (key.to_string(), i + 1));
        }
        i += 1;
    }
    None
}

/// Anchors (`&a`) and tags (`!t`, `!!map`) before a value say nothing about position.
fn strip_props(mut text: &str) -> &str {
    while text.starts_with(['&', '!']) {
        let end = text.find([' ', '\t']).unwrap_or(text.len());
        text = text.get(end..).unwrap_or("").trim_start();
    }
    text
}

/// A block scalar's text: quoted forms unquoted, plain ones as they are.
fn unquote(text: &str) -> String {
    if text.starts_with(['"', '\'']) {
        let one = [text];
        let mut f = Flow {
            raw: &one,
            line: 0,
            col: 0,
        };
        return f.quoted();
    }
    text.to_string()
}

/// The block structure of one document, read line by line.
struct Block<'a, 'r> {
    raw: &'r [&'a str],
    lines: Vec<Line<'a>>,
    pos: usize,
}

impl<'a> Block<'a, '_> {
    fn peek(&self) -> Option<Line<'a>> {
        self.lines.get(self.pos).copied()
    }

    /// Skips the lines indented deeper than `indent` (a scalar's continuation
    /// or a block scalar's content).
    fn skip_deeper(&mut self, indent: usize) {
        while self.peek().is_some_and(|l| l.indent > indent) {
            self.pos += 1;
        }
    }

    /// The node starting at the current line if it is indented at least `min`.
    fn node(&mut self, min: usize, depth: usize) -> Option<Outline> {
        let l = self.peek()?;
        if l.indent < min {
            return None;
        }
        if depth > MAX_DEPTH {
            self.pos += 1;
            self.skip_deeper(l.indent);
            return Some(Outline::null(l.no));
        }
        if seq_item(l.text).is_some() {
            return Some(self.seq(l.indent, depth));
        }
        if l.text.starts_with(['[', '{']) {
            return Some(self.flow(l, l.col, depth));
        }
        if split_key(l.text).is_some() {
            return Some(self.map(l.indent, depth));
        }
        self.pos += 1;
        self.skip_deeper(l.indent);
        Some(Outline {
            line: l.no,
            shape: Shape::Scalar(unquote(l.text)),
        })
    }

    fn seq(&mut self, indent: usize, depth: usize) -> Outline {
        let first = self.peek().map_or(0, |l| l.no);
        let mut items = Vec::new();
        while let Some(l) = self.peek() {
            if l.indent > indent {
                self.pos += 1; // stray deeper line: tolerated
                continue;
            }
            if l.indent < indent {
                break;
            }
            let Some(offset) = seq_item(l.text) else {
                break;
            };
            let rest = strip_props(l.text.get(offset..).unwrap_or(""));
            let item = if rest.is_empty() {
                self.pos += 1;
                self.node(indent + 1, depth + 1)
            } else {
                // "- name: x": the item's content read as a line of its own,
                // indented to its column, so following keys line up with it.
                let shift = l.text.len() - rest.len();
                self.lines[self.pos] = Line {
                    no: l.no,
                    indent: l.indent + shift,
                    col: l.col + shift,
                    text: rest,
                };
                self.node(l.indent + shift, depth + 1)
            };
            let shape = item.map_or(Shape::Scalar(String::new()), |o| o.shape);
            items.push(Outline { line: l.no, shape });
        }
        Outline {
            line: first,
            shape: Shape::Seq(items),
        }
    }

    fn map(&mut self, indent: usize, depth: usize) -> Outline {
        let first = self.peek().map_or(0, |l| l.no);
        let mut entries = Vec::new();
        while let Some(l) = self.peek() {
            if l.indent > indent {
                self.pos += 1;
                continue;
            }
            if l.indent < indent || seq_item(l.text).is_some() {
                break;
            }
            let Some((key, offset)) = split_key(l.text) else {
                self.pos += 1;
                continue;
            };
            self.pos += 1;
            let after = l.text.get(offset..).unwrap_or("");
            let rest = strip_props(after.trim_start());
            let value = if rest.is_empty() {
                match self.peek() {
                    Some(n) if n.indent > indent => self.node(indent + 1, depth + 1),
                    Some(n) if n.indent == indent && seq_item(n.text).is_some() => {
                        Some(self.seq(indent, depth + 1))
                    }
                    _ => None,
                }
                .unwrap_or(Outline::null(l.no))
            } else if rest.starts_with(['[', '{']) {
                let col = l.col + (l.text.len() - rest.len());
                self.flow(l, col, depth + 1)
            } else {
                // A block scalar's content or a plain scalar's continuation.
                self.skip_deeper(indent);
                let text = if rest.starts_with(['|', '>']) {
                    String::new()
                } else {
                    unquote(rest)
                };
                Outline {
                    line: l.no,
                    shape: Shape::Scalar(text),
                }
            };
            entries.push(Entry {
                key,
                line: l.no,
                value,
            });
        }
        Outline {
            line: first,
            shape: Shape::Map(entries),
        }
    }

    /// A flow collection starting at byte `col` of line `l`; the block lines
    /// it spans are consumed.
    fn flow(&mut self, l: Line<'a>, col: usize, depth: usize) -> Outline {
        let mut f = Flow {
            raw: self.raw,
            line: l.no - 1,
            col,
        };
        let out = f.value(depth);
        let last = f.line + 1;
        while self.peek().is_some_and(|n| n.no <= last) {
            self.pos += 1;
        }
        out
    }
}

// ---- flow collections (and JSON) ----

/// A cursor over raw lines; a line's end reads as `\n`.
struct Flow<'a, 'r> {
    raw: &'r [&'a str],
    line: usize,
    col: usize,
}

impl Flow<'_, '_> {
    fn peek(&self) -> Option<u8> {
        let l = self.raw.get(self.line)?;
        Some(l.as_bytes().get(self.col).copied().unwrap_or(b'\n'))
    }

    fn peek_at(&self, ahead: usize) -> Option<u8> {
        let l = self.raw.get(self.line)?;
        Some(l.as_bytes().get(self.col + ahead).copied().unwrap_or(b'\n'))
    }

    fn bump(&mut self) {
        let len = self.raw.get(self.line).map_or(0, |l| l.len());
        if self.col >= len {
            self.line += 1;
            self.col = 0;
        } else {
            self.col += 1;
        }
    }

    fn after_space(&self) -> bool {
        self.col == 0
            || self
                .raw
                .get(self.line)
                .and_then(|l| l.as_bytes().get(self.col - 1))
                .is_some_and(|c| matches!(c, b' ' | b'\t'))
    }

    fn skip_space(&mut self) {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\r' | b'\n') => self.bump(),
                Some(b'#') if self.after_space() => {
                    self.line += 1;
                    self.col = 0;
                }
                _ => return,
            }
        }
    }

    fn at(&self) -> (usize, usize) {
        (self.line, self.col)
    }

    fn value(&mut self, depth: usize) -> Outline {
        self.skip_space();
        let line = self.line + 1;
        if depth > MAX_DEPTH {
            return Outline::null(line);
        }
        let shape = match self.peek() {
            Some(b'{') => {
                self.bump();
                Shape::Map(self.entries(b'}', depth))
            }
            Some(b'[') => {
                self.bump();
                Shape::Seq(self.items(depth))
            }
            Some(b'"' | b'\'') => Shape::Scalar(self.quoted()),
            Some(_) => Shape::Scalar(self.plain()),
            None => Shape::Scalar(String::new()),
        };
        Outline { line, shape }
    }

    /// `key: value` pairs up to `close`.
    fn entries(&mut self, close: u8, depth: usize) -> Vec<Entry> {
        let mut out = Vec::new();
        loop {
            self.skip_space();
            let start = self.at();
            match self.peek() {
                None => break,
                Some(c) if c == close => {
                    self.bump();
                    break;
                }
                Some(b',') => {
                    self.bump();
                    continue;
                }
                Some(b']' | b'}') => {
                    self.bump(); // mismatched closer: leave this collection
                    break;
                }
                _ => {}
            }
            let line = self.line + 1;
            let key = self.value(depth + 1);
            self.skip_space();
            let value = if self.peek() == Some(b':') {
                self.bump();
                self.skip_space();
                match self.peek() {
                    Some(b',' | b'}' | b']') | None => Outline::null(line),
                    _ => self.value(depth + 1),
                }
            } else {
                Outline::null(line)
            };
            out.push(Entry {
                key: key.as_str().unwrap_or("").to_string(),
                line,
                value,
            });
            if self.at() == start {
                self.bump(); // never loop in place on unexpected input
            }
        }
        out
    }

    fn items(&mut self, depth: usize) -> Vec<Outline> {
        let mut out = Vec::new();
        loop {
            self.skip_space();
            let start = self.at();
            match self.peek() {
                None => break,
                Some(b']') => {
                    self.bump();
                    break;
                }
                Some(b',') => {
                    self.bump();
                    continue;
                }
                Some(b'}') => {
                    self.bump();
                    break;
                }
                _ => {}
            }
            let mut item = self.value(depth + 1);
            self.skip_space();
            // [a: b] is a sequence of single-pair mappings.
            if self.peek() == Some(b':') {
                self.bump();
                let value = self.value(depth + 1);
                let line = item.line;
                let key = item.as_str().unwrap_or("").to_string();
                item = Outline {
                    line,
                    shape: Shape::Map(vec![Entry { key, line, value }]),
                };
            }
            out.push(item);
            if self.at() == start {
                self.bump();
            }
        }
        out
    }

    /// A quoted scalar (may span lines); escapes of JSON and YAML decoded.
    fn quoted(&mut self) -> String {
        let Some(q) = self.peek() else {
            return String::new();
        };
        self.bump();
        let mut out: Vec<u8> = Vec::new();
        while let Some(c) = self.peek() {
            self.bump();
            if c == q {
                if q == b'\'' && self.peek() == Some(b'\'') {
                    self.bump();
                    out.push(b'\'');
                    continue;
                }
                break;
            }
            if c == b'\\' && q == b'"' {
                let Some(e) = self.peek() else { break };
                self.bump();
                match e {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'u' => {
                        let mut hex = String::new();
                        for _ in 0..4 {
                            if let Some(h) = self.peek().filter(u8::is_ascii_hexdigit) {
                                hex.push(h as char);
                                self.bump();
                            }
                        }
                        let ch = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .unwrap_or('\u{fffd}');
                        out.extend_from_slice(ch.to_string().as_bytes());
                    }
                    other => out.push(other),
                }
                continue;
            }
            out.push(if c == b'\n' { b' ' } else { c });
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A plain scalar, up to a flow indicator, `: `, ` #` or the line's end.
    fn plain(&mut self) -> String {
        let line = self.line;
        let start = self.col;
        while let Some(c) = self.peek() {
            let stop = match c {
                b'\n' | b',' | b'[' | b']' | b'{' | b'}' => true,
                b':' => matches!(
                    self.peek_at(1),
                    None | Some(b' ' | b'\t' | b'\n' | b',' | b'[' | b']' | b'{' | b'}')
                ),
                b'#' => self.after_space(),
                _ => false,
            };
            if stop {
                break;
            }
            self.bump();
        }
        let text = self
            .raw
            .get(line)
            .and_then(|l| l.get(start..self.col.min(l.len())))
            .unwrap_or("");
        text.trim().to_string()
    }
}

#[cfg(test)]
#[path = "outline_tests.rs"]
mod tests;
