//! Leader election through a `coordination.k8s.io/v1` Lease: the holder
//! renews it every `duration / 5`; another replica takes it over once it has
//! not been renewed for `duration`, and a stopping leader releases it at once.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaderElector {
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
            duration: duration.max(Duration::from_secs(1)),
        }
    }

    /// Campaigns until `stop`, publishing whether this replica leads.
    pub async fn run(self, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let period = self.duration / 5;
        let mut last_renewal: Option<tokio::time::Instant> = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    last_renewal = Some(tokio::time::Instant::now());
                    if !*leading.borrow() {
                        info!(identity = %self.identity, lease = %self.name, "became the leader");
                    }
                    let _ = leading.send(true);
                }
                Ok(false) => {
                    let _ = leading.send(false);
                }
                Err(e) => {
                    warn!(error = %e, "cannot reach the Lease");
                    // A leader that cannot renew steps down before another can take over.
                    if last_renewal.is_none_or(|t| t.elapsed() + period >= self.duration) {
                        let _ = leading.send(false);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.changed() => break,
            }
        }
        if *leading.borrow() {
            let _ = leading.send(false);
            if let Err(e) = self.release().await {
                warn!(error = %e, "cannot release the Lease; it expires on its own");
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
            return conflict_is_false(self.api.create(&PostParams::default(), &lease).await);
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
        conflict_is_false(self.api.replace(&self.name, &PostParams::default(), &lease).await)
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
        self.api.replace(&self.name, &PostParams::default(), &lease).await.map(|_| ())
    }
}

fn conflict_is_false<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
