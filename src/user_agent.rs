//! How configsum names itself to the servers it calls: `configsum/<version> (<command>)`, the
//! same string in the API server's audit log and in a registry's access log, so an operator
//! can tell which of configsum's commands sent a request (docs/behaviour.md, "How configsum
//! names itself").

use hyper::header::HeaderValue;

/// The command that sends the request: the part in parentheses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    Serve,
    Controller,
    Explain,
    EnsureDigestKey,
}

impl Caller {
    /// The name the command line gives the command.
    pub fn command(self) -> &'static str {
        match self {
            Caller::Serve => "serve",
            Caller::Controller => "controller",
            Caller::Explain => "explain",
            Caller::EnsureDigestKey => "ensure-digest-key",
        }
    }
}

/// `configsum/<crate version>`: the product alone, for a request no command is known for.
pub const PRODUCT: &str = concat!("configsum/", env!("CARGO_PKG_VERSION"));

/// `configsum/<crate version> (<command>)`.
pub fn user_agent(caller: Caller) -> String {
    format!("{PRODUCT} ({})", caller.command())
}

/// [`user_agent`] as a header value. The string is ours and plain ASCII; were it ever not a
/// valid value, the bare product name is still better than no User-Agent at all.
pub fn header_value(caller: Caller) -> HeaderValue {
    HeaderValue::from_str(&user_agent(caller)).unwrap_or(HeaderValue::from_static(PRODUCT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_version_and_the_command() {
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(user_agent(Caller::Controller), format!("configsum/{version} (controller)"));
        assert_eq!(user_agent(Caller::Serve), format!("configsum/{version} (serve)"));
        assert_eq!(user_agent(Caller::Explain), format!("configsum/{version} (explain)"));
        assert_eq!(
            user_agent(Caller::EnsureDigestKey),
            format!("configsum/{version} (ensure-digest-key)")
        );
        for caller in [Caller::Serve, Caller::Controller, Caller::Explain, Caller::EnsureDigestKey]
        {
            assert_eq!(header_value(caller).to_str().ok(), Some(user_agent(caller).as_str()));
        }
    }
}
