//! The `WWW-Authenticate` challenge of a registry's 401 (RFC 7235 syntax, as the distribution
//! token specification uses it): `Bearer realm="https://auth.example/token",service="registry"`,
//! or `Basic realm="..."`. Several challenges may share one header; Bearer is preferred.
//!
//! The header is the registry's, so it is read with bounds: at most [`MAX_HEADER`] bytes, and a
//! realm that is not an absolute http(s) URL is no challenge at all.

/// Longest header read; a longer one is not a challenge the client answers.
pub const MAX_HEADER: usize = 8 * 1024;

/// What a 401 asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// The token handshake: a GET of `realm?service=..&scope=..`.
    Bearer { realm: String, service: Option<String> },
    /// Basic credentials sent to the registry itself.
    Basic,
}

impl Challenge {
    /// The challenge a client answers, from every `WWW-Authenticate` value of the response.
    pub fn parse<'a>(headers: impl IntoIterator<Item = &'a [u8]>) -> Option<Challenge> {
        let mut basic = false;
        let mut read = 0;
        for header in headers {
            read += header.len();
            if read > MAX_HEADER {
                return None;
            }
            let text = std::str::from_utf8(header).ok()?;
            for (scheme, params) in challenges(text) {
                if scheme.eq_ignore_ascii_case("bearer") {
                    let realm = param(&params, "realm")?;
                    let lower = realm.to_ascii_lowercase();
                    if !(lower.starts_with("https://") || lower.starts_with("http://")) {
                        return None;
                    }
                    let service = param(&params, "service");
                    return Some(Challenge::Bearer { realm, service });
                }
                basic |= scheme.eq_ignore_ascii_case("basic");
            }
        }
        basic.then_some(Challenge::Basic)
    }
}

fn param(params: &[(String, String)], name: &str) -> Option<String> {
    params.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
}

/// Splits a header into `(scheme, [(name, value)])`. A new challenge starts at a token that is
/// not followed by `=`; anything malformed ends the parse with what was read so far.
fn challenges(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut rest = text.trim_start_matches([' ', '\t', ',']);
    while !rest.is_empty() {
        let end = rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        let (token, after) = rest.split_at(end);
        let after_spaces = after.trim_start_matches([' ', '\t']);
        if let Some(value_start) = after_spaces.strip_prefix('=') {
            // A parameter of the current challenge.
            let value_start = value_start.trim_start_matches([' ', '\t']);
            let Some((value, remaining)) = read_value(value_start) else { break };
            match out.last_mut() {
                Some((_, params)) => params.push((token.to_owned(), value)),
                None => break,
            }
            rest = remaining.trim_start_matches([' ', '\t', ',']);
        } else {
            out.push((token.to_owned(), Vec::new()));
            rest = after.trim_start_matches([' ', '\t', ',']);
        }
    }
    out
}

/// A quoted string (with `\` escapes) or a token, and what follows it.
fn read_value(text: &str) -> Option<(String, &str)> {
    if let Some(quoted) = text.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => return Some((value, &quoted[i + 1..])),
                '\\' => value.push(chars.next()?.1),
                c => value.push(c),
            }
        }
        return None;
    }
    let end = text.find([',', ' ', '\t']).unwrap_or(text.len());
    (end > 0).then(|| (text[..end].to_owned(), &text[end..]))
}

/// RFC 7230 `tchar`, plus `/` for token68 values such as Basic's.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~/:".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(headers: &[&str]) -> Option<Challenge> {
        Challenge::parse(headers.iter().map(|h| h.as_bytes()))
    }

    fn bearer(realm: &str, service: Option<&str>) -> Option<Challenge> {
        Some(Challenge::Bearer { realm: realm.to_owned(), service: service.map(str::to_owned) })
    }

    #[test]
    fn real_registries_challenges() {
        // Docker Hub, GHCR, Quay, Harbor.
        assert_eq!(
            parse(&[
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull""#
            ]),
            bearer("https://auth.docker.io/token", Some("registry.docker.io"))
        );
        assert_eq!(
            parse(&[
                r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:o/a:pull""#
            ]),
            bearer("https://ghcr.io/token", Some("ghcr.io"))
        );
        assert_eq!(
            parse(&[r#"Bearer realm="https://quay.io/v2/auth",service="quay.io""#]),
            bearer("https://quay.io/v2/auth", Some("quay.io"))
        );
        assert_eq!(parse(&[r#"Basic realm="Registry Realm""#]), Some(Challenge::Basic));
        assert_eq!(parse(&["basic"]), Some(Challenge::Basic));
    }

    #[test]
    fn bearer_is_preferred_and_parameters_may_be_spaced_or_escaped() {
        assert_eq!(
            parse(&[r#"Basic realm="x", Bearer realm = "https://a/t" , service="s\"q""#]),
            bearer("https://a/t", Some("s\"q"))
        );
        assert_eq!(
            parse(&[r#"Basic realm="x""#, r#"Bearer realm=https://a/t"#]),
            bearer("https://a/t", None)
        );
    }

    #[test]
    fn malformed_or_hostile_challenges_are_none() {
        for header in [
            "",
            "Bearer",
            r#"Bearer service="s""#,
            r#"Bearer realm="ftp://a/t""#,
            r#"Bearer realm="/relative""#,
            r#"Bearer realm="https://a/t"#,
            "Digest realm=\"x\"",
            "=====",
        ] {
            assert_eq!(parse(&[header]), None, "{header:?}");
        }
        let huge = format!(r#"Bearer realm="https://a/{}""#, "x".repeat(MAX_HEADER));
        assert_eq!(parse(&[&huge]), None);
        let many = vec!["Basic"; MAX_HEADER];
        assert_eq!(parse(&many), None, "the bound counts every header");
    }
}
