//! The version literal in libnftables and in the `nft` program, found among
//! their NUL-separated strings. Measured on Debian's builds (bullseye 0.9.8,
//! bookworm 1.0.6, trixie 1.1.3, sid 1.1.7):
//! - libnftables.so holds `PACKAGE_NAME` and `PACKAGE_VERSION` side by side,
//!   exactly once: `\0nft\01.1.3\0`;
//! - `nft` holds `\0Commodore Bullmoose #4\01.1.3\0nftables\0%s v%s (%s)\n`
//!   (release name, version, and what `nft --version` prints them with).
//!
//! Anything else (no literal, two of them, a flood of them) is no answer:
//! a library that does not look like a real build is not guessed at.

use crate::facts::NftVersion;

/// What one file says about its release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftLiteral {
    pub version: NftVersion,
    /// The version string as found ("1.0.6").
    pub text: String,
    /// The program's release name ("Lester Gooch #5"), when printable.
    pub release_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LiteralError {
    #[error("no nftables version literal")]
    Missing,
    #[error("{0} nftables version literals where a real build holds exactly one")]
    Several(usize),
}

/// libnftables' `\0nft\0<version>\0`.
pub fn library_version(data: &[u8]) -> Result<NftLiteral, LiteralError> {
    let mut found = Found::default();
    let mut prev: Option<&[u8]> = None;
    let mut segments = data.split(|&b| b == 0).peekable();
    let mut first = true;
    while let Some(seg) = segments.next() {
        let terminated = segments.peek().is_some();
        if terminated
            && prev == Some(b"nft".as_slice())
            && let Some(v) = version_of(seg)
        {
            found.add(v, seg, None);
        }
        // A segment is only a whole string when a NUL precedes it.
        prev = (!first).then_some(seg);
        first = false;
    }
    found.finish()
}

/// The text `nft --version` prints the release with.
const VERSION_FORMAT: &[u8] = b"%s v%s (%s)\n";

/// The program's `\0<release name>\0<version>\0nftables\0%s v%s (%s)\n`.
pub fn program_version(data: &[u8]) -> Result<NftLiteral, LiteralError> {
    let mut found = Found::default();
    // The last three whole strings: release name, version, "nftables".
    let mut last: [Option<&[u8]>; 3] = [None; 3];
    let mut segments = data.split(|&b| b == 0).peekable();
    let mut first = true;
    while let Some(seg) = segments.next() {
        let terminated = segments.peek().is_some();
        if terminated
            && seg == VERSION_FORMAT
            && let [Some(name), Some(version), Some(b"nftables")] = last
            && let Some(v) = version_of(version)
        {
            found.add(v, version, release_name(name));
        }
        last = [last[1], last[2], (!first).then_some(seg)];
        first = false;
    }
    found.finish()
}

/// A whole string that is a dotted version ("1.0.6.1"), nothing around it.
fn version_of(seg: &[u8]) -> Option<NftVersion> {
    let shaped = (3..=23).contains(&seg.len())
        && seg.first().is_some_and(u8::is_ascii_digit)
        && seg.last().is_some_and(u8::is_ascii_digit)
        && seg.iter().all(|b| b.is_ascii_digit() || *b == b'.');
    if !shaped {
        return None;
    }
    std::str::from_utf8(seg).ok()?.parse().ok()
}

fn release_name(seg: &[u8]) -> Option<String> {
    let printable = !seg.is_empty()
        && seg.len() <= 64
        && seg.iter().all(|b| b.is_ascii_graphic() || *b == b' ');
    printable.then(|| String::from_utf8_lossy(seg).into_owned())
}

#[derive(Default)]
struct Found {
    count: usize,
    first: Option<NftLiteral>,
}

impl Found {
    fn add(&mut self, version: NftVersion, text: &[u8], release_name: Option<String>) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(NftLiteral {
                version,
                text: String::from_utf8_lossy(text).into_owned(),
                release_name,
            });
        }
    }

    fn finish(self) -> Result<NftLiteral, LiteralError> {
        match (self.count, self.first) {
            (1, Some(l)) => Ok(l),
            (0, _) | (_, None) => Err(LiteralError::Missing),
            (n, _) => Err(LiteralError::Several(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> NftVersion {
        s.parse().unwrap()
    }

    #[test]
    fn library_literal_as_debian_builds_it() {
        // Bytes around the literal in bookworm's libnftables.so.1.1.0.
        let data = b"\x7fELF\0xt %s %s\0nflog\0watcher\0nft\x001.0.6\0\0\0\0";
        let l = library_version(data).unwrap();
        assert_eq!(l.version, v("1.0.6"));
        assert_eq!(l.text, "1.0.6");
        assert_eq!(
            library_version(b"\0nft\x001.0.6.1\0").unwrap().version,
            v("1.0.6.1")
        );
    }

    #[test]
    fn library_literal_must_be_whole_and_alone() {
        // Not preceded or followed by a NUL, not a bare version.
        for data in [
            &b"nft\x001.0.6\0"[..],
            b"\0nft\x001.0.6",
            b"\0xnft\x001.0.6\0",
            b"\0nft\x001.0.6-2\0",
            b"\0nft\0v1.0.6\0",
            b"\0nft\x001\0",
            b"\0nft\x001.\0",
            b"\x001.1.3\0%s v%s\0",
            b"",
        ] {
            assert_eq!(
                library_version(data),
                Err(LiteralError::Missing),
                "{data:?}"
            );
        }
        assert_eq!(
            library_version(b"\0nft\x001.0.6\0nft\x001.1.3\0"),
            Err(LiteralError::Several(2))
        );
        // The same literal twice is not what a real build holds either.
        assert_eq!(
            library_version(b"\0nft\x001.1.3\0\0nft\x001.1.3\0"),
            Err(LiteralError::Several(2))
        );
    }

    #[test]
    fn hostile_flood_of_literals_is_no_answer() {
        let mut data = Vec::new();
        for i in 0..100_000u32 {
            data.extend_from_slice(format!("\0nft\x001.{}.{}\0", i % 7, i % 13).as_bytes());
            data.extend_from_slice(format!("{}.{}.{}\0", i % 3, i % 5, i).as_bytes());
        }
        assert_eq!(library_version(&data), Err(LiteralError::Several(100_000)));
        // Many version-looking strings, none in the library's shape.
        let bare: Vec<u8> = (0..100_000u32)
            .flat_map(|i| format!("\0{}.{}.{}\0", i % 3, i % 5, i % 11).into_bytes())
            .collect();
        assert_eq!(library_version(&bare), Err(LiteralError::Missing));
        assert_eq!(program_version(&bare), Err(LiteralError::Missing));
    }

    #[test]
    fn program_literal_as_debian_builds_it() {
        let data =
            b"--define\0--file\0Lester Gooch #5\x001.0.6\0nftables\0%s v%s (%s)\n\0editline\0";
        let l = program_version(data).unwrap();
        assert_eq!(l.version, v("1.0.6"));
        assert_eq!(l.release_name.as_deref(), Some("Lester Gooch #5"));
        // bullseye's release name has dots of its own.
        let l = program_version(b"\0E.D.S.\x000.9.8\0nftables\0%s v%s (%s)\n\0").unwrap();
        assert_eq!(l.version, v("0.9.8"));
        assert_eq!(l.release_name.as_deref(), Some("E.D.S."));
    }

    #[test]
    fn program_literal_needs_its_whole_shape() {
        for data in [
            &b"\0x\x001.0.6\0nftables\0%s v%s\n\0"[..],
            b"\0x\x001.0.6\0iptables\0%s v%s (%s)\n\0",
            b"\0x\x001.0.6\0nftables\0%s v%s (%s)\n",
            b"\0x\x00one\0nftables\0%s v%s (%s)\n\0",
            b"\x001.0.6\0nftables\0%s v%s (%s)\n\0",
        ] {
            assert_eq!(
                program_version(data),
                Err(LiteralError::Missing),
                "{data:?}"
            );
        }
        let two = b"\0a\x001.0.6\0nftables\0%s v%s (%s)\n\0b\x001.1.3\0nftables\0%s v%s (%s)\n\0";
        assert_eq!(program_version(two), Err(LiteralError::Several(2)));
        // An unprintable release name is left out, the version still stands.
        let l = program_version(b"\0\x01\x02\x001.1.3\0nftables\0%s v%s (%s)\n\0").unwrap();
        assert_eq!((l.version, l.release_name), (v("1.1.3"), None));
    }
}
