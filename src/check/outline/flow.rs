//! Flow collections (`[a, b]`, `{k: v}`) and so JSON, read with positions.
//! Scalars stop at flow indicators; quoted ones may span lines.

use super::{Entry, MAX_DEPTH, Outline, Shape};

/// A cursor over raw lines; a line's end reads as `\n`.
pub(super) struct Flow<'a, 'r> {
    raw: &'r [&'a str],
    line: usize,
    col: usize,
}

impl<'a, 'r> Flow<'a, 'r> {
    /// At byte `col` of line index `line` (0-based).
    pub(super) fn new(raw: &'r [&'a str], line: usize, col: usize) -> Self {
        Flow { raw, line, col }
    }

    /// The 0-based index of the line the cursor is on.
    pub(super) fn line(&self) -> usize {
        self.line
    }

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

    pub(super) fn value(&mut self, depth: usize) -> Outline {
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
    pub(super) fn quoted(&mut self) -> String {
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
                self.escape(&mut out);
                continue;
            }
            out.push(if c == b'\n' { b' ' } else { c });
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// One escape of a double-quoted scalar (the backslash read), as YAML
    /// 1.2 and JSON define them; names must decode exactly to be matched.
    fn escape(&mut self, out: &mut Vec<u8>) {
        let Some(e) = self.peek() else { return };
        self.bump();
        let ch = match e {
            b'0' => '\0',
            b'a' => '\u{7}',
            b'b' => '\u{8}',
            b't' | b'\t' => '\t',
            b'n' => '\n',
            b'v' => '\u{b}',
            b'f' => '\u{c}',
            b'r' => '\r',
            b'e' => '\u{1b}',
            b'N' => '\u{85}',
            b'_' => '\u{a0}',
            b'L' => '\u{2028}',
            b'P' => '\u{2029}',
            b'x' => self.hex_char(2),
            b'u' => {
                let first = self.hex(4);
                // JSON writes characters beyond the BMP as a surrogate pair.
                let low = if (0xD800..0xDC00).contains(&first)
                    && self.peek() == Some(b'\\')
                    && self.peek_at(1) == Some(b'u')
                {
                    self.bump();
                    self.bump();
                    Some(self.hex(4))
                } else {
                    None
                };
                let code = match low {
                    Some(l) if (0xDC00..0xE000).contains(&l) => {
                        0x10000 + ((first - 0xD800) << 10) + (l - 0xDC00)
                    }
                    Some(other) => {
                        out.extend_from_slice("\u{fffd}".as_bytes());
                        other
                    }
                    None => first,
                };
                char::from_u32(code).unwrap_or('\u{fffd}')
            }
            b'U' => self.hex_char(8),
            b'\n' => return, // an escaped line break joins the lines
            other => {
                out.push(other); // \" \\ \/ and "\ "
                return;
            }
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
    }

    /// Up to `digits` hex digits as a number (0 when there are none).
    fn hex(&mut self, digits: usize) -> u32 {
        let mut n: u32 = 0;
        for _ in 0..digits {
            let Some(d) = self.peek().and_then(|h| (h as char).to_digit(16)) else {
                break;
            };
            n = n.wrapping_mul(16).wrapping_add(d);
            self.bump();
        }
        n
    }

    fn hex_char(&mut self, digits: usize) -> char {
        char::from_u32(self.hex(digits)).unwrap_or('\u{fffd}')
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
