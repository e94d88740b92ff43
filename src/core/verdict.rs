//! Verdicts: what will become of a workload's digests, in the words `configsum explain` and
//! the controller's `configsum_controller_workloads{verdict}` gauge share
//! (docs/explain.md). Pure: the caller has observed what is recorded and what is current.

use super::mutate::Skip;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// The recorded digest matches the input now.
    Current,
    /// It differs: the controller rolls the workload (unless another verdict says why not).
    Stale,
    /// No digest recorded yet: the controller leaves it to the next write of the workload.
    FirstObservation,
    /// `<domain>/enabled: "false"`.
    OptedOut,
    /// Owned by a controller, which writes its template (a Deployment's ReplicaSet).
    ControllerOwned,
    /// An input that does not count: its owner's `<domain>/ignore: "true"`, or outside
    /// `--object-selector`. It gets no digest, and nothing rolls on its account.
    Untracked,
    /// A kind whose pods never restart for new configuration: Jobs, Pods, `rolls: false`.
    NotRolling,
    /// The flap guard holds it.
    Held,
    /// `<domain>/paused: "true"`: the controller never rolls it while set.
    Paused,
    /// Outside its maintenance window (`<domain>/roll-window`): it rolls at the next opening.
    WaitingWindow,
    /// Waiting behind a change halted by a failed rollout (docs/behaviour.md, "Rolling
    /// safely").
    Halted,
    /// Cannot be told: a Secret without the digest key, an input that could not be read.
    Unknown,
}

impl Verdict {
    /// Every verdict, in the order a gauge lists them.
    pub const ALL: [Verdict; 12] = [
        Verdict::Current,
        Verdict::Stale,
        Verdict::FirstObservation,
        Verdict::OptedOut,
        Verdict::ControllerOwned,
        Verdict::Untracked,
        Verdict::NotRolling,
        Verdict::Held,
        Verdict::Paused,
        Verdict::WaitingWindow,
        Verdict::Halted,
        Verdict::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Current => "current",
            Verdict::Stale => "stale",
            Verdict::FirstObservation => "first-observation",
            Verdict::OptedOut => "opted-out",
            Verdict::ControllerOwned => "controller-owned",
            Verdict::Untracked => "untracked",
            Verdict::NotRolling => "not-rolling",
            Verdict::Held => "held",
            Verdict::Paused => "paused",
            Verdict::WaitingWindow => "waiting-window",
            Verdict::Halted => "halted",
            Verdict::Unknown => "unknown",
        }
    }

    /// The verdict of a workload the webhook skips, if the skip is one a user would ask about.
    pub fn of_skip(skip: Skip) -> Option<Verdict> {
        match skip {
            Skip::Disabled => Some(Verdict::OptedOut),
            Skip::ControllerOwned => Some(Verdict::ControllerOwned),
            _ => None,
        }
    }

    /// One input's verdict: what is recorded on the template against what it is now
    /// (`None`: not known).
    pub fn of_input(recorded: Option<&str>, current: Option<&str>) -> Verdict {
        match (recorded, current) {
            (None, _) => Verdict::FirstObservation,
            (Some(_), None) => Verdict::Unknown,
            (Some(recorded), Some(current)) if recorded == current => Verdict::Current,
            (Some(_), Some(_)) => Verdict::Stale,
        }
    }
}

/// Written as its word (`first-observation`), as the JSON output documents it.
impl serde::Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_get_their_verdict_and_verdicts_their_words() {
        assert_eq!(Verdict::of_input(None, Some("sha256:a")), Verdict::FirstObservation);
        assert_eq!(Verdict::of_input(Some("sha256:a"), Some("sha256:a")), Verdict::Current);
        assert_eq!(Verdict::of_input(Some("sha256:a"), Some("sha256:b")), Verdict::Stale);
        assert_eq!(Verdict::of_input(Some("hmac-sha256:a"), None), Verdict::Unknown);
        let names: Vec<&str> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(
            names,
            [
                "current",
                "stale",
                "first-observation",
                "opted-out",
                "controller-owned",
                "untracked",
                "not-rolling",
                "held",
                "paused",
                "waiting-window",
                "halted",
                "unknown"
            ]
        );
        assert_eq!(Verdict::of_skip(Skip::Disabled), Some(Verdict::OptedOut));
        assert_eq!(Verdict::of_skip(Skip::Kind), None);
    }
}
