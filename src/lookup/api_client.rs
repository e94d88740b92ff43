//! Every client configsum builds for the API server, whichever command builds it: it names
//! the command in its User-Agent ([`crate::user_agent`]) and sends only well-formed request
//! URIs ([`super::well_formed_query`]).

use std::time::Duration;

use hyper::header::USER_AGENT;
use kube::Client;
use kube::client::ClientBuilder;

use super::well_formed_query;
use crate::user_agent::{Caller, header_value};

/// A client for the API server, found in the order docs/flags.md
/// gives: the in-cluster service account, else `KUBECONFIG`, else
/// `~/.kube/config` (kube's own `infer` tries the kubeconfig first).
pub async fn kube_client(caller: Caller) -> Result<Client, kube::Error> {
    kube_client_with(caller, None).await
}

/// The same, failing any call whose connection stays silent for `read_timeout`.
pub async fn kube_client_with(
    caller: Caller,
    read_timeout: Option<Duration>,
) -> Result<Client, kube::Error> {
    let mut config = match kube::Config::incluster() {
        Ok(config) => config,
        Err(_) => {
            kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions::default()).await?
        }
    };
    // No retries: a review has a second or two, a 429 asks us to back off,
    // and a failed lookup only keeps the existing digest.
    config.default_retry = false;
    if read_timeout.is_some() {
        config.read_timeout = read_timeout;
        // Counted from each request, not from when its pooled connection went idle.
        config.reset_reader_on_write = true;
    }
    client_from(config, caller)
}

/// The client of `config` as configsum sends: kube sends no User-Agent of its own, so without
/// this header the audit log shows an empty one.
pub fn client_from(mut config: kube::Config, caller: Caller) -> Result<Client, kube::Error> {
    config.headers.push((USER_AGENT, header_value(caller)));
    Ok(ClientBuilder::try_from(config)?.with_layer(&well_formed_query::layer()).build())
}
