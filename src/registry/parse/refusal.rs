//! Why the parser refused a request, as it travels from child to parent:
//! `[kind u8][number u64][text]`. The parent rebuilds the `RegistryError`
//! an in-process parse would have given, naming the layer's digest itself;
//! the child's text is shown only as printable ASCII, cut short (a
//! compromised child is as hostile as the image that compromised it).

use super::super::RegistryError;
use crate::rootfs::{BudgetExhausted, LayerError};

const TAR: u8 = 1;
const TOO_MANY_ENTRIES: u8 = 2;
const LIMIT: u8 = 3;
const BUDGET: u8 = 4;
const IO: u8 = 5;
const DECOMPRESSED_TOO_LARGE: u8 = 6;
const DECOMPRESS: u8 = 7;
const STREAM: u8 = 8;
const OTHER: u8 = 9;

/// Longest child text shown.
const MAX_TEXT: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    kind: u8,
    number: u64,
    text: String,
}

impl Refusal {
    pub fn other(text: impl Into<String>) -> Self {
        Refusal {
            kind: OTHER,
            number: 0,
            text: text.into(),
        }
    }

    /// The child's side: what an in-process parse would have returned.
    pub fn from_error(e: &RegistryError) -> Self {
        let (kind, number, text) = match e {
            RegistryError::Layer { source, .. } => match source {
                LayerError::Tar(t) => (TAR, 0, t.clone()),
                LayerError::TooManyEntries(n) => (TOO_MANY_ENTRIES, *n, String::new()),
                LayerError::Limit(t) => (LIMIT, 0, t.clone()),
                LayerError::Budget(b) => (BUDGET, b.limit, String::new()),
                e @ (LayerError::Io(_) | LayerError::Malformed(_)) => (IO, 0, e.to_string()),
            },
            RegistryError::DecompressedTooLarge { limit, .. } => {
                (DECOMPRESSED_TOO_LARGE, *limit, String::new())
            }
            RegistryError::Decompress { detail, .. } => (DECOMPRESS, 0, detail.clone()),
            RegistryError::BlobStream { got, detail, .. } => (STREAM, *got, detail.clone()),
            e => (OTHER, 0, e.to_string()),
        };
        Refusal { kind, number, text }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.kind];
        v.extend_from_slice(&self.number.to_le_bytes());
        v.extend_from_slice(self.text.as_bytes());
        v
    }

    pub fn decode(payload: &[u8]) -> Self {
        if payload.len() < 9 {
            return Refusal::other("a malformed refusal");
        }
        let number = u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes"));
        let text = String::from_utf8_lossy(&payload[9..]);
        let mut shown: String = text
            .chars()
            .filter(|c| c.is_ascii_graphic() || *c == ' ')
            .take(MAX_TEXT)
            .collect();
        if text.chars().count() > MAX_TEXT {
            shown.push_str("...");
        }
        Refusal {
            kind: payload[0],
            number,
            text: shown,
        }
    }

    /// The parent's side: the error for the layer `digest`.
    pub fn into_error(self, digest: &str) -> RegistryError {
        let digest = digest.to_string();
        let layer = |source| RegistryError::Layer {
            digest: digest.clone(),
            source,
        };
        match self.kind {
            TAR => layer(LayerError::Tar(self.text)),
            TOO_MANY_ENTRIES => layer(LayerError::TooManyEntries(self.number)),
            LIMIT => layer(LayerError::Limit(self.text)),
            BUDGET => layer(LayerError::Budget(BudgetExhausted { limit: self.number })),
            IO => layer(LayerError::Io(std::io::Error::other(self.text))),
            DECOMPRESSED_TOO_LARGE => RegistryError::DecompressedTooLarge {
                digest,
                limit: self.number,
            },
            DECOMPRESS => RegistryError::Decompress {
                digest,
                detail: self.text,
            },
            STREAM => RegistryError::BlobStream {
                digest,
                got: self.number,
                detail: self.text,
            },
            _ => RegistryError::Internal(format!("image parser: {}", self.text)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_rebuild_the_in_process_error() {
        let cases = [
            RegistryError::Layer {
                digest: String::new(),
                source: LayerError::TooManyEntries(500_000),
            },
            RegistryError::Layer {
                digest: String::new(),
                source: LayerError::Budget(BudgetExhausted { limit: 7 }),
            },
            RegistryError::DecompressedTooLarge {
                digest: String::new(),
                limit: 9,
            },
            RegistryError::Decompress {
                digest: String::new(),
                detail: "Frame requires too much memory for decoding".into(),
            },
        ];
        for e in cases {
            let back = Refusal::decode(&Refusal::from_error(&e).encode()).into_error("sha256:ab");
            let want = e.to_string().replace("layer : ", "layer sha256:ab: ");
            let want = want.replace("layer  ", "layer sha256:ab ");
            assert_eq!(back.to_string(), want);
        }
    }

    #[test]
    fn a_childs_text_is_cut_and_stripped() {
        let mut payload = vec![TAR];
        payload.extend_from_slice(&0u64.to_le_bytes());
        payload.extend_from_slice("\u{1b}[2Jbad\nname\u{202e}".as_bytes());
        payload.extend_from_slice(&[b'x'; 2000]);
        let r = Refusal::decode(&payload);
        assert!(r.text.starts_with("[2Jbadname"), "{}", r.text);
        assert_eq!(r.text.len(), MAX_TEXT + 3);
        assert!(Refusal::decode(&[1, 2]).text.contains("malformed"));
    }
}
