//! Leader election through a `coordination.k8s.io/v1` Lease: the holder
//! renews it every `duration / 5`; another replica takes it over once it has
//! not been renewed for `duration`, and a stopping leader releases it at once.
//!
//! A leader counts itself the leader only until two thirds of the duration
//! after its last successful renewal began (client-go's renew deadline), so
//! a leader that cannot renew — even one whose calls hang — stops patching
//! before any other replica can take the Lease over.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

pub use super::model::leadership::Leadership;

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaderElector {
    /// `duration` is at least a second (checked with the command line).
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration,
        }
    }

    /// Campaigns until `stop`, publishing this replica's leadership.
    pub async fn run(self, leadership: watch::Sender<Leadership>, mut stop: watch::Receiver<bool>) {
        let period = self.duration / 5;
        let renew_deadline = self.duration * 2 / 3;
        let mut current = Leadership::default();
        loop {
            let started = Instant::now();
            // Bounded: a hung call must not outlive the next renewal.
            let attempt = tokio::time::timeout(period, self.try_acquire_or_renew()).await;
            let now = Instant::now();
            match attempt {
                Ok(Ok(true)) => {
                    if !current.is_leading(now) {
                        current.term += 1;
                        info!(identity = %self.identity, lease = %self.name, term = current.term, "became the leader");
                    }
                    current.until = Some(started + renew_deadline);
                }
                Ok(Ok(false)) => current.until = None,
                Ok(Err(e)) => warn!(error = %e, "cannot reach the Lease"),
                Err(_) => warn!(timeout = ?period, "the Lease call timed out"),
            }
            if current.until.is_some() && !current.is_leading(now) {
                warn!(identity = %self.identity, "could not renew the Lease in time; no longer leading");
                current.until = None;
            }
            leadership.send_if_modified(|published| {
                let changed = *published != current;
                *published = current;
                changed
            });
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.changed() => break,
            }
        }
        if current.until.is_some() {
            let _ = leadership.send(Leadership { term: current.term, until: None });
            match tokio::time::timeout(period, self.release()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn!(error = %e, "cannot release the Lease; it expires on its own"),
                Err(_) => warn!("releasing the Lease timed out; it expires on its own"),
            }
        }
    }

    fn spec(&self, now: Timestamp, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// `Ok(true)` while this replica holds the Lease.
    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: Some(self.spec(now, None, 0)),
            };
            return conflict_is_false(self.api.create(&super::post_params(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0);
        if holder == self.identity {
            lease.spec = Some(self.spec(now, spec.acquire_time, transitions));
        } else {
            let duration =
                SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
            let expired = spec
                .renew_time
                .is_none_or(|t| t.0.checked_add(duration).is_ok_and(|end| end < now));
            if !holder.is_empty() && !expired {
                return Ok(false);
            }
            lease.spec = Some(self.spec(now, None, transitions + 1));
        }
        // The resourceVersion in `lease` guards against a concurrent writer.
        conflict_is_false(self.api.replace(&self.name, &super::post_params(), &lease).await)
    }

    /// Gives the Lease up so that another replica takes over at its next try.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else { return Ok(()) };
        if lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
            != Some(self.identity.as_str())
        {
            return Ok(());
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        self.api.replace(&self.name, &super::post_params(), &lease).await.map(|_| ())
    }
}

fn conflict_is_false<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Lease's writes as the API server gets them: `?fieldManager=configsum`, nothing else.
    #[tokio::test]
    async fn the_lease_is_created_and_replaced_with_the_field_manager_only() {
        use crate::lookup::well_formed_query::recording::{self, NOT_FOUND};
        let (client, sent) = recording::client_answering(|_| (404, NOT_FOUND.to_owned()));
        let elector = LeaderElector::new(client, "ops", "configsum", "me", Duration::from_secs(15));
        let _ = elector.try_acquire_or_renew().await;
        let held = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
            "metadata":{"name":"configsum","resourceVersion":"3"},"spec":{"holderIdentity":"me"}}"#;
        let (client, replaced) = recording::client_answering(|_| (200, held.to_owned()));
        let elector = LeaderElector::new(client, "ops", "configsum", "me", Duration::from_secs(15));
        let _ = elector.release().await;
        let leases = "/apis/coordination.k8s.io/v1/namespaces/ops/leases";
        assert_eq!(
            recording::sent(&sent),
            [format!("GET {leases}/configsum"), format!("POST {leases}?fieldManager=configsum")]
        );
        assert_eq!(
            recording::sent(&replaced),
            [
                format!("GET {leases}/configsum"),
                format!("PUT {leases}/configsum?fieldManager=configsum")
            ]
        );
    }

    #[test]
    fn leadership_lapses_at_its_deadline_and_belongs_to_its_term() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let leading = Leadership { term: 3, until: Some(now + s(10)) };
        assert!(leading.is_leading(now));
        assert!(!leading.is_leading(now + s(10)));
        assert_eq!(leading.remaining(3, now + s(4)), Some(s(6)));
        assert_eq!(leading.remaining(2, now), None, "work of an earlier term is not acted on");
        assert_eq!(leading.remaining(3, now + s(11)), None);
        assert!(!Leadership::default().is_leading(now));
    }
}
