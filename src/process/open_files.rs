//! The open-file limit. The webhook holds up to 1,024 client connections
//! besides its listeners and API server connections, more than the soft limit
//! of 1,024 that some container runtimes still set.

use rustix::process::{Resource, getrlimit, setrlimit};

/// Raises the soft limit on open files to the hard limit (as the Go runtime
/// does for every Kubernetes component) and returns the limit now in force,
/// or `None` when it is unlimited or cannot be read.
pub fn raise_open_file_limit() -> Option<u64> {
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            return getrlimit(Resource::Nofile).current;
        }
    }
    limit.current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_reaches_the_hard_limit() {
        let mut lowered = getrlimit(Resource::Nofile);
        lowered.current = lowered.maximum.map(|max| max.min(512));
        setrlimit(Resource::Nofile, lowered).expect("lowering the soft limit is always allowed");
        let raised = raise_open_file_limit();
        let now = getrlimit(Resource::Nofile);
        assert_eq!(now.current, now.maximum);
        assert_eq!(raised, now.current);
    }
}
