//! The Prometheus/OpenMetrics text format as nfguard serves it on /metrics:
//! families (`# TYPE`), their samples' label names and values.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub struct Family {
    pub name: String,
    /// counter, gauge, histogram, ...
    pub kind: String,
    pub samples: usize,
    /// Label name -> values seen in the samples (`le` included).
    pub labels: BTreeMap<String, BTreeSet<String>>,
}

impl Family {
    /// The series names Prometheus stores for this family.
    pub fn series_names(&self) -> Vec<String> {
        match self.kind.as_str() {
            "counter" => vec![format!("{}_total", self.name)],
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{}{s}", self.name))
                .collect(),
            _ => vec![self.name.clone()],
        }
    }

    /// The name users query (and the docs list): `_total` for counters.
    pub fn query_name(&self) -> String {
        match self.kind.as_str() {
            "counter" => format!("{}_total", self.name),
            _ => self.name.clone(),
        }
    }

    /// Label names without the histogram's `le`.
    pub fn label_names(&self) -> BTreeSet<String> {
        self.labels.keys().filter(|l| *l != "le").cloned().collect()
    }
}

#[derive(Debug, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
}

impl Exposition {
    /// The family a stored series name belongs to (`x_total` -> counter `x`).
    pub fn family_of(&self, series: &str) -> Option<&Family> {
        self.families
            .values()
            .find(|f| f.series_names().iter().any(|n| n == series))
    }
}

/// Parse the text exposition. Samples must follow their family's `# TYPE`.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut out = Exposition::default();
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let at = |m: &str| format!("line {}: {m}: {line:?}", i + 1);
        if line.is_empty() || line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| at("TYPE without a type"))?;
            out.families.insert(
                name.to_string(),
                Family {
                    name: name.to_string(),
                    kind: kind.to_string(),
                    ..Default::default()
                },
            );
            current = Some(name.to_string());
            continue;
        }
        if line.starts_with('#') {
            continue; // HELP, UNIT
        }
        let (name, labels) = sample(line).map_err(|e| at(&e))?;
        let family = current
            .as_ref()
            .and_then(|c| out.families.get_mut(c))
            .filter(|f| f.series_names().contains(&name) || name == format!("{}_created", f.name))
            .ok_or_else(|| at("sample outside its family"))?;
        family.samples += 1;
        for (k, v) in labels {
            family.labels.entry(k).or_default().insert(v);
        }
    }
    Ok(out)
}

/// `name{a="x",b="y"} value`: the name and the labels.
fn sample(line: &str) -> Result<(String, Vec<(String, String)>), String> {
    let end = line.find(['{', ' ']).ok_or("a sample needs a value")?;
    let name = line[..end].to_string();
    let mut labels = Vec::new();
    if line[end..].starts_with('{') {
        let mut chars = line[end + 1..].chars().peekable();
        loop {
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            if chars.next() != Some('"') {
                return Err(format!("label {key}: value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")? {
                    '\\' => value.push(chars.next().ok_or("dangling escape")?),
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((key.trim().to_string(), value));
            match chars.next() {
                Some(',') if chars.peek() == Some(&'}') => {
                    chars.next();
                    break;
                }
                Some(',') => {}
                Some('}') => break,
                other => return Err(format!("expected , or }} after a label, got {other:?}")),
            }
        }
    }
    Ok((name, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_labels() {
        let e = parse(
            "# HELP a_seconds x\n# TYPE a_seconds histogram\n\
             a_seconds_sum{kind=\"Pod\"} 1\na_seconds_bucket{kind=\"Pod\",le=\"0.5\"} 1\n\
             # TYPE c counter\nc_total{v=\"a\\\"b\"} 2\n# TYPE g gauge\n# EOF\n",
        )
        .unwrap();
        assert_eq!(e.family_of("a_seconds_bucket").unwrap().name, "a_seconds");
        assert!(
            e.family_of("a_seconds").is_none(),
            "a histogram has no bare series"
        );
        assert!(e.family_of("c").is_none(), "a counter is stored as _total");
        let c = e.family_of("c_total").unwrap();
        assert_eq!(c.labels["v"].iter().next().unwrap(), "a\"b");
        assert_eq!(e.families["a_seconds"].label_names().len(), 1);
        assert_eq!(e.families["g"].samples, 0);
        assert!(parse("# TYPE g gauge\nother 1\n").is_err());
        assert!(parse("x{a=1} 2\n").is_err());
    }
}
