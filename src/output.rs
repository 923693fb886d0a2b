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
