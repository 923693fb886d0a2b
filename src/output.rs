//! `-o json|yaml|text` for every subcommand that prints a result.

use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Yaml,
    #[default]
    Text,
}

/// Serialize `value` as JSON or YAML; `None` for `Text` (the caller renders its own text).
pub fn render_structured<T: Serialize>(
    value: &T,
    format: Format,
) -> anyhow::Result<Option<String>> {
    Ok(match format {
        Format::Json => Some(serde_json::to_string_pretty(value)? + "\n"),
        Format::Yaml => Some(serde_yaml::to_string(value)?),
        Format::Text => None,
    })
}

/// Text for a terminal. Tenants name images, pods and annotations that
/// reach `check` and `status` output: a control character other than a
/// newline or a tab (an ANSI escape, a carriage return, a backspace) or a
/// bidirectional override is shown as its escape (`\u{1b}`), so the output
/// cannot recolour, overwrite or reorder what the operator reads.
pub fn terminal_safe(text: String) -> String {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_and_bidi_overrides_are_shown_not_obeyed() {
        let plain = "Pod/ns/a\tdeny\n  [OldReaderNewRules] é ✓\n".to_string();
        assert_eq!(terminal_safe(plain.clone()), plain);
        assert_eq!(
            terminal_safe("img\u{1b}[2J\rok\u{7}\u{202e}txt\n".into()),
            "img\\u{1b}[2J\\u{d}ok\\u{7}\\u{202e}txt\n"
        );
    }
}
