//! The protobuf wire format, read in place: the fields of one message as
//! (number, value) pairs, borrowing the input. Linear in the input and
//! allocation-free; nesting is the caller's (the schema's), so no input can
//! make it recurse. Groups (deprecated, never written by Kubernetes) are an
//! error rather than a guess.

/// One field's value, as the wire carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    /// Strings, bytes and embedded messages.
    Bytes(&'a [u8]),
    Fixed64(u64),
    Fixed32(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("protobuf input ends inside a field")]
    Truncated,
    #[error("protobuf varint longer than 10 bytes")]
    LongVarint,
    #[error("protobuf wire type {0} is not supported")]
    WireType(u8),
    #[error("protobuf field {field}: expected {expected}")]
    Type { field: u32, expected: &'static str },
    #[error("protobuf string is not UTF-8")]
    Utf8,
    #[error("protobuf field or frame of {len} bytes is over the bound of {max}")]
    TooLarge { len: u64, max: u64 },
}

/// Reads a varint at the start of `buf`: (value, bytes used).
pub fn varint(buf: &[u8]) -> Result<(u64, usize), WireError> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((value, i + 1));
        }
    }
    if buf.len() >= 10 {
        Err(WireError::LongVarint)
    } else {
        Err(WireError::Truncated)
    }
}

/// The fields of one message, in wire order.
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(message: &'a [u8]) -> Self {
        Fields { rest: message }
    }

    fn field(&mut self) -> Result<(u32, Value<'a>), WireError> {
        let (key, n) = varint(self.rest)?;
        self.rest = &self.rest[n..];
        let number = u32::try_from(key >> 3).map_err(|_| WireError::WireType(0xff))?;
        let value = match key & 7 {
            0 => {
                let (v, n) = varint(self.rest)?;
                self.rest = &self.rest[n..];
                Value::Varint(v)
            }
            1 => Value::Fixed64(u64::from_le_bytes(
                self.take(8)?.try_into().expect("8 bytes"),
            )),
            2 => {
                let (len, n) = varint(self.rest)?;
                self.rest = &self.rest[n..];
                let len = usize::try_from(len).map_err(|_| WireError::Truncated)?;
                Value::Bytes(self.take(len)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(
                self.take(4)?.try_into().expect("4 bytes"),
            )),
            other => return Err(WireError::WireType(other as u8)),
        };
        Ok((number, value))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            // One error ends the message: what follows is not framed.
            self.rest = &[];
        }
        Some(field)
    }
}

impl<'a> Value<'a> {
    pub fn bytes(self, field: u32) -> Result<&'a [u8], WireError> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => Err(WireError::Type {
                field,
                expected: "bytes",
            }),
        }
    }

    pub fn str(self, field: u32) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes(field)?).map_err(|_| WireError::Utf8)
    }

    pub fn string(self, field: u32) -> Result<String, WireError> {
        self.str(field).map(str::to_owned)
    }

    pub fn bool(self, field: u32) -> Result<bool, WireError> {
        self.varint(field).map(|v| v != 0)
    }

    pub fn varint(self, field: u32) -> Result<u64, WireError> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(WireError::Type {
                field,
                expected: "varint",
            }),
        }
    }
}

/// Appends a field to `out`: what the tests build their messages with, and
/// what nothing in production writes.
#[cfg(test)]
pub mod encode {
    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    pub fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
        varint(out, u64::from(field) << 3 | 2);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    pub fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
        varint(out, u64::from(field) << 3);
        varint(out, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_type_kubernetes_writes_is_read() {
        let mut m = Vec::new();
        encode::uint(&mut m, 1, 300);
        encode::bytes(&mut m, 2, b"pod");
        m.extend_from_slice(&[(3 << 3) | 1, 1, 0, 0, 0, 0, 0, 0, 0]);
        m.extend_from_slice(&[(4 << 3) | 5, 2, 0, 0, 0]);
        let fields: Vec<_> = Fields::new(&m).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            fields,
            [
                (1, Value::Varint(300)),
                (2, Value::Bytes(b"pod")),
                (3, Value::Fixed64(1)),
                (4, Value::Fixed32(2)),
            ]
        );
    }

    #[test]
    fn malformed_input_is_an_error_and_ends_the_message() {
        for (bad, error) in [
            (&[0x12, 5, b'a'][..], WireError::Truncated),
            (&[0x08][..], WireError::Truncated),
            (
                &[
                    0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                ][..],
                WireError::LongVarint,
            ),
            (&[0x0b][..], WireError::WireType(3)),
            (
                &[0x12, 0xff, 0xff, 0xff, 0xff, 0x0f][..],
                WireError::Truncated,
            ),
        ] {
            let mut fields = Fields::new(bad);
            assert_eq!(fields.next(), Some(Err(error)), "{bad:?}");
            assert_eq!(fields.next(), None, "{bad:?}");
        }
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named() {
        assert_eq!(
            Value::Varint(1).str(7),
            Err(WireError::Type {
                field: 7,
                expected: "bytes"
            })
        );
        assert_eq!(Value::Bytes(&[0xff]).str(1), Err(WireError::Utf8));
    }
}
