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

mod flow;

use flow::Flow;

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
    let root = Flow::new(&raw, 0, 0).value(0);
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
        return Flow::new(&one, 0, 0).quoted();
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
        let mut f = Flow::new(self.raw, l.no - 1, col);
        let out = f.value(depth);
        let last = f.line() + 1;
        while self.peek().is_some_and(|n| n.no <= last) {
            self.pos += 1;
        }
        out
    }
}

#[cfg(test)]
#[path = "outline_tests.rs"]
mod tests;
