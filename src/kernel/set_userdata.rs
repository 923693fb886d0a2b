//! A named set's userdata (NFTA_SET_USERDATA), as the kernel keeps it for
//! whichever `nft` wrote the set: libnftnl's type-length-value records (one
//! byte type, one byte length, the value; integers in host order). The
//! kernel never reads it, every `nft` that lists the set does, and an old
//! one crashes on records newer ones write (shared doc §8). Only the records
//! that decide a reader's fate are kept: which expression types the "key
//! typeof" and "data typeof" records name. Pure and bounded: the kernel caps
//! userdata at 256 bytes, and anything longer or malformed is marked so.

/// libnftnl's set userdata record types (`enum udata_set_type`).
const KEY_TYPEOF: u8 = 3;
const DATA_TYPEOF: u8 = 4;
/// The highest record type any released libnftables writes (COMMENT).
const LAST_KNOWN_RECORD: u8 = 7;
/// Inside a typeof record: the expression type (then its data, record 1).
const TYPEOF_EXPR: u8 = 0;
/// The kernel's NFT_USERDATA_MAXLEN.
pub const MAX_USERDATA: usize = 256;

/// What a set's userdata names: the typeof records' expression types
/// (nftables' `enum expr_types`, e.g. 4 value, 7 payload, 18 concat).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SetUserdata {
    /// The "key typeof" record's expression type.
    pub key_typeof: Option<u32>,
    /// The "data typeof" record's expression type (maps).
    pub data_typeof: Option<u32>,
    /// A record type no released libnftables writes (a future writer's).
    pub unknown_record: bool,
    /// Longer than the kernel allows, or a record overruns the buffer.
    pub malformed: bool,
}

impl SetUserdata {
    /// Decode `raw` (the attribute's payload). Never fails: what cannot be
    /// read is `malformed`, and the reader judgement treats it as unknown.
    pub fn parse(raw: &[u8]) -> Self {
        let mut out = SetUserdata {
            malformed: raw.len() > MAX_USERDATA,
            ..Default::default()
        };
        let mut recs = Records::of(&raw[..raw.len().min(MAX_USERDATA)]);
        for (t, v) in &mut recs {
            match t {
                KEY_TYPEOF => out.key_typeof = out.typeof_record(v),
                DATA_TYPEOF => out.data_typeof = out.typeof_record(v),
                t if t > LAST_KNOWN_RECORD => out.unknown_record = true,
                _ => {}
            }
        }
        out.malformed |= recs.overrun;
        out
    }

    /// The expression type a typeof nest names. Its data is the expression's
    /// own business: a concatenation's member parsers are guarded in every
    /// release (nftables src/expression.c, `concat_expr_parse_udata`), so
    /// only the top type can crash a reader.
    fn typeof_record(&mut self, nest: &[u8]) -> Option<u32> {
        let mut recs = Records::of(nest);
        let mut etype = None;
        for (t, v) in &mut recs {
            if t == TYPEOF_EXPR && etype.is_none() {
                etype = Some(u32_of(v));
            }
        }
        let etype = etype.flatten();
        self.malformed |= recs.overrun || etype.is_none();
        etype
    }
}

/// The records of one TLV buffer, without allocating (the reporter parses
/// every set on every probe); an overrun ends them and sets `overrun`.
struct Records<'a> {
    rest: &'a [u8],
    overrun: bool,
}

impl<'a> Records<'a> {
    fn of(b: &'a [u8]) -> Self {
        Records {
            rest: b,
            overrun: false,
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = (u8, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        let b = self.rest;
        if b.is_empty() {
            return None;
        }
        let rec = match b {
            [t, len, rest @ ..] => rest.get(..*len as usize).map(|v| (*t, v)),
            _ => None,
        };
        match rec {
            Some((t, v)) => {
                self.rest = &b[2 + v.len()..];
                Some((t, v))
            }
            None => {
                self.overrun = true;
                self.rest = &[];
                None
            }
        }
    }
}

fn u32_of(v: &[u8]) -> Option<u32> {
    <[u8; 4]>::try_from(v).ok().map(u32::from_ne_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes as shared doc §8 measured them (`nft --debug=mnl`).
    const WRITTEN_BY_1_0_6: [u8; 6] = [0x00, 0x04, 0x02, 0x00, 0x00, 0x00];
    const WRITTEN_BY_1_1_3: [u8; 16] = [
        0x00, 0x04, 0x02, 0x00, 0x00, 0x00, 0x03, 0x08, 0x00, 0x04, 0x04, 0x00, 0x00, 0x00, 0x01,
        0x00,
    ];

    #[test]
    fn a_type_set_by_1_0_6_has_no_typeof_record() {
        let u = SetUserdata::parse(&WRITTEN_BY_1_0_6);
        assert_eq!(u, SetUserdata::default());
    }

    #[test]
    fn a_type_set_by_1_1_3_names_a_value_key() {
        let u = SetUserdata::parse(&WRITTEN_BY_1_1_3);
        assert_eq!(u.key_typeof, Some(4));
        assert_eq!(u.data_typeof, None);
        assert!(!u.malformed && !u.unknown_record);
    }

    #[test]
    fn typeof_sets_and_maps_as_written_name_their_top_types() {
        // Measured bytes (Debian's releases, family ip): `typeof ip daddr .
        // tcp dport` by any writer, a `type a . b . c : verdict` map by
        // 1.1.3, a `typeof ip daddr : verdict` map by 1.0.6.
        let s6 = hex(
            "00 04 00 00 00 00 03 34 00 04 0d 00 00 00 01 2c 00 14 00 04 07 00 00 00 01 0c \
                      00 04 0c 00 00 00 01 04 0c 00 00 00 01 14 00 04 07 00 00 00 01 0c 00 04 08 00 \
                      00 00 01 04 02 00 00 00",
        );
        let u = SetUserdata::parse(&s6);
        assert_eq!(
            (u.key_typeof, u.data_typeof, u.malformed),
            (Some(13), None, false)
        );
        let m2 = hex(
            "00 04 00 00 00 00 01 04 00 00 00 00 03 12 00 04 0d 00 00 00 01 0a 00 00 00 04 \
                      04 00 00 00 01 00 04 08 00 04 04 00 00 00 01 00 06 04 00 00 00 00",
        );
        let u = SetUserdata::parse(&m2);
        assert_eq!(
            (u.key_typeof, u.data_typeof, u.malformed),
            (Some(13), Some(4), false)
        );
        let m3 = hex(
            "00 04 02 00 00 00 01 04 00 00 00 00 03 14 00 04 07 00 00 00 01 0c 00 04 0c 00 \
                      00 00 01 04 0c 00 00 00 04 08 00 04 01 00 00 00 01 00 06 04 00 00 00 00",
        );
        let u = SetUserdata::parse(&m3);
        assert_eq!(
            (u.key_typeof, u.data_typeof, u.malformed),
            (Some(7), Some(1), false)
        );
    }

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    #[test]
    fn hostile_userdata_is_bounded_and_marked() {
        // An overrunning length, a truncated header, an oversized buffer.
        assert!(SetUserdata::parse(&[3, 200, 0]).malformed);
        assert!(SetUserdata::parse(&[0, 4, 2, 0, 0, 0, 3]).malformed);
        let huge = vec![7u8; 10_000];
        assert!(SetUserdata::parse(&huge).malformed);
        // A typeof record without its expression type.
        assert!(SetUserdata::parse(&[3, 2, 1, 0]).malformed);
        // A record no release writes.
        assert!(SetUserdata::parse(&[9, 0]).unknown_record);
    }
}
