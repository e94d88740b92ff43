//! `configsum ensure-digest-key`: on a fresh install, create the Secret that
//! holds the shared Secret-digest key, with a random key; on every later run,
//! leave whatever is there alone. Run by a Job in the manifests, so that every
//! replica shares one key that survives re-applying and upgrading, is never
//! committed, and can be brought by the user instead.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};
use tracing::info;

use crate::config::EnsureDigestKeyArgs;
use crate::core::DigestKeys;
use crate::core::digest::DigestKeyError;
use crate::core::model::hex::hex;
use crate::user_agent::Caller;

/// What `ensure` found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    /// Already there (the user's own, an earlier install's, or another run's).
    Kept,
}

#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    #[error("cannot find the Kubernetes API: {0}")]
    Config(#[source] kube::Error),
    #[error("cannot read or create Secret {namespace}/{name}: {source}")]
    Api { namespace: String, name: String, source: kube::Error },
    #[error(
        "Secret {namespace}/{name} exists but its key {key:?} is not a usable digest key file: {problem}"
    )]
    Unusable { namespace: String, name: String, key: String, problem: String },
    #[error("cannot get random bytes from the operating system: {0}")]
    Random(String),
}

/// A fresh key file: 32 random bytes as 64 hex digits, one line.
pub fn random_key_file() -> Result<String, EnsureError> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| EnsureError::Random(e.to_string()))?;
    Ok(format!("{}\n", hex(&bytes)))
}

pub async fn run(args: &EnsureDigestKeyArgs) -> Result<Outcome, EnsureError> {
    let client =
        crate::lookup::kube_client(Caller::EnsureDigestKey).await.map_err(EnsureError::Config)?;
    ensure(client, &args.namespace, &args.secret_name, &args.secret_key).await
}

/// Creates `namespace/name` with a random key under `key` unless it exists;
/// an existing Secret must hold a usable key file under `key`.
pub async fn ensure(
    client: Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Outcome, EnsureError> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let api_error = |source| EnsureError::Api {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    };
    if let Some(existing) = api.get_opt(name).await.map_err(api_error)? {
        check_usable(&existing, key).map_err(|problem| EnsureError::Unusable {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
            problem,
        })?;
        info!(secret = %format!("{namespace}/{name}"), "the digest key Secret exists; left as it is");
        return Ok(Outcome::Kept);
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/part-of".to_owned(),
                "configsum".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(key.to_owned(), ByteString(random_key_file()?.into_bytes()))])),
        ..Secret::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            info!(secret = %format!("{namespace}/{name}"), "created the digest key Secret with a random key");
            Ok(Outcome::Created)
        }
        // Another run created it between our GET and POST: theirs stands.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Outcome::Kept),
        Err(e) => Err(api_error(e)),
    }
}

fn check_usable(secret: &Secret, key: &str) -> Result<(), String> {
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or_else(|| "the key is missing".to_owned())?;
    DigestKeys::parse(&value.0).map(|_| ()).map_err(|e: DigestKeyError| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key's Secret is read, then created, with no query at all.
    #[tokio::test]
    async fn the_secret_is_created_with_no_query() {
        use crate::lookup::well_formed_query::recording::{self, NOT_FOUND};
        let (client, sent) = recording::client_answering(|_| (404, NOT_FOUND.to_owned()));
        let _ = ensure(client, "configsum-system", "configsum-digest-key", "keys").await;
        let secrets = "/api/v1/namespaces/configsum-system/secrets";
        assert_eq!(
            recording::sent(&sent),
            [format!("GET {secrets}/configsum-digest-key"), format!("POST {secrets}")]
        );
    }

    #[test]
    fn random_keys_are_usable_and_differ() {
        let (a, b) = (random_key_file().expect("random"), random_key_file().expect("random"));
        assert_ne!(a, b);
        assert_eq!(a.trim().len(), 64);
        assert!(DigestKeys::parse(a.as_bytes()).is_ok());
    }

    #[test]
    fn existing_secrets_must_hold_a_usable_key() {
        let secret = |value: &str| Secret {
            data: Some(BTreeMap::from([(
                "keys".to_owned(),
                ByteString(value.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        };
        assert!(check_usable(&secret("0123456789abcdef\n"), "keys").is_ok());
        assert!(check_usable(&secret("short"), "keys").is_err());
        assert!(check_usable(&secret("0123456789abcdef"), "other").is_err());
    }
}
