//! Reading a whole file or stream with a bound: nfguard never holds more of
//! an input than its cap, whatever size the input claims or reaches.

use std::io::Read;
use std::path::Path;

/// All of `r` if it is at most `max` bytes; `Ok(None)` when there is more
/// (reading stops at `max + 1`).
pub fn read_capped(r: impl Read, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    r.take(max.saturating_add(1)).read_to_end(&mut out)?;
    Ok((out.len() as u64 <= max).then_some(out))
}

/// The file at `path`, if it holds at most `max` bytes (see [`read_capped`]).
pub fn read_file_capped(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    read_capped(std::fs::File::open(path)?, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_up_to_the_cap_and_refuses_one_byte_more() {
        assert_eq!(read_capped(&b""[..], 0).unwrap(), Some(vec![]));
        assert_eq!(read_capped(&b"abc"[..], 3).unwrap(), Some(b"abc".to_vec()));
        assert_eq!(read_capped(&b"abcd"[..], 3).unwrap(), None);
        // An endless stream is read only to the cap and one byte.
        assert_eq!(read_capped(std::io::repeat(b'x'), 1 << 20).unwrap(), None);
        assert!(read_file_capped(Path::new("/nonexistent/nfguard"), 1).is_err());
    }
}
