//! Request URIs as the API server should see them. kube's request builders start every query
//! with `?` and then put `&` before each parameter (form_urlencoded counts the path as part of
//! the query), so kube 5 sends `…/events?&fieldManager=configsum`, and `…/secrets?` when
//! there is no parameter at all. The API server accepts both, but its audit log records them
//! as sent. This layer, on every client configsum builds ([`super::api_client`]), drops the
//! empty parameters before a request leaves: the one place that covers kube's builders, the
//! `Api` methods and kube-runtime's watcher alike.

use std::borrow::Cow;

use hyper::http::uri::PathAndQuery;
use hyper::{Request, Uri};
use kube::client::Body;
use tower::util::MapRequestLayer;

/// The layer: each request's URI through [`well_formed`].
pub type WellFormedQueryLayer = MapRequestLayer<fn(Request<Body>) -> Request<Body>>;

pub fn layer() -> WellFormedQueryLayer {
    MapRequestLayer::new(well_formed::<Body>)
}

/// `request` with its path and query through [`clean_path_and_query`]; a URI that would not
/// parse once cleaned (it cannot: only separators are removed) is sent as it was.
pub fn well_formed<B>(mut request: Request<B>) -> Request<B> {
    let Some(sent) = request.uri().path_and_query() else { return request };
    let Cow::Owned(clean) = clean_path_and_query(sent.as_str()) else { return request };
    let mut parts = request.uri().clone().into_parts();
    let Ok(path_and_query) = PathAndQuery::try_from(clean) else { return request };
    parts.path_and_query = Some(path_and_query);
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
    request
}

/// The parameters of the query joined by single `&`s, none empty; no `?` without a
/// parameter after it. Borrowed when already so.
pub fn clean_path_and_query(sent: &str) -> Cow<'_, str> {
    let Some((path, query)) = sent.split_once('?') else { return Cow::Borrowed(sent) };
    let mut parameters = query.split('&').filter(|p| !p.is_empty()).peekable();
    if parameters.peek().is_none() {
        return Cow::Owned(path.to_owned());
    }
    let clean = format!("{path}?{}", parameters.collect::<Vec<_>>().join("&"));
    if clean == sent { Cow::Borrowed(sent) } else { Cow::Owned(clean) }
}

/// A client whose requests go through [`layer`] to nothing but a recorder: the tests of each
/// request configsum builds assert the URI the API server would get.
/// A client whose requests go through [`layer`] to nothing but a recorder: the tests of each
/// request configsum builds assert the URI the API server would get.
#[cfg(test)]
pub mod recording {
    use std::sync::{Arc, Mutex};

    use hyper::{Request, Response, StatusCode};
    use kube::Client;
    use kube::client::Body;
    use tower::{Layer as _, service_fn};

    /// An empty list, which a LIST or a watcher's first page takes for an answer; anything
    /// else fails to decode it, which is no matter when only the request is asserted.
    pub const EMPTY_LIST: &str =
        r#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"7"},"items":[]}"#;
    /// A 404's body.
    pub const NOT_FOUND: &str =
        r#"{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}"#;

    /// The client, answering each request [`EMPTY_LIST`], and the requests it sent.
    pub fn client() -> (Client, Arc<Mutex<Vec<String>>>) {
        client_answering(|_| (200, EMPTY_LIST.to_owned()))
    }

    /// The client, answering each request with `answer`'s status and body, and the method and
    /// URI (path and query) of each request it sent, in order.
    pub fn client_answering(
        answer: impl Fn(&Request<Body>) -> (u16, String) + Clone + Send + Sync + 'static,
    ) -> (Client, Arc<Mutex<Vec<String>>>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let record = sent.clone();
        let recorder = service_fn(move |request: Request<Body>| {
            if let Ok(mut sent) = record.lock() {
                sent.push(format!("{} {}", request.method(), request.uri()));
            }
            let (status, body) = answer(&request);
            async move {
                let mut response = Response::new(Body::from(body.into_bytes()));
                *response.status_mut() = StatusCode::from_u16(status).unwrap_or_default();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (Client::new(super::layer().layer(recorder), "default"), sent)
    }

    /// The requests the recorder has seen so far.
    pub fn sent(record: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
        record.lock().map(|sent| sent.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_empty_parameters_and_a_bare_question_mark() {
        for (sent, clean) in [
            (
                "/api/v1/namespaces/a/events?&fieldManager=configsum",
                "/api/v1/namespaces/a/events?fieldManager=configsum",
            ),
            ("/api/v1/namespaces/a/secrets?", "/api/v1/namespaces/a/secrets"),
            ("/api/v1/pods?&&limit=5&&continue=x&", "/api/v1/pods?limit=5&continue=x"),
            ("/api/v1/pods?&", "/api/v1/pods"),
        ] {
            assert_eq!(clean_path_and_query(sent), clean, "{sent}");
            let request = Request::builder().uri(sent).body(()).map_err(|e| e.to_string());
            let request = well_formed(request.expect("a request"));
            assert_eq!(request.uri().to_string(), clean);
        }
    }

    #[test]
    fn leaves_a_well_formed_uri_and_its_encoding_alone() {
        for sent in [
            "/api/v1/namespaces/a/configmaps/db",
            "/api/v1/pods?labelSelector=app%3Dweb&limit=5",
            "/apis/apps/v1/deployments?watch=true&timeoutSeconds=290",
        ] {
            assert!(matches!(clean_path_and_query(sent), Cow::Borrowed(_)), "{sent}");
            let request = Request::builder().uri(sent).body(()).map_err(|e| e.to_string());
            assert_eq!(well_formed(request.expect("a request")).uri().to_string(), sent);
        }
    }

    #[test]
    fn keeps_scheme_and_authority_of_an_absolute_uri() {
        let request = Request::builder()
            .uri("https://10.0.0.1:6443/api/v1/namespaces/a/events?&fieldManager=configsum")
            .body(())
            .map_err(|e| e.to_string());
        assert_eq!(
            well_formed(request.expect("a request")).uri().to_string(),
            "https://10.0.0.1:6443/api/v1/namespaces/a/events?fieldManager=configsum"
        );
    }
}
