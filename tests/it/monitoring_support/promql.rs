//! Metric names and labels out of PromQL, with Prometheus' own parser doing
//! the hard part: `promtool promql label-matchers set EXPR nfguard_selector 1`
//! parses the expression and prints it back with that matcher added to every
//! vector selector, so a brace group carrying it is a selector for certain
//! (never a function, keyword or label list). The small lexer here only
//! walks promtool's output.

use std::path::Path;
use std::process::Command;

const MARKER: &str = "nfguard_selector";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub label: String,
    /// =, !=, =~ or !~
    pub op: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub name: String,
    pub matchers: Vec<Matcher>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub selectors: Vec<Selector>,
    /// Labels named in by/without/on/ignoring/group_left/group_right.
    pub grouping: Vec<String>,
}

/// Grafana's interval variables, replaced by sample values before parsing.
const GRAFANA_VARIABLES: [(&str, &str); 4] = [
    ("$__rate_interval", "5m"),
    ("$__interval", "1m"),
    ("$__range", "1h"),
    ("${__range}", "1h"),
];

/// A dashboard expression as Prometheus receives it from Grafana.
pub fn substitute_grafana_variables(expr: &str) -> Result<String, String> {
    let mut out = expr.to_string();
    for (var, value) in GRAFANA_VARIABLES {
        out = out.replace(var, value);
    }
    match out.find('$') {
        Some(i) => Err(format!("unknown Grafana variable at {:?}", &out[i..])),
        None => Ok(out),
    }
}

/// Parse `expr` with promtool; Err carries promtool's message.
pub fn parse(promtool: &Path, expr: &str) -> Result<Parsed, String> {
    let out = Command::new(promtool)
        .args([
            "--experimental",
            "promql",
            "label-matchers",
            "set",
            expr,
            MARKER,
            "1",
        ])
        .output()
        .map_err(|e| format!("running {}: {e}", promtool.display()))?;
    if !out.status.success() {
        return Err(format!(
            "promtool rejects {expr:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    lex(&text).map_err(|e| format!("{e} in promtool's output {text:?}"))
}

const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Walk promtool's marked output.
pub fn lex(text: &str) -> Result<Parsed, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Parsed::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i)?;
        } else if c == '[' {
            // Range or subquery durations.
            i = chars[i..]
                .iter()
                .position(|c| *c == ']')
                .map(|p| i + p + 1)
                .ok_or("unclosed [")?;
        } else if c == '{' {
            let (sel, next) = selector(&chars, i, String::new())?;
            out.selectors.push(sel);
            i = next;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':'))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            if chars.get(i) == Some(&'{') {
                let (sel, next) = selector(&chars, i, word)?;
                out.selectors.push(sel);
                i = next;
            } else if GROUPING.contains(&word.as_str()) && chars.get(j) == Some(&'(') {
                let close = chars[j..]
                    .iter()
                    .position(|c| *c == ')')
                    .map(|p| j + p)
                    .ok_or("unclosed label list")?;
                let list: String = chars[j + 1..close].iter().collect();
                out.grouping.extend(
                    list.split(',')
                        .map(|l| l.trim().trim_matches('"').to_string())
                        .filter(|l| !l.is_empty()),
                );
                i = close + 1;
            }
        } else {
            i += 1;
        }
    }
    Ok(out)
}

/// The end (exclusive) of the quoted string starting at `start`.
fn skip_string(chars: &[char], start: usize) -> Result<usize, String> {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err("unterminated string".into())
}

fn unquote(chars: &[char], start: usize, end: usize) -> String {
    let mut s = String::new();
    let mut i = start + 1;
    while i + 1 < end {
        if chars[i] == '\\' && i + 2 < end {
            i += 1;
        }
        s.push(chars[i]);
        i += 1;
    }
    s
}

/// The selector whose `{` is at `open`; `name` is what preceded it.
fn selector(chars: &[char], open: usize, name: String) -> Result<(Selector, usize), String> {
    let mut matchers = Vec::new();
    let mut i = open + 1;
    loop {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
            i += 1;
        }
        match chars.get(i) {
            None => return Err("unclosed selector".into()),
            Some('}') => break,
            _ => {}
        }
        let label = if chars[i] == '"' {
            let end = skip_string(chars, i)?;
            let l = unquote(chars, i, end);
            i = end;
            l
        } else {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            chars[start..i].iter().collect()
        };
        let op_start = i;
        while i < chars.len() && matches!(chars[i], '=' | '!' | '~') {
            i += 1;
        }
        let op: String = chars[op_start..i].iter().collect();
        if !matches!(op.as_str(), "=" | "!=" | "=~" | "!~") || label.is_empty() {
            return Err(format!("bad matcher {label:?} {op:?}"));
        }
        if chars.get(i) != Some(&'"') {
            return Err(format!("matcher {label}{op} without a quoted value"));
        }
        let end = skip_string(chars, i)?;
        matchers.push(Matcher {
            label,
            op,
            value: unquote(chars, i, end),
        });
        i = end;
    }
    let marked = matchers
        .iter()
        .any(|m| m.label == MARKER && m.op == "=" && m.value == "1");
    if !marked {
        return Err(format!("a brace group without the {MARKER} matcher"));
    }
    matchers.retain(|m| m.label != MARKER);
    let name = if name.is_empty() {
        match matchers.iter().find(|m| m.label == "__name__") {
            Some(m) if m.op == "=" => m.value.clone(),
            _ => return Err("a selector without a plain metric name".into()),
        }
    } else {
        name
    };
    Ok((Selector { name, matchers }, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_grouping_labels_from_marked_output() {
        let p = lex(
            "sum by (le) (rate(a_bucket{le!=\"x,}\",nfguard_selector=\"1\"}[5m]))\n\
             / on (instance) group_left () b{nfguard_selector=\"1\"} and {__name__=\"c\",nfguard_selector=\"1\"}\n\
             or label_replace(vector(1), \"by\", \"x{y}\", \"\", \"\")",
        )
        .unwrap();
        let names: Vec<&str> = p.selectors.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a_bucket", "b", "c"]);
        assert_eq!(
            p.selectors[0].matchers,
            [Matcher {
                label: "le".into(),
                op: "!=".into(),
                value: "x,}".into()
            }]
        );
        assert_eq!(p.grouping, ["le", "instance"]);
        assert!(
            lex("a{b=\"c\"}").is_err(),
            "unmarked braces are not selectors"
        );
    }

    #[test]
    fn grafana_variables() {
        assert_eq!(
            substitute_grafana_variables("rate(x[$__rate_interval])").unwrap(),
            "rate(x[5m])"
        );
        assert!(substitute_grafana_variables("x{job=\"$job\"}").is_err());
    }
}
