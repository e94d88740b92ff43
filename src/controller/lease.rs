//! Leader election through a `coordination.k8s.io/v1` Lease: the holder
//! renews it every `duration / 5`; another replica takes it over once it has
//! not been renewed for `duration`, and a stopping leader releases it at once.
//!
//! A leader counts itself the leader only until two thirds of the duration
//! after its last successful renewal began (client-go's renew deadline), so
//! a leader that cannot renew — even one whose calls hang — stops patching
//! before any other replica can take the Lease over.
//!
//! With `--shard I/N` each shard has its own Lease (`model::shard`). Shards of two counts
//! overlap during a change of N, so a replica that does not lead yet will not begin while a
//! Lease of another count is held: it checks before taking its Lease and again after (a
//! LIST, which the API server answers from etcd), and gives the Lease back if another count
//! appeared in between. A leader already at work never yields to a newcomer; newcomers that
//! meet each other both yield and try again after a random delay. So the namespaces of one
//! count are handed to the next once, when the last of the old count has stopped.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

pub use super::model::leadership::Leadership;
use super::model::shard::Shard;

pub struct LeaderElector {
    api: Api<Lease>,
    /// `--lease-name`: every count of shards names its Leases after it.
    base: String,
    /// This shard's Lease.
    name: String,
    shard: Shard,
    identity: String,
    duration: Duration,
}

/// What one try of the campaign found.
#[derive(Debug, PartialEq, Eq)]
enum Campaign {
    Leading,
    Following,
    /// Another count of shards still holds this Lease: not taken, or given back.
    Waiting {
        lease: String,
        gave_back: bool,
    },
}

impl LeaderElector {
    /// `duration` is at least a second (checked with the command line).
    pub fn new(
        client: Client,
        namespace: &str,
        base: &str,
        shard: Shard,
        identity: &str,
        duration: Duration,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            base: base.to_owned(),
            name: shard.lease_name(base),
            shard,
            identity: identity.to_owned(),
            duration,
        }
    }

    /// Campaigns until `stop`, publishing this replica's leadership.
    pub async fn run(self, leadership: watch::Sender<Leadership>, mut stop: watch::Receiver<bool>) {
        let period = self.duration / 5;
        let renew_deadline = self.duration * 2 / 3;
        let mut current = Leadership::default();
        let mut waiting_for = None;
        loop {
            let started = Instant::now();
            let mut pause = period;
            // Bounded: a hung call must not outlive the next renewal.
            let newcomer = !current.is_leading(started);
            let attempt = tokio::time::timeout(period, self.campaign(newcomer)).await;
            let now = Instant::now();
            match attempt {
                Ok(Ok(Campaign::Leading)) => {
                    if !current.is_leading(now) {
                        current.term += 1;
                        info!(identity = %self.identity, lease = %self.name, shard = %self.shard, term = current.term, "became the leader");
                    }
                    current.until = Some(started + renew_deadline);
                    waiting_for = None;
                }
                Ok(Ok(Campaign::Following)) => current.until = None,
                Ok(Ok(Campaign::Waiting { lease, gave_back })) => {
                    current.until = None;
                    if waiting_for.as_ref() != Some(&lease) {
                        info!(lease = %self.name, shard = %self.shard, held = %lease, "waiting: another count of shards still holds its Lease");
                    }
                    waiting_for = Some(lease);
                    // Two newcomers that met each other both gave back: they try again apart.
                    if gave_back {
                        pause += period.mul_f64(crate::notify::retry::random_jitter());
                    }
                }
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
                _ = tokio::time::sleep(pause) => {}
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

    /// One try: renew; or, for a `newcomer`, take the Lease if it is free, unless another
    /// count of shards holds one, looking again once taken. A standby whose Lease is held
    /// lists nothing.
    async fn campaign(&self, newcomer: bool) -> Result<Campaign, kube::Error> {
        let now = Timestamp::now();
        let lease = self.api.get_opt(&self.name).await?;
        let spec = lease.as_ref().and_then(|l| l.spec.clone()).unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !mine && is_held(&spec, now) {
            return Ok(Campaign::Following);
        }
        if newcomer {
            if let Some(lease) = self.other_count_holding().await? {
                return Ok(Campaign::Waiting { lease, gave_back: false });
            }
        }
        if !self.take_or_renew(lease, spec, mine, now).await? {
            return Ok(Campaign::Following);
        }
        if newcomer {
            if let Some(lease) = self.other_count_holding().await? {
                self.release().await?;
                return Ok(Campaign::Waiting { lease, gave_back: true });
            }
        }
        Ok(Campaign::Leading)
    }

    /// A Lease of another count of shards that is held and not expired, if any.
    async fn other_count_holding(&self) -> Result<Option<String>, kube::Error> {
        let leases = self.api.list(&ListParams::default()).await?;
        let now = Timestamp::now();
        let held: Vec<(String, bool)> = leases
            .items
            .iter()
            .filter_map(|l| Some((l.metadata.name.clone()?, is_held(l.spec.as_ref()?, now))))
            .collect();
        let names = held.iter().map(|(name, live)| (name.as_str(), *live));
        Ok(self.shard.waits_for(&self.base, names).map(str::to_owned))
    }

    /// Writes the Lease as this replica's: created if `lease` is `None`, renewed if `mine`,
    /// else taken over (it is free or expired). `Ok(false)` if another writer came first.
    async fn take_or_renew(
        &self,
        lease: Option<Lease>,
        spec: LeaseSpec,
        mine: bool,
        now: Timestamp,
    ) -> Result<bool, kube::Error> {
        let Some(mut lease) = lease else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: Some(self.spec(now, None, 0)),
            };
            return conflict_is_false(self.api.create(&super::post_params(), &lease).await);
        };
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if mine {
            self.spec(now, spec.acquire_time, transitions)
        } else {
            self.spec(now, None, transitions + 1)
        });
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

/// A holder, renewed within its duration (15 s if the Lease does not say).
fn is_held(spec: &LeaseSpec, now: Timestamp) -> bool {
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    let expired = spec
        .renew_time
        .as_ref()
        .is_none_or(|t| t.0.checked_add(duration).is_ok_and(|end| end < now));
    !holder.is_empty() && !expired
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
        let elector = electing(client, Shard::default());
        let _ = elector.campaign(false).await;
        let held = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
            "metadata":{"name":"configsum","resourceVersion":"3"},"spec":{"holderIdentity":"me"}}"#;
        let (client, replaced) = recording::client_answering(|_| (200, held.to_owned()));
        let elector = electing(client, Shard::default());
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

    fn electing(client: Client, shard: Shard) -> LeaderElector {
        LeaderElector::new(client, "ops", "configsum", shard, "me", Duration::from_secs(15))
    }

    /// A Lease list holding `leases` (name, holder), each renewed just now.
    fn lease_list(leases: &[(&str, &str)]) -> String {
        let now = Timestamp::now();
        let items: Vec<serde_json::Value> = leases
            .iter()
            .map(|(name, holder)| {
                serde_json::json!({
                    "metadata": {"name": name, "resourceVersion": "5"},
                    "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                             "renewTime": MicroTime(now)}
                })
            })
            .collect();
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                           "metadata": {"resourceVersion": "9"}, "items": items})
        .to_string()
    }

    const MINE: &str = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
        "metadata":{"name":"configsum-0-of-3","resourceVersion":"3"},"spec":{"holderIdentity":"me"}}"#;

    /// A shard of 3 that does not lead yet, its Lease free, waits while a shard of 2 holds
    /// its Lease: it lists, and does not take its own. A standby whose Lease is held by its
    /// leader lists nothing.
    #[tokio::test]
    async fn a_newcomer_waits_while_another_count_holds_a_lease() {
        use crate::lookup::well_formed_query::recording::{self, NOT_FOUND};
        let listed = lease_list(&[("configsum-1-of-2", "old"), ("configsum-1-of-3", "peer")]);
        let answer = move |request: &hyper::Request<kube::client::Body>| {
            if request.uri().path().ends_with("/leases") {
                (200, listed.clone())
            } else {
                (404, NOT_FOUND.to_owned())
            }
        };
        let (client, sent) = recording::client_answering(answer);
        let shard = Shard::parse("0/3").expect("shard");
        let campaign = electing(client, shard).campaign(true).await.expect("campaign");
        let wanted = Campaign::Waiting { lease: "configsum-1-of-2".into(), gave_back: false };
        assert_eq!(campaign, wanted);
        let leases = "/apis/coordination.k8s.io/v1/namespaces/ops/leases";
        let mine = format!("{leases}/configsum-0-of-3");
        assert_eq!(recording::sent(&sent), [format!("GET {mine}"), format!("GET {leases}")]);

        let held = lease_list(&[("configsum-0-of-3", "leader")]);
        let held: serde_json::Value = serde_json::from_str(&held).expect("a list");
        let mut held = held["items"][0].clone();
        held["apiVersion"] = "coordination.k8s.io/v1".into();
        held["kind"] = "Lease".into();
        let (client, sent) = recording::client_answering(move |_| (200, held.to_string()));
        let campaign = electing(client, shard).campaign(true).await.expect("campaign");
        assert_eq!(campaign, Campaign::Following);
        assert_eq!(recording::sent(&sent), [format!("GET {mine}")]);
    }

    /// Two newcomers of different counts that took their Leases at once: the one that sees
    /// the other after taking its own gives it back. A leader at work renews without looking.
    #[tokio::test]
    async fn a_newcomer_that_meets_another_count_after_taking_its_lease_gives_it_back() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use crate::lookup::well_formed_query::recording;
        let lists = std::sync::Arc::new(AtomicUsize::new(0));
        let answer = move |request: &hyper::Request<kube::client::Body>| {
            let path = request.uri().path();
            match (request.method().as_str(), path.ends_with("/leases")) {
                ("GET", true) if lists.fetch_add(1, Ordering::SeqCst) == 0 => {
                    (200, lease_list(&[("configsum-0-of-2", "")]))
                }
                ("GET", true) => (200, lease_list(&[("configsum-0-of-2", "old")])),
                _ => (200, MINE.to_owned()),
            }
        };
        let (client, sent) = recording::client_answering(answer);
        let shard = Shard::parse("0/3").expect("shard");
        let campaign = electing(client, shard).campaign(true).await.expect("campaign");
        let wanted = Campaign::Waiting { lease: "configsum-0-of-2".into(), gave_back: true };
        assert_eq!(campaign, wanted);
        let leases = "/apis/coordination.k8s.io/v1/namespaces/ops/leases";
        let mine = format!("{leases}/configsum-0-of-3");
        assert_eq!(
            recording::sent(&sent),
            [
                format!("GET {mine}"),
                format!("GET {leases}"),
                format!("PUT {mine}?fieldManager=configsum"),
                format!("GET {leases}"),
                format!("GET {mine}"),
                format!("PUT {mine}?fieldManager=configsum"),
            ]
        );

        let (client, sent) = recording::client_answering(|_| (200, MINE.to_owned()));
        let campaign = electing(client, shard).campaign(false).await.expect("campaign");
        assert_eq!(campaign, Campaign::Leading);
        assert_eq!(
            recording::sent(&sent),
            [format!("GET {mine}"), format!("PUT {mine}?fieldManager=configsum")]
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
