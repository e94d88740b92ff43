//! A notice: one moment of the controller's (a roll, a would-be roll, a hold, a halt...) as
//! the facts a webhook target is told, built where its Kubernetes Event is built. Plain
//! values: nothing here knows the controller's types, so the formats are tested alone.

use std::fmt;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NoticeKind {
    /// A workload was patched.
    Rolled,
    /// A dry run would have patched it.
    WouldRoll,
    /// The flap guard stopped a source from rolling it.
    Held,
    /// The flap guard let it roll again.
    Released,
    /// A failed or late rollout halted a change's waves.
    Halted,
    /// An operator's `resume` let a halted change go on.
    Resumed,
    /// It waits for its maintenance window.
    WaitingWindow,
}

impl NoticeKind {
    pub const ALL: [NoticeKind; 7] = [
        NoticeKind::Rolled,
        NoticeKind::WouldRoll,
        NoticeKind::Held,
        NoticeKind::Released,
        NoticeKind::Halted,
        NoticeKind::Resumed,
        NoticeKind::WaitingWindow,
    ];

    /// The word the notify file and the CloudEvents type use.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Rolled => "rolled",
            NoticeKind::WouldRoll => "would-roll",
            NoticeKind::Held => "held",
            NoticeKind::Released => "released",
            NoticeKind::Halted => "halted",
            NoticeKind::Resumed => "resumed",
            NoticeKind::WaitingWindow => "waiting-window",
        }
    }

    pub fn parse(word: &str) -> Option<NoticeKind> {
        NoticeKind::ALL.into_iter().find(|kind| kind.as_str() == word)
    }
}

impl fmt::Display for NoticeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An object by kind and name: a Secret, a ConfigMap, a workload; an image tag has no
/// namespace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Named {
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

/// The workload a notice is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoticeWorkload {
    /// `Deployment`.
    pub kind: String,
    /// `deployments`: the resource as API paths write it.
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

/// One moment to tell the targets that want its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// Unique per notice, kept across retries (a receiver may drop duplicates by it).
    pub id: String,
    pub kind: NoticeKind,
    pub workload: NoticeWorkload,
    /// What changed (or what is held, halted...), in order.
    pub sources: Vec<Named>,
    /// The first 12 hex digits of the new value's digest, where there is one.
    pub digest: Option<String>,
    /// Free text, as the Event says it.
    pub reason: String,
    pub time: jiff::Timestamp,
}

impl Notice {
    /// A notice of `kind` about `workload` now, with a fresh id.
    pub fn new(kind: NoticeKind, workload: NoticeWorkload, reason: String) -> Notice {
        Notice {
            id: fresh_id(),
            kind,
            workload,
            sources: Vec::new(),
            digest: None,
            reason,
            time: jiff::Timestamp::now(),
        }
    }
}

/// 128 random bits as 32 hex digits; a counter-and-clock fallback where the system's
/// randomness is unavailable, still unique within the process.
fn fresh_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_err() {
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let count = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = jiff::Timestamp::now().as_nanosecond();
        bytes[..8].copy_from_slice(&count.to_be_bytes());
        bytes[8..].copy_from_slice(&(nanos as u64).to_be_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_the_notify_file_writes_them() {
        for kind in NoticeKind::ALL {
            assert_eq!(NoticeKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(NoticeKind::parse("would_roll"), None);
        let workload = NoticeWorkload {
            kind: "Deployment".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            name: "web".into(),
        };
        let (a, b) = (
            Notice::new(NoticeKind::Rolled, workload.clone(), String::new()),
            Notice::new(NoticeKind::Rolled, workload, String::new()),
        );
        assert_eq!(a.id.len(), 32);
        assert_ne!(a.id, b.id);
    }
}
