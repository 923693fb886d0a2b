//! Records: a varint header size, one varint serial type per column, then
//! the column values. Only the columns asked for are decoded.

use super::{MAX_RECORD_HEADER_BYTES, SqliteError as E};

/// SQLite's big-endian varint: 7 bits per byte while the high bit is set,
/// the 9th byte whole. Returns the value and its length; None when cut short.
pub(super) fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().take(9).enumerate() {
        if i == 8 {
            return Some(((v << 8) | u64::from(byte), 9));
        }
        v = (v << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// One column value; text and blobs borrow the payload.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value<'a> {
    Null,
    Int(i64),
    Float,
    Text(&'a [u8]),
    Blob(&'a [u8]),
}

/// The values of columns `0..n` of a record (fewer when the record has
/// fewer columns: SQLite then reads the missing trailing ones as NULL).
pub(super) fn columns(payload: &[u8], n: usize) -> Result<Vec<Value<'_>>, E> {
    let (header_len, mut at) = varint(payload).ok_or(E::Record("header size"))?;
    if header_len > MAX_RECORD_HEADER_BYTES as u64 {
        return Err(E::Record("header larger than the record header limit"));
    }
    let header_len = header_len as usize;
    if header_len < at || header_len > payload.len() {
        return Err(E::Record("header size outside the record"));
    }
    let header = &payload[..header_len];
    let mut body = header_len;
    let mut out = Vec::with_capacity(n);
    while at < header_len && out.len() < n {
        let (serial, len) = varint(&header[at..]).ok_or(E::Record("serial type"))?;
        at += len;
        let size = match serial {
            0 | 8 | 9 => 0,
            1..=4 => serial as usize,
            5 => 6,
            6 | 7 => 8,
            10 | 11 => return Err(E::Record("reserved serial type")),
            // Text and blob lengths; the record header cap bounds neither,
            // the payload length below does.
            s => usize::try_from((s - 12) / 2).unwrap_or(usize::MAX),
        };
        let value = payload
            .get(body..body.saturating_add(size))
            .ok_or(E::Record("column value past the record end"))?;
        body += size;
        out.push(match serial {
            0 => Value::Null,
            1..=6 => Value::Int(int(value)),
            7 => Value::Float,
            8 => Value::Int(0),
            9 => Value::Int(1),
            s if s % 2 == 0 => Value::Blob(value),
            _ => Value::Text(value),
        });
    }
    out.resize(n, Value::Null);
    Ok(out)
}

/// The value of column `i`.
pub(super) fn column(payload: &[u8], i: usize) -> Result<Value<'_>, E> {
    Ok(columns(payload, i + 1)?.swap_remove(i))
}

/// A big-endian two's-complement integer of 1 to 8 bytes.
fn int(b: &[u8]) -> i64 {
    let fill = if b[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut v = [fill; 8];
    v[8 - b.len()..].copy_from_slice(b);
    i64::from_be_bytes(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_of_one_to_nine_bytes() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xff; 9]), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x81]), None);
        assert_eq!(varint(&[]), None);
    }

    #[test]
    fn record_columns_and_bounds() {
        // header: size 4, NULL, int8 (1), blob of 2 bytes (16); body.
        let rec = [4u8, 0, 1, 16, 0xfe, 0xaa, 0xbb];
        assert_eq!(
            columns(&rec, 3).unwrap(),
            vec![Value::Null, Value::Int(-2), Value::Blob(&[0xaa, 0xbb])]
        );
        assert_eq!(column(&rec, 5).unwrap(), Value::Null);
        // A blob announced longer than the record.
        assert!(columns(&[2u8, 20, 1], 1).is_err());
        // A header size past the record, or over the cap.
        assert!(columns(&[9u8, 0], 1).is_err());
        assert!(columns(&[0x82, 0x01, 0], 1).is_err());
        assert!(columns(&[2u8, 10], 1).is_err());
    }
}
