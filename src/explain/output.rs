//! explain's answers, as JSON for scripts (`configsum.dev/v1alpha1`, kinds `Explanation` and
//! `WorkloadExplanation`, docs/explain.md) and as tables for people. Digests only: never a
//! value of a Secret.

use serde::Serialize;

use crate::config::ExplainOutput;
use crate::core::diagnosis::rollout::Rollout;
use crate::core::diagnosis::{InputLine, Tracker, Why};
use crate::core::verdict::Verdict;

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
    /// What could not be read, and why: the answer may be incomplete.
    pub unread: Vec<String>,
}

/// The answer about a workload.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadExplanation {
    /// `deployment/web`, as asked.
    pub workload: String,
    pub namespace: String,
    pub exists: bool,
    pub digest_key: bool,
    /// `None` when it does not exist.
    pub verdict: Option<Verdict>,
    pub inputs: Vec<InputLine>,
    pub rollout: Option<Rollout>,
    pub unread: Vec<String>,
}

/// An answer, written for people or for scripts.
pub trait Written {
    fn json(&self) -> String;
    fn text(&self) -> String;

    fn written(&self, output: ExplainOutput) -> String {
        match output {
            ExplainOutput::Json => self.json(),
            ExplainOutput::Text => self.text(),
        }
    }
}

/// One object as JSON: `apiVersion`, `kind`, then its fields; a trailing newline.
fn versioned(kind: &str, answer: &impl Serialize) -> String {
    let mut value = serde_json::json!({"apiVersion": "configsum.dev/v1alpha1", "kind": kind});
    if let (Some(out), Ok(serde_json::Value::Object(fields))) =
        (value.as_object_mut(), serde_json::to_value(answer))
    {
        out.extend(fields);
    }
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// Rows under a header, each column as wide as its widest cell.
fn table<const N: usize>(out: &mut String, header: [&str; N], rows: &[[String; N]]) {
    let header = header.map(str::to_owned);
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().chain([&header]).map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in [&header].into_iter().chain(rows) {
        let cells: Vec<String> =
            row.iter().zip(&widths).map(|(cell, width)| format!("{cell:width$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
}

/// Under a table, why rows read `paused`, `waiting-window` or `halted`: one line per reason,
/// naming the rows it is given for (the workloads waiting behind one halt share one).
fn reasons<'a>(out: &mut String, rows: impl Iterator<Item = (String, Verdict, &'a Why)>) {
    let mut said: Vec<(Vec<String>, Verdict, &str)> = Vec::new();
    for (row, verdict, why) in rows {
        let Some(because) = why.because.as_deref() else { continue };
        match said.iter_mut().find(|(_, v, b)| *v == verdict && *b == because) {
            Some((rows, _, _)) => rows.push(row),
            None => said.push((vec![row], verdict, because)),
        }
    }
    for (rows, verdict, because) in said {
        out.push_str(&format!("{}: {verdict}: {because}\n", rows.join(", ")));
    }
}

/// The notes under a table: what could not be read.
fn notes(out: &mut String, unread: &[String]) {
    for why in unread {
        out.push_str(&format!("(not read: {why})\n"));
    }
}

impl Written for WorkloadExplanation {
    fn json(&self) -> String {
        versioned("WorkloadExplanation", self)
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let Some(verdict) = self.verdict else {
            out.push_str(&format!("{} in {}: it does not exist\n", self.workload, self.namespace));
            notes(&mut out, &self.unread);
            return out;
        };
        let inputs = match self.inputs.len() {
            0 => "tracks nothing".to_owned(),
            1 => "1 input".to_owned(),
            n => format!("{n} inputs"),
        };
        out.push_str(&format!("{} in {}: {verdict}, {inputs}\n", self.workload, self.namespace));
        let rows: Vec<[String; 5]> = self
            .inputs
            .iter()
            .map(|line| {
                let what = match (&line.keys, &line.reference) {
                    (Some(keys), _) => keys.join(","),
                    (None, Some(reference)) => reference.clone(),
                    (None, None) => "-".to_owned(),
                };
                [
                    line.input.clone(),
                    what,
                    line.verdict.to_string(),
                    short(line.recorded.as_deref()),
                    short(line.current.as_deref()),
                ]
            })
            .collect();
        if !rows.is_empty() {
            table(&mut out, ["INPUT", "KEYS/IMAGE", "VERDICT", "RECORDED", "CURRENT"], &rows);
        }
        let why = self.inputs.iter().map(|line| (line.input.clone(), line.verdict, &line.why));
        reasons(&mut out, why);
        if let Some(rollout) = &self.rollout {
            out.push_str(&format!("pods: {}\n", rollout.message));
        }
        if !self.digest_key && self.inputs.iter().any(|line| line.input.starts_with("secret/")) {
            out.push_str("(no digest key: a Secret's current digest cannot be told)\n");
        }
        notes(&mut out, &self.unread);
        out
    }
}

impl Written for Explanation {
    fn json(&self) -> String {
        versioned("Explanation", self)
    }

    fn text(&self) -> String {
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
        if !rows.is_empty() {
            table(&mut out, ["WORKLOAD", "KEYS", "VERDICT", "RECORDED", "CURRENT"], &rows);
        }
        let why =
            self.workloads.iter().map(|t| (format!("{}/{}", t.kind, t.name), t.verdict, &t.why));
        reasons(&mut out, why);
        if !self.digest_key && self.object.starts_with("secret/") {
            out.push_str("(no digest key: a Secret's current digest cannot be told)\n");
        }
        notes(&mut out, &self.unread);
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
