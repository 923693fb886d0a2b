//! Choosing one manifest out of an image index (pure).

use super::Platform;
use oci_client::manifest::ImageIndexEntry;

impl Platform {
    fn matches(&self, os: &str, arch: &str, variant: Option<&str>) -> bool {
        if self.os != os || self.architecture != arch {
            return false;
        }
        match (&self.variant, variant) {
            (None, _) => true,
            (Some(want), Some(have)) => want == have,
            // arm64 without a variant means v8 by convention.
            (Some(want), None) => arch == "arm64" && want == "v8",
        }
    }
}

fn describe(entry: &ImageIndexEntry) -> Option<String> {
    let p = entry.platform.as_ref()?;
    let mut s = format!("{}/{}", p.os, p.architecture);
    if let Some(v) = &p.variant {
        s.push('/');
        s.push_str(v);
    }
    Some(s)
}

/// The digest of the first entry matching `want`, else the platforms on offer.
pub fn select(entries: &[ImageIndexEntry], want: &Platform) -> Result<String, Vec<String>> {
    entries
        .iter()
        .find(|e| {
            e.platform.as_ref().is_some_and(|p| {
                want.matches(
                    &p.os.to_string(),
                    &p.architecture.to_string(),
                    p.variant.as_deref(),
                )
            })
        })
        .map(|e| e.digest.clone())
        .ok_or_else(|| entries.iter().filter_map(describe).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(digest: &str, json_platform: serde_json::Value) -> ImageIndexEntry {
        serde_json::from_value(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest, "size": 1, "platform": json_platform
        }))
        .unwrap()
    }

    #[test]
    fn picks_matching_arch_and_variant() {
        let entries = vec![
            entry(
                "sha256:a",
                serde_json::json!({"os":"linux","architecture":"amd64"}),
            ),
            entry(
                "sha256:b",
                serde_json::json!({"os":"linux","architecture":"arm","variant":"v7"}),
            ),
            entry(
                "sha256:c",
                serde_json::json!({"os":"linux","architecture":"arm64"}),
            ),
        ];
        let p = |s: &str| s.parse::<Platform>().unwrap();
        assert_eq!(select(&entries, &p("linux/amd64")).unwrap(), "sha256:a");
        assert_eq!(select(&entries, &p("linux/arm/v7")).unwrap(), "sha256:b");
        assert_eq!(select(&entries, &p("linux/arm64/v8")).unwrap(), "sha256:c");
        let missing = select(&entries, &p("linux/s390x")).unwrap_err();
        assert_eq!(missing, vec!["linux/amd64", "linux/arm/v7", "linux/arm64"]);
    }
}
