//! explain's answer, as JSON for scripts (`configsum.dev/v1alpha1`, kind `Explanation`,
//! docs/explain.md) and as a table for people. Digests only: never a value of a Secret.

use serde::Serialize;

use crate::core::explain::Tracker;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `secret/db`.
    pub object: String,
    pub namespace: String,
    /// `--key`, if given.
    pub key: Option<String>,
    /// Whether the object exists (in the files read).
    pub exists: bool,
    /// Whether a digest key was given (without one, Secrets' verdicts are `unknown`).
    pub digest_key: bool,
    pub workloads: Vec<Tracker>,
}

impl Explanation {
    pub fn json(&self) -> String {
        let mut value =
            serde_json::json!({"apiVersion": "configsum.dev/v1alpha1", "kind": "Explanation"});
        if let (Some(out), Ok(serde_json::Value::Object(fields))) =
            (value.as_object_mut(), serde_json::to_value(self))
        {
            out.extend(fields);
        }
        let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
        text.push('\n');
        text
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        let key = self.key.as_ref().map(|k| format!(", key {k}")).unwrap_or_default();
        let exists = if self.exists { "" } else { " (it does not exist)" };
        out.push_str(&format!(
            "{} in {}{key}{exists}: tracked by {} workload{}\n",
            self.object,
            self.namespace,
            self.workloads.len(),
            if self.workloads.len() == 1 { "" } else { "s" }
        ));
        if self.workloads.is_empty() {
            return out;
        }
        let rows: Vec<[String; 5]> = self
            .workloads
            .iter()
            .map(|t| {
                [
                    format!("{}/{}", t.kind, t.name),
                    t.keys.join(","),
                    t.verdict.to_string(),
                    short(t.recorded.as_deref()),
                    short(t.current.as_deref()),
                ]
            })
            .collect();
        let header = ["WORKLOAD", "KEYS", "VERDICT", "RECORDED", "CURRENT"].map(str::to_owned);
        let widths: Vec<usize> = (0..5)
            .map(|i| rows.iter().chain([&header]).map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        for row in [&header].into_iter().chain(&rows) {
            let cells: Vec<String> =
                row.iter().zip(&widths).map(|(cell, width)| format!("{cell:width$}")).collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        if !self.digest_key && self.object.starts_with("secret/") {
            out.push_str("(no --digest-key-file: a Secret's current digest cannot be told)\n");
        }
        out
    }
}

/// A digest as a table shows it: its algorithm and 12 hex digits.
fn short(digest: Option<&str>) -> String {
    match digest {
        None => "-".to_owned(),
        Some(digest) => match digest.split_once(':') {
            Some((algorithm, hex)) if hex.len() > 12 => format!("{algorithm}:{}…", &hex[..12]),
            _ => digest.to_owned(),
        },
    }
}
