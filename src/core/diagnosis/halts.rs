//! Which changes the controller's waves halted, told from its `RolloutHalted` Events (on the
//! failing workload and on the source object), which outlive its memory. The message is
//! written here and read here, so the two cannot drift apart.

pub const HALT_REASON: &str = "RolloutHalted";

const HALTED_AT: &str = " halted at ";
const CHANGE: &str = ": change ";
const WAIT: &str = " workload(s) wait";

/// What a `RolloutHalted` Event says: `source`'s change `change` (12 hex digits, the id
/// `<domain>/resume` takes) halted at the rollout of `failing` (`Deployment shop/web`), and
/// `waiting` workloads wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halt {
    pub source: String,
    pub change: String,
    pub failing: String,
    pub waiting: usize,
}

impl Halt {
    /// The Event's message; `cause` says why the rollout failed, `resume_key` is
    /// `<domain>/resume`.
    pub fn message(&self, cause: &str, resume_key: &str) -> String {
        let Halt { source, change, failing, waiting } = self;
        format!(
            "{source}{CHANGE}{change}{HALTED_AT}{failing}, {cause}; {waiting}{WAIT}. It goes on \
             when that rollout completes, or with {resume_key}: \"{change}\" on {source}"
        )
    }

    /// Reads a message [`Halt::message`] wrote; anything else is `None`.
    pub fn parse(message: &str) -> Option<Halt> {
        let (source, rest) = message.split_once(CHANGE)?;
        let (change, rest) = rest.split_once(HALTED_AT)?;
        let (failing, rest) = rest.split_once(", ")?;
        let (_, rest) = rest.split_once("; ")?;
        let (waiting, _) = rest.split_once(WAIT)?;
        let hex = change.len() == 12 && change.bytes().all(|b| b.is_ascii_hexdigit());
        hex.then(|| Halt {
            source: source.to_owned(),
            change: change.to_owned(),
            failing: failing.to_owned(),
            waiting: waiting.parse().unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halt_reads_back_as_it_was_written() {
        let halt = Halt {
            source: "secret/db".into(),
            change: "0123456789ab".into(),
            failing: "Deployment shop/web".into(),
            waiting: 7,
        };
        let message =
            halt.message("its rollout failed (ProgressDeadlineExceeded)", "configsum.dev/resume");
        assert_eq!(
            message,
            "secret/db: change 0123456789ab halted at Deployment shop/web, its rollout failed \
             (ProgressDeadlineExceeded); 7 workload(s) wait. It goes on when that rollout \
             completes, or with configsum.dev/resume: \"0123456789ab\" on secret/db"
        );
        assert_eq!(Halt::parse(&message), Some(halt));
        let image = Halt { source: "image ghcr.io:443/acme/web:1".into(), ..halt_of("a") };
        assert_eq!(Halt::parse(&image.message("x", "example.com/resume")), Some(image));
    }

    fn halt_of(failing: &str) -> Halt {
        Halt {
            source: "secret/db".into(),
            change: "fedcba987654".into(),
            failing: failing.into(),
            waiting: 0,
        }
    }

    #[test]
    fn other_words_are_no_halt() {
        assert_eq!(Halt::parse("configsum rolled it"), None);
        assert_eq!(
            Halt::parse("secret/db: change <script> halted at x, y; 1 workload(s) wait"),
            None
        );
    }
}
