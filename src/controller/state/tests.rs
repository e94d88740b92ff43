//! The state machine against scripted watches and reads, on a hand-turned
//! clock: readiness, one read per change, relists, epochs, leadership and
//! failed reads. No sockets, no runtime.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use kube::runtime::watcher::Event;
use serde_json::json;
use tokio::time::Instant;

use super::*;
use crate::controller::model::backoff;
use crate::controller::model::message::ObjectVersion;
use crate::controller::model::trigger::{SourceChange, Trigger};
use crate::controller::model::work::{Reconciled, Work};
use crate::controller::model::workload::WatchedWorkload;
use crate::controller::state::flap_guard::{FlapGuard, FlapLimits};
use crate::controller::state::gate;
use crate::controller::state::objects::judge;
use crate::controller::state::queue::SNAPSHOT_WAIT;
use crate::controller::state::waves::{HALT_REPEAT, WaveLimits, Waves};
use crate::core::model::annotations::AnnotationDomain;
use crate::core::refs::ConsumedKeys;
use crate::core::{DigestKeys, Digester, ObjectContent, ObjectId, ObjectRef, Observation};
use crate::notify::NoticeKind;

const WINDOW: Duration = Duration::from_secs(2);
const HOUR: Duration = Duration::from_secs(3600);

fn db() -> ObjectKey {
    ObjectRef::secret("db").within("ns")
}

fn web() -> WorkloadKey {
    WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: "web".into() }
}

fn version(namespace: Option<&str>, name: &str, resource_version: &str) -> ObjectVersion {
    ObjectVersion {
        namespace: namespace.map(str::to_owned),
        name: Some(name.to_owned()),
        resource_version: Some(resource_version.to_owned()),
        annotations: Vec::new(),
    }
}

/// The state, the objects its reads find, and what it handed out.
struct Harness {
    state: State,
    now: Instant,
    digester: Digester,
    store: HashMap<ObjectKey, (BTreeMap<String, Vec<u8>>, String)>,
    failing: HashSet<ObjectKey>,
    reads: Vec<ObjectKey>,
    work: Vec<Work>,
    events: Vec<k8s_openapi::api::core::v1::Event>,
    notices: Vec<crate::notify::Notice>,
    outcomes: Vec<gate::WaveOutcome>,
    /// The pod templates template reads find, and the reads made.
    templates: HashMap<WorkloadKey, serde_json::Value>,
    template_reads: Vec<WorkloadKey>,
    epoch: u64,
}

impl Harness {
    fn new() -> Self {
        Harness::with_flap_limits(FlapLimits::default())
    }

    fn with_flap_limits(flap: FlapLimits) -> Self {
        Harness::with_gates(vec![Box::new(FlapGuard::new(flap))])
    }

    fn with_gates(gates: Vec<Box<dyn Gate>>) -> Self {
        Harness::with_gates_and(gates, Settings::default())
    }

    fn with_gates_and(gates: Vec<Box<dyn Gate>>, settings: Settings) -> Self {
        let options = Options {
            settings,
            own_namespace: "configsum".into(),
            shard: Shard::default(),
            window: WINDOW,
            min_interval: Duration::ZERO,
            poll_interval: HOUR,
            gates,
        };
        let state = State::new(options);
        let digester =
            Digester::new(DigestKeys::parse(b"0123456789abcdef0123456789abcdef").expect("key"));
        let mut harness = Harness {
            state,
            now: Instant::now(),
            digester,
            store: HashMap::new(),
            failing: HashSet::new(),
            reads: Vec::new(),
            work: Vec::new(),
            events: Vec::new(),
            notices: Vec::new(),
            outcomes: Vec::new(),
            templates: HashMap::new(),
            template_reads: Vec::new(),
            epoch: 0,
        };
        harness.lead(1);
        harness
    }

    fn lead(&mut self, term: u64) {
        self.state.lead(Leadership { term, until: Some(self.now + HOUR) }, self.now);
        self.settle();
    }

    fn step_down(&mut self, term: u64) {
        self.state.lead(Leadership { term, until: None }, self.now);
        self.settle();
    }

    fn put_secret(&mut self, password: &str, resource_version: &str) {
        let data = BTreeMap::from([("password".to_owned(), password.as_bytes().to_vec())]);
        self.store.insert(db(), (data, resource_version.to_owned()));
    }

    fn digest_of(&self, password: &str) -> String {
        let data = BTreeMap::from([("password".to_owned(), password.as_bytes().to_vec())]);
        let object = db();
        let id = ObjectId { namespace: &object.namespace, object: &object.object };
        let content = ObjectContent::from_entries(data);
        self.digester.digest(id, &content, &ConsumedKeys::All, None)
    }

    /// `web` in `namespace`, reading Secret db, its annotation recording `password`.
    fn deployment(
        &self,
        namespace: &str,
        password: &str,
        resource_version: &str,
    ) -> WatchedWorkload {
        let value = json!({"metadata": {"name": "web", "namespace": namespace, "resourceVersion": resource_version},
            "spec": {"template": {
                "metadata": {"annotations": {"secret.configsum.dev/db": self.digest_of(password)}},
                "spec": {"containers": [{"name": "c", "image": "app:1",
                    "envFrom": [{"secretRef": {"name": "db"}}]}]}}}});
        serde_json::from_value(value).expect("a watched Deployment")
    }

    fn send(&mut self, message: Message) {
        self.state.handle(message, self.now);
        self.settle();
    }

    /// Hands out what is due and answers every read from the store.
    fn settle(&mut self) {
        loop {
            let effects = self.state.tick(self.now);
            self.work.extend(effects.work);
            self.events.extend(effects.events);
            self.notices.extend(effects.notices);
            self.outcomes.extend(effects.wave_outcomes);
            if effects.reads.is_empty() && effects.template_reads.is_empty() {
                return;
            }
            for workload in effects.template_reads {
                self.template_reads.push(workload.clone());
                let found = self.templates.get(&workload).cloned();
                let message = Message::Template(Box::new((workload, Ok(found))));
                self.state.handle(message, self.now);
            }
            for request in effects.reads {
                self.reads.push(request.object.clone());
                let result = if self.failing.contains(&request.object) {
                    Err("HTTP 500".to_owned())
                } else {
                    let found = self.store.get(&request.object);
                    let content = found.map(|(data, _)| ObjectContent::from_entries(data.clone()));
                    let version = found.map(|(_, v)| v.clone());
                    let (digester, trackers) = (&self.digester, &request.trackers);
                    Ok(judge(&request.object, content.as_ref(), version, digester, trackers))
                };
                self.state.handle(Message::Read(Box::new((request.object, result))), self.now);
            }
        }
    }

    fn wait(&mut self, duration: Duration) {
        self.now += duration;
        self.settle();
    }

    fn list_namespaces(&mut self, names: &[&str]) {
        self.send(Message::Namespace(Event::Init));
        for name in names {
            self.send(Message::Namespace(Event::InitApply(version(None, name, "1"))));
        }
        self.send(Message::Namespace(Event::InitDone));
    }

    fn start_workload_watches(&mut self) {
        assert!(self.state.wants_workload_watches());
        self.epoch += 1;
        self.state.workload_watches_started(self.epoch, &[WorkloadKind::Deployment]);
    }

    fn list_workloads(&mut self, epoch: u64, workloads: Vec<WatchedWorkload>) {
        self.list_workloads_of(WorkloadKind::Deployment, epoch, workloads);
    }

    fn list_workloads_of(
        &mut self,
        kind: WorkloadKind,
        epoch: u64,
        workloads: Vec<WatchedWorkload>,
    ) {
        for workload in &workloads {
            if let (Some(key), Some(template)) = (workload.key(kind), workload.template(kind)) {
                self.templates.insert(key, template);
            }
        }
        let mut send = |event| {
            self.send(Message::Workload { kind, partition: None, epoch, event: Box::new(event) })
        };
        send(Event::Init);
        for workload in workloads {
            send(Event::InitApply(workload));
        }
        send(Event::InitDone);
    }

    fn list_objects(&mut self, kind: ObjectKind) {
        self.send(Message::Object(kind, None, Event::Init));
        let listed: Vec<ObjectVersion> = self
            .store
            .iter()
            .filter(|(key, _)| key.object.kind == kind)
            .map(|(key, (_, rv))| version(Some(&key.namespace), &key.object.name, rv))
            .collect();
        for object in listed {
            self.send(Message::Object(kind, None, Event::InitApply(object)));
        }
        self.send(Message::Object(kind, None, Event::InitDone));
    }

    /// Lists everything: `web` current with the Secret.
    fn started() -> Self {
        Harness::started_with(Harness::new())
    }

    fn started_with(mut h: Harness) -> Self {
        h.put_secret("one", "10");
        h.list_namespaces(&["ns"]);
        h.start_workload_watches();
        let web = h.deployment("ns", "one", "5");
        h.list_workloads(1, vec![web]);
        for kind in ObjectKind::all() {
            h.list_objects(kind);
        }
        assert!(h.state.ready());
        h
    }

    fn secret_changed(&mut self, password: &str, resource_version: &str) {
        self.put_secret(password, resource_version);
        let event = Event::Apply(version(Some("ns"), "db", resource_version));
        self.send(Message::Object(ObjectKind::Secret, None, event));
    }

    /// The digest a read handed on for web's next reconciliation.
    fn fresh(&self) -> Option<Observation> {
        Some(self.state.objects.fresh_of(&web(), &db().object)?.observation.clone())
    }
}

#[test]
fn ready_once_every_watch_listed_and_every_tracked_object_was_read() {
    let mut h = Harness::new();
    h.put_secret("one", "10");
    assert!(!h.state.wants_workload_watches(), "not before the namespaces are known");
    h.list_namespaces(&["ns", "configsum", "kube-system"]);
    h.start_workload_watches();
    assert!(!h.state.wants_workload_watches());
    let web = h.deployment("ns", "one", "5");
    h.list_workloads(1, vec![web]);
    assert_eq!((h.state.workloads(), h.state.watched_objects()), (1, 1));
    h.list_objects(ObjectKind::ConfigMap);
    assert!(!h.state.ready(), "the Secret watch has not listed yet");
    assert!(h.reads.is_empty(), "nothing is read while listing");
    h.list_objects(ObjectKind::Secret);
    assert!(h.state.ready());
    assert_eq!(h.reads, [db()], "the baseline: each tracked object once");
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "its digest is current");
}

#[test]
fn a_secret_change_is_read_once_and_rolls_its_workload_when_the_window_closes() {
    let mut h = Harness::started();
    h.secret_changed("two", "11");
    assert_eq!(h.reads.len(), 2, "the baseline, then one read for the change");
    assert_eq!(h.fresh(), Some(Observation::Digest(h.digest_of("two"))), "handed on");
    // The same version again (a resync): nothing to read.
    h.send(Message::Object(
        ObjectKind::Secret,
        None,
        Event::Apply(version(Some("ns"), "db", "11")),
    ));
    assert_eq!(h.reads.len(), 2);
    h.wait(WINDOW - Duration::from_millis(1));
    assert!(h.work.is_empty(), "the window is still open");
    h.wait(Duration::from_millis(1));
    assert_eq!(h.work.len(), 1);
    let work = &h.work[0];
    assert_eq!((work.due.key.clone(), work.due.term), (web(), 1));
    assert!(work.due.triggers.contains(&Trigger::Object(ObjectRef::secret("db"))));
    let fresh = work.fresh.get(&ObjectRef::secret("db")).map(|f| f.observation.clone());
    assert_eq!(fresh, Some(Observation::Digest(h.digest_of("two"))), "travels in its work");
    assert_eq!(h.fresh(), None, "taken along");
}

/// `web` as the watch delivers it: recording `password`, at `resource_version`.
fn watched(h: &mut Harness, password: &str, resource_version: &str) {
    let web = h.deployment("ns", password, resource_version);
    apply(h, web);
}

/// A Deployment as the watch of epoch 1 delivers it.
fn apply(h: &mut Harness, workload: WatchedWorkload) {
    let event = Box::new(Event::Apply(workload));
    h.send(Message::Workload { kind: WorkloadKind::Deployment, partition: None, epoch: 1, event });
}

fn patched_from(h: &mut Harness, work: Work, resource_version: &str) {
    let generation = work.snapshot.as_ref().and_then(|s| s.rollout.generation);
    let result = Ok(Reconciled::Patched { from: Some(resource_version.into()), generation });
    h.send(Message::Reconciled(Box::new((work.due, result))));
}

/// The resourceVersion of the snapshot `work` carries.
fn version_of(work: &Work) -> Option<&str> {
    work.snapshot.as_ref()?.resource_version.as_deref()
}

#[test]
fn content_back_to_what_an_outdated_snapshot_records_still_rolls() {
    // web records "one". The Secret becomes "two"; web is being patched to record it when
    // the Secret goes back to "one". Judged against the snapshot the patch replaces, the
    // read finds web current: it must roll all the same, or web would record "two" forever.
    let mut h = Harness::started();
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    let work = h.work.pop().expect("due");
    assert_eq!(version_of(&work), Some("5"));
    h.secret_changed("one", "12");
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "web is in the worker");
    patched_from(&mut h, work, "5");
    assert!(h.work.is_empty(), "came due meanwhile, and waits for the patched version");

    // The watch delivers the first patch (recording "two"): the work goes out on it.
    watched(&mut h, "two", "6");
    let work = h.work.pop().expect("due on the patched version");
    assert_eq!(version_of(&work), Some("6"));
    let fresh = work.fresh.get(&ObjectRef::secret("db")).map(|f| f.observation.clone());
    assert_eq!(fresh, Some(Observation::Digest(h.digest_of("one"))), "handed on");

    // The second patch, from it, records "one", and is not watched yet when the Secret
    // becomes "two" again: due all the same; with the watch slow, judged on what there is
    // once the wait is over.
    patched_from(&mut h, work, "6");
    h.secret_changed("two", "13");
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "held for the patched version");
    h.wait(SNAPSHOT_WAIT);
    let work = h.work.pop().expect("this replica's own patch is not watched yet: due");
    assert_eq!(version_of(&work), Some("6"));

    // Once the watch delivers the patched version, a current digest is current again.
    watched(&mut h, "one", "7");
    patched_from(&mut h, work, "7");
    watched(&mut h, "two", "8");
    h.secret_changed("two", "14");
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "a metadata-only change rolls nothing: {:?}", h.work);
}

#[test]
fn a_relist_finds_a_secret_deleted_while_the_watch_was_down() {
    let mut h = Harness::started();
    h.store.clear();
    h.list_objects(ObjectKind::Secret);
    assert_eq!(h.reads.len(), 2, "read again, and found absent");
    assert_eq!(h.fresh(), Some(Observation::Absent));
    h.wait(WINDOW);
    assert_eq!(h.work.len(), 1, "its digest no longer matches");
}

#[test]
fn a_namespace_opted_in_later_restarts_the_workload_watches_and_old_epochs_are_ignored() {
    let mut h = Harness::started();
    h.send(Message::Namespace(Event::Apply(version(None, "other", "2"))));
    assert!(h.state.wants_workload_watches());
    h.start_workload_watches();
    let late = h.deployment("other", "one", "6");
    let kind = WorkloadKind::Deployment;
    h.send(Message::Workload {
        kind,
        partition: None,
        epoch: 1,
        event: Box::new(Event::Apply(late)),
    });
    assert_eq!(h.state.workloads(), 1, "an event of the stopped watches");
    let (web, other) = (h.deployment("ns", "one", "5"), h.deployment("other", "one", "6"));
    h.list_workloads(2, vec![web, other]);
    assert_eq!(h.state.workloads(), 2);
    assert!(h.state.ready(), "readiness once reached is kept");
    // Opting out forgets the namespace's workloads, and what only they tracked.
    h.send(Message::Namespace(Event::Delete(version(None, "other", "3"))));
    h.send(Message::Namespace(Event::Delete(version(None, "ns", "3"))));
    assert_eq!((h.state.workloads(), h.state.watched_objects()), (0, 0));
}

#[test]
fn stepping_down_drops_queued_work_and_a_new_term_reads_everything_again() {
    let mut h = Harness::started();
    h.secret_changed("two", "11");
    assert!(h.fresh().is_some());
    h.step_down(1);
    assert_eq!(h.fresh(), None, "a follower keeps no digests for reconciliations");
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "a follower hands out no work");
    // A change seen while following is not acted on …
    h.secret_changed("three", "12");
    h.wait(WINDOW);
    assert!(h.work.is_empty());
    // … but the next term reads every tracked object again, and rolls what is stale.
    let reads = h.reads.len();
    h.lead(2);
    assert_eq!(h.reads.len(), reads + 1);
    h.wait(WINDOW);
    assert_eq!(h.work.len(), 1);
    assert_eq!(h.work[0].due.term, 2);
    let fresh = h.work[0].fresh.get(&db().object).map(|f| f.observation.clone());
    assert_eq!(fresh, Some(Observation::Digest(h.digest_of("three"))));
}

#[test]
fn leadership_lapses_by_the_clock_before_the_elector_says_so() {
    let mut h = Harness::started();
    h.state.lead(Leadership { term: 1, until: Some(h.now + Duration::from_secs(1)) }, h.now);
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "not renewed in time: no work");
}

#[test]
fn a_failed_read_is_retried_with_backoff() {
    let mut h = Harness::started();
    h.failing.insert(db());
    h.secret_changed("two", "11");
    assert_eq!(h.reads.len(), 2);
    let retry = h.state.next_due().expect("a retry is due") - h.now;
    assert!(retry >= backoff::FIRST && retry <= 2 * backoff::FIRST, "{retry:?}");
    assert_eq!(h.state.queue_depth(), 1, "the retry waits");
    h.failing.clear();
    h.wait(retry);
    assert_eq!(h.reads.len(), 3);
    h.wait(WINDOW);
    assert_eq!(h.work.len(), 1);
}

#[test]
fn a_kind_served_after_start_up_joins_the_running_watches_and_is_read_then() {
    let mut h = Harness::started();
    let rollout = WorkloadKind::Rollout;
    h.send(Message::KindServed(rollout));
    assert_eq!(h.state.take_kinds_served(), [rollout]);
    assert!(h.state.take_kinds_served().is_empty(), "handed out once");
    h.state.kind_watch_started(h.epoch, rollout);
    assert!(h.state.ready(), "a kind joining later does not make the controller unready");
    let (epoch, web) = (h.epoch, h.deployment("ns", "one", "7"));
    h.list_workloads_of(rollout, epoch, vec![web]);
    assert_eq!(h.state.workloads(), 2, "a Deployment and a Rollout named web");
    assert_eq!(h.reads.len(), 1, "the Secret is tracked already: its baseline stands");
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    let mut due: Vec<WorkloadKind> = h.work.iter().map(|w| w.due.key.kind).collect();
    due.sort();
    assert_eq!(due, [WorkloadKind::Deployment, rollout]);
}

/// A Deployment `name` whose pod runs `image`; `tracks` (with the digest recorded of each, if
/// any) go into its `track` annotation and its template's annotations.
fn workload(name: &str, image: &str, tracks: &[(&str, Option<&str>)], rv: &str) -> WatchedWorkload {
    let track: Vec<String> = tracks.iter().map(|(n, _)| format!("deployment/{n}")).collect();
    let recorded: serde_json::Map<String, serde_json::Value> = tracks
        .iter()
        .filter_map(|(n, d)| Some((format!("deployment.configsum.dev/{n}"), json!((*d)?))))
        .collect();
    let value = json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
            "annotations": {"configsum.dev/track": track.join(",")}},
        "spec": {"template": {"metadata": {"annotations": recorded},
            "spec": {"containers": [{"name": "c", "image": image}]}}}});
    serde_json::from_value(value).expect("a watched Deployment")
}

fn template_digest_of(workload: &WatchedWorkload) -> String {
    let prefixes = crate::core::AnnotationDomain::default().workload_prefixes();
    workload.template_digest(WorkloadKind::Deployment, &prefixes).expect("trackable")
}

fn key(name: &str) -> WorkloadKey {
    WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: name.into() }
}

/// Everything listed, `workloads` the only ones: ready.
fn listed(workloads: Vec<WatchedWorkload>) -> Harness {
    let mut h = Harness::new();
    h.list_namespaces(&["ns"]);
    h.start_workload_watches();
    h.list_workloads(1, workloads);
    for kind in ObjectKind::all() {
        h.list_objects(kind);
    }
    assert!(h.state.ready());
    h
}

#[test]
fn a_tracked_template_change_rolls_its_trackers_once_and_never_a_first_observation() {
    let db = workload("db", "postgres:16", &[], "1");
    let recorded = template_digest_of(&db);
    let keycloak = workload("keycloak", "keycloak:26", &[("db", Some(&recorded))], "2");
    let fresh = workload("fresh", "app:1", &[("db", None)], "3");
    let mut h = listed(vec![db, keycloak, fresh]);
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "every recorded digest is current");

    // `kubectl rollout restart deployment/db`: its template gains an annotation.
    let value = json!({"metadata": {"name": "db", "namespace": "ns", "resourceVersion": "4"},
        "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}},
            "spec": {"containers": [{"name": "c", "image": "postgres:16"}]}}}});
    let event = Event::Apply(serde_json::from_value(value).expect("a watched Deployment"));
    h.send(Message::Workload {
        kind: WorkloadKind::Deployment,
        partition: None,
        epoch: 1,
        event: Box::new(event),
    });
    h.wait(WINDOW);
    let due: Vec<WorkloadKey> = h.work.iter().map(|w| w.due.key.clone()).collect();
    assert_eq!(due, [key("keycloak")], "fresh records no digest: a first observation");
    let triggers: Vec<String> = h.work[0].due.triggers.iter().map(ToString::to_string).collect();
    assert_eq!(triggers, ["deployment/db"]);
    let db_digest = h.state.together.template(&key("db")).cloned().flatten().expect("exists");
    assert_eq!(h.work[0].workloads, [Some(Observation::Digest(db_digest))], "in its work");
}

#[test]
fn a_tracked_template_back_to_what_an_outdated_tracker_records_still_rolls_it() {
    let db = workload("db", "postgres:16", &[], "1");
    let recorded = template_digest_of(&db);
    let keycloak = workload("keycloak", "keycloak:26", &[("db", Some(&recorded))], "2");
    let mut h = listed(vec![db, keycloak]);
    h.wait(WINDOW);
    assert!(h.work.is_empty());
    // db is upgraded: keycloak goes to the worker to record the new digest...
    apply(&mut h, workload("db", "postgres:17", &[], "3"));
    h.wait(WINDOW);
    let work = h.work.pop().expect("keycloak is due");
    // ...and db is rolled back meanwhile, to what keycloak's snapshot still records.
    apply(&mut h, workload("db", "postgres:16", &[], "4"));
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "keycloak is in the worker");
    patched_from(&mut h, work, "2");
    assert!(h.work.is_empty(), "due again, and waits for its patched version");
    let upgraded = template_digest_of(&workload("db", "postgres:17", &[], "3"));
    apply(&mut h, workload("keycloak", "keycloak:26", &[("db", Some(&upgraded))], "5"));
    let work = h.work.pop().expect("due again, not judged current on the old snapshot");
    assert_eq!((&work.due.key, version_of(&work)), (&key("keycloak"), Some("5")));
}

#[test]
fn two_workloads_tracking_each_other_settle_after_one_round() {
    let (a, b) = (workload("a", "a:1", &[], "0"), workload("b", "b:1", &[], "0"));
    let (da, db) = (template_digest_of(&a), template_digest_of(&b));
    let a = workload("a", "a:1", &[("b", Some(&db))], "1");
    let b = workload("b", "b:1", &[("a", Some(&da))], "2");
    assert_eq!(template_digest_of(&a), da, "the tracking annotations are left out");
    let mut h = listed(vec![a, b]);
    h.wait(WINDOW);
    assert!(h.work.is_empty());

    // A new image for a: b is due. Its patch records a's new digest, which changes only b's
    // tracking annotation: a is not due in turn.
    let a2 = workload("a", "a:2", &[("b", Some(&db))], "3");
    let da2 = template_digest_of(&a2);
    apply(&mut h, a2);
    h.wait(WINDOW);
    let due: Vec<WorkloadKey> = h.work.drain(..).map(|w| w.due.key).collect();
    assert_eq!(due, [key("b")]);
    apply(&mut h, workload("b", "b:1", &[("a", Some(&da2))], "4"));
    h.wait(WINDOW * 10);
    assert!(h.work.is_empty(), "settled: {:?}", h.work);
}

#[test]
fn a_secret_that_flaps_is_held_with_an_event_and_rolls_once_when_quiet() {
    let period = Duration::from_secs(60);
    let mut h = Harness::started_with(Harness::with_flap_limits(FlapLimits { limit: 2, period }));
    let patched = |h: &mut Harness| {
        let work = h.work.pop().expect("due");
        h.send(Message::Reconciled(Box::new((
            work.due,
            Ok(Reconciled::Patched { from: None, generation: None }),
        ))));
    };
    for (i, password) in ["two", "three"].iter().enumerate() {
        h.secret_changed(password, &format!("{}", 11 + i));
        h.wait(WINDOW);
        assert_eq!(h.work.len(), 1, "roll {i}");
        patched(&mut h);
    }
    assert!(h.events.is_empty());
    // The third change within the period: held, with one Event and the held verdict.
    h.secret_changed("four", "13");
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "held");
    assert_eq!(h.events.len(), 1);
    assert_eq!(h.events[0].reason.as_deref(), Some("FlapGuard"));
    let message = h.events[0].message.clone().unwrap_or_default();
    assert!(message.contains("secret/db") && message.contains("2 rolls within 1m"), "{message}");
    assert_eq!(h.state.held_workloads(), 1);
    assert_eq!(h.state.verdicts(), [(Verdict::Held, 1)]);
    // Its notice, built beside the Event: the workload, the Secret, the Event's words.
    assert_eq!(h.notices.len(), 1);
    let held = &h.notices[0];
    assert_eq!(held.kind, NoticeKind::Held);
    assert_eq!(
        (held.workload.resource.as_str(), held.workload.name.as_str()),
        ("deployments", "web")
    );
    assert_eq!((held.sources[0].kind.as_str(), held.sources[0].name.as_str()), ("Secret", "db"));
    assert_eq!(Some(held.reason.as_str()), h.events[0].message.as_deref());
    // Still flapping: still held, no second Event.
    h.wait(Duration::from_secs(30));
    h.secret_changed("five", "14");
    h.wait(WINDOW);
    assert!(h.work.is_empty() && h.events.len() == 1);
    // Said again each period while it holds, the Event is; the notice only once.
    h.wait(period - Duration::from_secs(10));
    h.secret_changed("six", "15");
    h.wait(WINDOW);
    assert!(h.work.is_empty() && h.events.len() == 2, "{:?}", h.events);
    assert_eq!(h.notices.len(), 1);
    h.events.remove(1);
    // Quiet for a whole period after the last change: one roll, to the state of the moment.
    h.wait(period - WINDOW - Duration::from_secs(1));
    assert!(h.work.is_empty(), "not quiet for a period yet");
    h.wait(Duration::from_secs(1));
    assert_eq!(h.state.held_workloads(), 0, "released");
    assert_eq!(h.events.len(), 2, "the release is an Event too");
    assert_eq!(h.events[1].reason.as_deref(), Some("FlapGuardReleased"));
    let kinds: Vec<NoticeKind> = h.notices.iter().map(|n| n.kind).collect();
    assert_eq!(kinds, [NoticeKind::Held, NoticeKind::Released]);
    h.wait(WINDOW);
    assert_eq!(h.work.len(), 1, "after its window, as any roll");
    let triggers: Vec<String> = h.work[0].due.triggers.iter().map(ToString::to_string).collect();
    assert_eq!(triggers, ["secret/db (quiet again after the flap guard)"]);
    assert_eq!(h.state.held_workloads(), 0);
    assert_eq!(h.state.verdicts(), [(Verdict::Stale, 1)]);
    assert_eq!(h.events[0].involved_object.uid, h.events[1].involved_object.uid);
}

/// A gate that holds every workload until `open`, then lets each go once.
#[derive(Debug)]
struct ClosedUntil {
    open: Instant,
    held: Vec<(WorkloadKey, Trigger)>,
}

impl gate::Gate for ClosedUntil {
    fn admit(
        &mut self,
        workload: &WorkloadKey,
        trigger: &Trigger,
        _change: Option<&SourceChange>,
        now: Instant,
    ) -> gate::Gating {
        if now >= self.open {
            return gate::Gating::Pass;
        }
        self.held.push((workload.clone(), trigger.clone()));
        gate::Gating::Hold { event: None }
    }

    fn release(&mut self, now: Instant) -> Vec<gate::Released> {
        if now < self.open {
            return Vec::new();
        }
        let held = std::mem::take(&mut self.held);
        let released = held.into_iter().map(|(workload, trigger)| gate::Released {
            workload,
            trigger,
            event: None,
        });
        released.collect()
    }

    fn next_release(&self) -> Option<Instant> {
        (!self.held.is_empty()).then_some(self.open)
    }

    fn verdict(&self, workload: &WorkloadKey) -> Option<Verdict> {
        self.held.iter().any(|(held, _)| held == workload).then_some(Verdict::Held)
    }

    fn forget(&mut self, workload: &WorkloadKey) {
        self.held.retain(|(held, _)| held != workload);
    }
}

#[test]
fn a_new_gate_holds_a_roll_until_it_opens_and_the_others_still_judge_the_release() {
    let period = Duration::from_secs(600);
    let mut h = Harness::started_with(Harness::with_flap_limits(FlapLimits { limit: 1, period }));
    let patched = |h: &mut Harness| {
        let work = h.work.pop().expect("due");
        h.send(Message::Reconciled(Box::new((
            work.due,
            Ok(Reconciled::Patched { from: None, generation: None }),
        ))));
    };
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    patched(&mut h);
    // A gate placed before the flap guard holds the next change; the guard never sees it.
    let open = h.now + Duration::from_secs(60);
    h.state.gates.insert(0, Box::new(ClosedUntil { open, held: Vec::new() }));
    h.secret_changed("three", "12");
    h.wait(WINDOW);
    assert!(h.work.is_empty() && h.events.is_empty(), "held by the new gate alone");
    assert_eq!(h.state.verdicts(), [(Verdict::Held, 1)]);
    assert_eq!(h.state.next_due(), Some(open));
    // Released, it passes the flap guard, which has seen one roll this period: held there.
    h.wait(open - h.now);
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "a release does not skip the other gates");
    assert_eq!(h.events.len(), 1);
    assert_eq!(h.events[0].reason.as_deref(), Some("FlapGuard"));
    assert_eq!(h.state.verdicts(), [(Verdict::Held, 1)]);
}

#[test]
fn a_workload_listed_before_its_tracker_is_read_once_and_caught_up() {
    let mut h = Harness::new();
    h.list_namespaces(&["ns"]);
    h.start_workload_watches();
    // The database changed while no controller ran: Keycloak records its old template.
    let old = workload("db", "postgres:15", &[], "1");
    let recorded = template_digest_of(&old);
    let db = workload("db", "postgres:16", &[], "2");
    let keycloak = workload("keycloak", "keycloak:26", &[("db", Some(&recorded))], "3");
    h.list_workloads(1, vec![db, keycloak]);
    assert!(h.template_reads.is_empty(), "nothing is read while listing");
    for kind in ObjectKind::all() {
        h.list_objects(kind);
    }
    assert_eq!(h.template_reads, [key("db")], "listed before anything tracked it: read once");
    h.wait(WINDOW);
    let due: Vec<WorkloadKey> = h.work.iter().map(|w| w.due.key.clone()).collect();
    assert_eq!(due, [key("keycloak")], "caught up");
    let known: Vec<&WorkloadKey> = h.state.together.known_templates().collect();
    assert_eq!(known, [&key("db")], "only tracked workloads keep a digest");
}

/// `app-<i>` reading Secret db and recording `password`, at `generation`, its rollout
/// complete, failed past its deadline, or still going.
fn app(h: &Harness, i: usize, password: &str, generation: i64, rollout: &str) -> WatchedWorkload {
    serde_json::from_value(app_value(h, i, password, generation, rollout)).expect("a Deployment")
}

fn app_value(
    h: &Harness,
    i: usize,
    password: &str,
    generation: i64,
    rollout: &str,
) -> serde_json::Value {
    let mut status = json!({"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1,
        "availableReplicas": 1});
    match rollout {
        // A status update that changes nothing but the resourceVersion.
        "complete" | "complete-again" => {}
        "failed" => {
            status["availableReplicas"] = json!(0);
            status["conditions"] = json!([{"type": "Progressing", "status": "False",
                "reason": "ProgressDeadlineExceeded"}]);
        }
        _ => status["availableReplicas"] = json!(0),
    }
    let value = json!({"metadata": {"name": format!("app-{i}"), "namespace": "ns",
            "resourceVersion": format!("{i}-{generation}-{rollout}"), "generation": generation},
        "spec": {"replicas": 1, "template": {
            "metadata": {"annotations": {"secret.configsum.dev/db": h.digest_of(password)}},
            "spec": {"containers": [{"name": "c", "image": "app:1",
                "envFrom": [{"secretRef": {"name": "db"}}]}]}}},
        "status": status});
    value
}

/// `work` patched, from the generation of the snapshot it carried.
fn patched_in_wave(h: &mut Harness, work: Work) {
    let generation = work.snapshot.as_ref().and_then(|s| s.rollout.generation);
    let result = Ok(Reconciled::Patched { from: None, generation });
    h.send(Message::Reconciled(Box::new((work.due, result))));
}

/// The workloads of the work handed out so far, emptied.
fn rolled(h: &mut Harness) -> Vec<String> {
    let mut names: Vec<String> = h.work.drain(..).map(|w| w.due.key.name.to_string()).collect();
    names.sort();
    names
}

/// A harness whose gates are `gates` plus waves with `limits`, with `apps` workloads listed,
/// each reading Secret db ("one"), complete.
fn with_waves(gates: Vec<Box<dyn Gate>>, limits: WaveLimits, apps: usize) -> Harness {
    let mut h = waves_watching(gates, limits, ("one", "10"));
    let apps = (0..apps).map(|i| app(&h, i, "one", 1, "complete")).collect();
    list_all(&mut h, apps);
    h
}

/// A harness whose gates are `gates` plus waves with `limits`, Secret db reading `password`
/// at resourceVersion `rv`, its workload watches started and nothing listed yet.
fn waves_watching(
    gates: Vec<Box<dyn Gate>>,
    limits: WaveLimits,
    (password, rv): (&str, &str),
) -> Harness {
    let mut gates = gates;
    gates.push(Box::new(Waves::new(limits, &AnnotationDomain::default())));
    let mut h = Harness::with_gates(gates);
    h.put_secret(password, rv);
    h.list_namespaces(&["ns"]);
    h.start_workload_watches();
    h
}

/// Lists `apps`, then every watched kind of object.
fn list_all(h: &mut Harness, apps: Vec<WatchedWorkload>) {
    h.list_workloads(1, apps);
    for kind in ObjectKind::all() {
        h.list_objects(kind);
    }
}

const WAVES: WaveLimits = WaveLimits { max_wave: 50, timeout: HOUR, dry_run: false };

/// Secret db changes to `password`, its own annotations being `annotations`.
fn source_changed(h: &mut Harness, password: &str, rv: &str, annotations: &[(&str, &str)]) {
    h.put_secret(password, rv);
    let mut object = version(Some("ns"), "db", rv);
    object.annotations = annotations.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    h.send(Message::Object(ObjectKind::Secret, None, Event::Apply(object)));
}

/// `app-{i}` as the watch delivers it after its roll in `wave` of `change` (its record naming
/// `digest` as its own), its rollout `rollout`.
fn rolled_app(
    h: &Harness,
    i: usize,
    change: &str,
    wave: u32,
    digest: &str,
    rollout: &str,
) -> WatchedWorkload {
    let record = format!(
        r#"{{"secret/db":{{"change":"{change}","wave":{wave},"at":"2026-11-28T16:00:00Z","digest":"{digest}"}}}}"#
    );
    let mut value = app_value(h, i, "two", 2, rollout);
    value["metadata"]["annotations"] = json!({"configsum.dev/waves": record});
    serde_json::from_value(value).expect("a Deployment")
}

#[test]
fn an_operator_resumes_a_halted_change_by_the_id_its_events_name() {
    let mut h = with_waves(Vec::new(), WAVES, 4);
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    let work: Vec<Work> = h.work.drain(..).collect();
    let change = work[0].waves[0].change.id.clone();
    for w in work {
        patched_in_wave(&mut h, w);
    }
    // The canary's roll recorded its own digest for the Secret; its rollout fails.
    let failed = rolled_app(&h, 0, &change, 1, "aaaaaaaaaaaa", "failed");
    apply(&mut h, failed);
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "halted at the canary");
    let said: Vec<String> = h
        .events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("RolloutHalted"))
        .filter_map(|e| e.message.clone())
        .collect();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said.iter().all(|m| m.contains("change aaaaaaaaaaaa halted at Deployment ns/app-0")
            && m.contains("configsum.dev/resume: \"aaaaaaaaaaaa\" on secret/db")),
        "named by the failing workload's digest: {said:?}"
    );
    assert_eq!(h.state.halted_changes(), 1);
    let halted: Vec<_> = h.notices.iter().filter(|n| n.kind == NoticeKind::Halted).collect();
    assert_eq!(halted.len(), 1, "one notice for the two Events");
    assert_eq!(halted[0].workload.name, "app-0");
    assert_eq!(halted[0].digest.as_deref(), Some("aaaaaaaaaaaa"));
    assert_eq!(halted[0].sources[0].name, "db");
    // While it lasts, the halt is said again before the API server's Event TTL forgets it.
    let due = h.state.next_due().expect("a wake-up for the repeat");
    assert!(due > h.now + HALT_REPEAT - WINDOW * 2, "no busy wake-up while halted");
    h.wait(HALT_REPEAT);
    let halts = h.events.iter().filter(|e| e.reason.as_deref() == Some("RolloutHalted"));
    assert_eq!(halts.count(), 4, "said again on both objects");
    assert!(h.work.is_empty());
    assert_eq!(h.notices.len(), 1, "notified once: {:?}", h.notices);

    // The change's own id, or any other, resumes nothing.
    source_changed(&mut h, "two", "12", &[("configsum.dev/resume", &change)]);
    h.wait(WINDOW * 3);
    assert!(h.work.is_empty(), "{change} is not the halt's id");
    source_changed(&mut h, "two", "13", &[("configsum.dev/resume", "aaaaaaaaaaaa")]);
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-1", "app-2"], "the next wave, at its size; app-0 not again");
    assert_eq!(h.state.halted_changes(), 0);
    let resumed: Vec<_> = h.notices.iter().filter(|n| n.kind == NoticeKind::Resumed).collect();
    assert_eq!(resumed.len(), 1, "{:?}", h.notices);
    assert_eq!(resumed[0].workload.name, "app-0");
    assert_eq!(resumed[0].digest.as_deref(), Some("aaaaaaaaaaaa"));
    assert!(resumed[0].reason.contains("configsum.dev/resume"), "{}", resumed[0].reason);
    let halts = h.events.iter().filter(|e| e.reason.as_deref() == Some("RolloutHalted"));
    assert_eq!(halts.count(), 4, "no new halt for the excused workload");
}

#[test]
fn a_member_found_current_when_its_wave_comes_does_not_hold_the_wave() {
    let mut h = with_waves(Vec::new(), WAVES, 4);
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    for w in h.work.drain(..).collect::<Vec<_>>() {
        patched_in_wave(&mut h, w);
    }
    let done = app(&h, 0, "two", 2, "complete");
    apply(&mut h, done);
    h.wait(WINDOW);
    let wave_2: Vec<Work> = h.work.drain(..).collect();
    assert_eq!(wave_2.len(), 2);
    // app-1 was brought up to date by its author's own write meanwhile: nothing to patch.
    let mut wave_2 = wave_2.into_iter();
    let current = wave_2.next().expect("one");
    h.send(Message::Reconciled(Box::new((current.due, Ok(Reconciled::Unchanged)))));
    let other = wave_2.next().expect("two");
    let other_index: usize = other.due.key.name.trim_start_matches("app-").parse().expect("index");
    patched_in_wave(&mut h, other);
    let done = app(&h, other_index, "two", 2, "complete");
    apply(&mut h, done);
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-3"], "wave 3: the one left, not stuck behind app-1");
}

#[test]
fn a_new_leader_keeps_a_halt_and_its_id_from_the_records() {
    // The last leader rolled app-0 in wave 1 and stopped while its rollout failed; app-0
    // recorded its own digest. The new leader halts there, by the same id.
    let mut h = waves_watching(Vec::new(), WAVES, ("two", "11"));
    let source = crate::controller::model::trigger::Source::Object(db());
    let change = SourceChange::new(source, &h.digest_of("two"));
    let mut apps = vec![rolled_app(&h, 0, &change.id, 1, "bbbbbbbbbbbb", "failed")];
    apps.extend((1..4).map(|i| app(&h, i, "one", 1, "complete")));
    list_all(&mut h, apps);
    h.wait(WINDOW * 3);
    assert!(h.work.is_empty(), "never past the failed canary: {:?}", rolled(&mut h));
    let said = h.events.iter().filter_map(|e| e.message.as_deref()).find(|m| m.contains("halted"));
    assert!(said.is_some_and(|m| m.contains("change bbbbbbbbbbbb halted")), "{:?}", h.events);
    // The resume the operator wrote for the last leader holds for this one.
    source_changed(&mut h, "two", "12", &[("configsum.dev/resume", "bbbbbbbbbbbb")]);
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-1", "app-2"]);
}

#[test]
fn a_dry_run_reports_every_wave_at_once() {
    let limits = WaveLimits { dry_run: true, ..WAVES };
    let mut h = with_waves(Vec::new(), limits, 8);
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    let mut waves: Vec<(String, u32)> = h
        .work
        .drain(..)
        .map(|w| (w.due.key.name.to_string(), w.waves.first().map_or(0, |m| m.wave)))
        .collect();
    waves.sort();
    let expected: Vec<(String, u32)> = [1, 2, 2, 3, 3, 3, 3, 4]
        .iter()
        .enumerate()
        .map(|(i, wave)| (format!("app-{i}"), *wave))
        .collect();
    assert_eq!(waves, expected, "nothing waits: waves 1, 2, 4 and 1, all now");
    assert_eq!(h.state.halted_changes(), 0);
}

#[test]
fn a_change_rolls_in_health_gated_waves_and_halts_at_a_failed_rollout() {
    let mut h = with_waves(vec![Box::new(FlapGuard::new(FlapLimits::default()))], WAVES, 5);
    assert!(h.state.ready());

    h.secret_changed("two", "11");
    h.wait(WINDOW);
    let work: Vec<Work> = h.work.drain(..).collect();
    assert_eq!(work.iter().map(|w| &*w.due.key.name).collect::<Vec<_>>(), ["app-0"], "wave 1");
    let marks = &work[0].waves;
    assert_eq!(marks.len(), 1);
    assert_eq!((marks[0].change.source.record_name().as_str(), marks[0].wave), ("secret/db", 1));
    let change_id = marks[0].change.id.clone();
    assert_eq!(change_id.len(), 12);
    // A status update before the patch: the rollout it reports complete is the old one's.
    let resync = app(&h, 0, "one", 1, "complete-again");
    apply(&mut h, resync);
    for w in work {
        patched_in_wave(&mut h, w);
    }
    h.wait(WINDOW * 3);
    assert!(h.work.is_empty(), "wave 2 waits for app-0's rollout");
    // The watch delivers app-0 patched (generation 2), still rolling, then complete.
    let next = app(&h, 0, "two", 2, "progressing");
    apply(&mut h, next);
    h.wait(WINDOW);
    assert!(h.work.is_empty());
    let next = app(&h, 0, "two", 2, "complete");
    apply(&mut h, next);
    h.wait(WINDOW);
    let work: Vec<Work> = h.work.drain(..).collect();
    let mut names: Vec<&str> = work.iter().map(|w| &*w.due.key.name).collect();
    names.sort();
    assert_eq!(names, ["app-1", "app-2"], "wave 2: twice wave 1");
    assert!(work.iter().all(|w| w.waves.iter().all(|m| m.wave == 2 && m.change.id == change_id)));
    for w in work {
        patched_in_wave(&mut h, w);
    }
    let next = app(&h, 1, "two", 2, "complete");
    apply(&mut h, next);
    let next = app(&h, 2, "two", 2, "failed");
    apply(&mut h, next);
    h.wait(WINDOW * 10);
    assert!(h.work.is_empty(), "halted: app-3 and app-4 are never rolled");
    let halted: Vec<&k8s_openapi::api::core::v1::Event> =
        h.events.iter().filter(|e| e.reason.as_deref() == Some("RolloutHalted")).collect();
    let on: Vec<(Option<&str>, Option<&str>, Option<&str>)> = halted
        .iter()
        .map(|e| {
            let o = &e.involved_object;
            (o.kind.as_deref(), o.name.as_deref(), o.uid.as_deref())
        })
        .collect();
    assert_eq!(
        on,
        [(Some("Deployment"), Some("app-2"), None), (Some("Secret"), Some("db"), None)],
        "said once, on the failing workload and on the source"
    );
    let message = halted[0].message.as_deref().unwrap_or_default();
    let said = crate::core::diagnosis::halts::Halt::parse(message).expect("a halt's words");
    assert_eq!(
        (said.source.as_str(), said.failing.as_str(), said.waiting),
        ("secret/db", "Deployment ns/app-2", 2)
    );
    assert_eq!(said.change, change_id, "no record of its own digest: the change's id");
    let halted = h.state.verdicts().into_iter().find(|(v, _)| *v == Verdict::Halted);
    assert_eq!(halted, Some((Verdict::Halted, 3)), "app-2, and app-3 and app-4 behind it");
    assert_eq!(h.state.halted_changes(), 1);
    let outcomes: Vec<&str> = h.outcomes.iter().map(|o| o.outcome).collect();
    assert_eq!(outcomes, ["completed", "failed"], "wave 1 completed, wave 2 failed");
    // Fixed by other means: its rollout completes after all, and the rest go.
    let next = app(&h, 2, "two", 3, "complete");
    apply(&mut h, next);
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-3", "app-4"], "wave 3: the two left");
    assert_eq!(h.state.halted_changes(), 0);
}

#[test]
fn a_patch_the_watch_delivers_before_the_worker_reports_it_still_counts_its_rollout() {
    let mut h = with_waves(Vec::new(), WAVES, 3);
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    let work: Vec<Work> = h.work.drain(..).collect();
    assert_eq!(work.len(), 1, "wave 1");
    let marks = &work[0].waves;
    let record = format!(
        r#"{{"secret/db":{{"change":"{}","wave":1,"at":"2026-11-28T16:00:00Z"}}}}"#,
        marks[0].change.id
    );
    // The watch delivers app-0 as patched (generation 2, its roll recorded) before the
    // worker's answer comes back.
    let mut patched = app_value(&h, 0, "two", 2, "progressing");
    patched["status"]["observedGeneration"] = json!(1);
    patched["metadata"]["annotations"] = json!({"configsum.dev/waves": record.clone()});
    apply(&mut h, serde_json::from_value(patched).expect("a Deployment"));
    for w in work {
        patched_in_wave(&mut h, w);
    }
    h.wait(WINDOW * 3);
    assert!(h.work.is_empty(), "wave 2 waits for app-0's rollout");
    let mut complete = app_value(&h, 0, "two", 2, "complete");
    complete["metadata"]["annotations"] = json!({"configsum.dev/waves": record});
    apply(&mut h, serde_json::from_value(complete).expect("a Deployment"));
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-1", "app-2"], "the patch's rollout completed: wave 2");
}

#[test]
fn a_new_leader_goes_on_from_the_waves_the_workloads_record() {
    let mut h = waves_watching(Vec::new(), WAVES, ("two", "11"));
    // The last leader rolled app-0 in wave 1 and app-1 and app-2 in wave 2, each complete,
    // then stopped: the next wave is the third, four workloads.
    let source = crate::controller::model::trigger::Source::Object(db());
    let change = SourceChange::new(source, &h.digest_of("two"));
    let record = |wave: u32| {
        format!(
            r#"{{"secret/db":{{"change":"{}","wave":{wave},"at":"2026-11-28T16:00:00Z"}}}}"#,
            change.id
        )
    };
    let mut apps: Vec<WatchedWorkload> = Vec::new();
    for i in 0..8 {
        let (password, generation) = if i < 3 { ("two", 2) } else { ("one", 1) };
        let mut value = app_value(&h, i, password, generation, "complete");
        if i < 3 {
            let wave = if i == 0 { 1 } else { 2 };
            value["metadata"]["annotations"] = json!({"configsum.dev/waves": record(wave)});
        }
        apps.push(serde_json::from_value(value).expect("a watched Deployment"));
    }
    list_all(&mut h, apps);
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-3", "app-4", "app-5", "app-6"], "wave 3, nothing twice");
    let halted = h.events.iter().filter(|e| e.reason.as_deref() == Some("RolloutHalted"));
    assert_eq!(halted.count(), 0);
}

#[test]
fn a_paused_workload_is_never_rolled_and_rolls_once_when_unpaused() {
    let gates: Vec<Box<dyn Gate>> = vec![Box::new(super::pause::Pause::default())];
    let mut h = Harness::with_gates(gates);
    h.put_secret("one", "10");
    h.list_namespaces(&["ns"]);
    h.start_workload_watches();
    let mut paused = app_value(&h, 0, "one", 1, "complete");
    paused["metadata"]["annotations"] = json!({"configsum.dev/paused": "true"});
    let paused: WatchedWorkload = serde_json::from_value(paused).expect("a Deployment");
    h.list_workloads(1, vec![paused, app(&h, 1, "one", 1, "complete")]);
    for kind in ObjectKind::all() {
        h.list_objects(kind);
    }
    assert!(h.state.verdicts().contains(&(Verdict::Paused, 1)));
    h.secret_changed("two", "11");
    h.secret_changed("three", "12");
    h.wait(WINDOW * 5);
    assert_eq!(rolled(&mut h), ["app-1"], "only the one not paused (both changes in one window)");
    // Unpaused: one roll, with every change it missed.
    let unpaused = app(&h, 0, "one", 1, "complete-again");
    apply(&mut h, unpaused);
    h.wait(WINDOW);
    let work: Vec<Work> = h.work.drain(..).collect();
    assert_eq!(work.len(), 1);
    assert_eq!(&*work[0].due.key.name, "app-0");
    assert!(work[0].due.triggers.contains(&Trigger::Object(ObjectRef::secret("db"))));
    assert!(!h.state.verdicts().iter().any(|(v, _)| *v == Verdict::Paused));
}

#[test]
fn outside_its_window_a_workload_waits_and_rolls_at_the_opening() {
    // Wednesday 2026-12-02, 10:00 UTC on the harness's clock.
    let wall: std::time::SystemTime =
        "2026-12-02T10:00:00Z".parse::<jiff::Timestamp>().expect("a time").into();
    let start = Instant::now();
    let windows = super::window::Windows::new(None, Some((start, wall)));
    let mut h = Harness::with_gates(vec![Box::new(windows)]);
    h.now = start;
    h.put_secret("one", "10");
    h.list_namespaces(&["ns"]);
    h.start_workload_watches();
    let with_window = |h: &Harness, i: usize, window: &str| -> WatchedWorkload {
        let mut value = app_value(h, i, "one", 1, "complete");
        value["metadata"]["annotations"] = json!({"configsum.dev/roll-window": window});
        serde_json::from_value(value).expect("a Deployment")
    };
    let apps = vec![
        with_window(&h, 0, "Wed 12:00-13:00 UTC"),
        with_window(&h, 1, "Wed 12:00-13:00 Mars/Olympus"),
        app(&h, 2, "one", 1, "complete"),
    ];
    h.list_workloads(1, apps);
    for kind in ObjectKind::all() {
        h.list_objects(kind);
    }
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-2"], "the one without a window, at once");
    let reasons: Vec<(&str, &str)> = h
        .events
        .iter()
        .map(|e| {
            let name = e.involved_object.name.as_deref().unwrap_or_default();
            (name, e.reason.as_deref().unwrap_or_default())
        })
        .collect();
    assert!(reasons.contains(&("app-0", "RollWaiting")), "{reasons:?}");
    let waits: Vec<&str> = h.notices.iter().map(|n| n.workload.name.as_str()).collect();
    assert_eq!(waits, ["app-0"], "a window that does not parse is no wait");
    assert_eq!(h.notices[0].kind, NoticeKind::WaitingWindow);
    assert!(reasons.contains(&("app-1", "InvalidRollWindow")), "{reasons:?}");
    let waiting = h.events.iter().find(|e| e.reason.as_deref() == Some("RollWaiting"));
    let message = waiting.and_then(|e| e.message.as_deref()).unwrap_or_default();
    assert!(message.contains("2026-12-02T12:00:00Z"), "{message}");
    assert!(h.state.verdicts().contains(&(Verdict::WaitingWindow, 2)));
    // One second before the opening: still waiting; at it, app-0 rolls; app-1 never does.
    // (The harness's Lease is renewed as time goes by.)
    let wait = |h: &mut Harness, mut left: Duration| {
        while !left.is_zero() {
            let step = left.min(HOUR / 2);
            h.wait(step);
            h.lead(1);
            left -= step;
        }
    };
    wait(&mut h, 2 * HOUR - WINDOW - Duration::from_secs(1));
    assert!(h.work.is_empty());
    assert!(h.state.next_due().is_some_and(|due| due <= h.now + Duration::from_secs(1)));
    wait(&mut h, Duration::from_secs(1));
    wait(&mut h, WINDOW);
    assert_eq!(rolled(&mut h), ["app-0"]);
    wait(&mut h, HOUR * 24 * 8);
    assert!(h.work.is_empty(), "a window that does not parse never opens");
    let waiting = h.events.iter().filter(|e| e.reason.as_deref() == Some("RollWaiting"));
    assert_eq!(waiting.count(), 1, "said once");
}

#[test]
fn a_namespace_window_applies_to_its_workloads_without_their_own() {
    let wall: std::time::SystemTime =
        "2026-12-02T10:00:00Z".parse::<jiff::Timestamp>().expect("a time").into();
    let start = Instant::now();
    let windows = super::window::Windows::new(None, Some((start, wall)));
    let mut h = Harness::with_gates(vec![Box::new(windows)]);
    h.now = start;
    h.put_secret("one", "10");
    let annotated = |window: Option<&str>| {
        let mut namespace = version(None, "ns", "1");
        if let Some(window) = window {
            namespace.annotations = vec![("configsum.dev/roll-window".into(), window.into())];
        }
        namespace
    };
    h.send(Message::Namespace(Event::Init));
    h.send(Message::Namespace(Event::InitApply(annotated(Some("Wed 12:00-13:00 UTC")))));
    h.send(Message::Namespace(Event::InitDone));
    h.start_workload_watches();
    let mut own = app_value(&h, 0, "one", 1, "complete");
    own["metadata"]["annotations"] = json!({"configsum.dev/roll-window": "Wed 09:00-11:00 UTC"});
    let own: WatchedWorkload = serde_json::from_value(own).expect("a Deployment");
    h.list_workloads(1, vec![own, app(&h, 1, "one", 1, "complete")]);
    for kind in ObjectKind::all() {
        h.list_objects(kind);
    }
    h.secret_changed("two", "11");
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-0"], "its own window is open; the namespace's is not");
    assert!(h.state.verdicts().contains(&(Verdict::WaitingWindow, 1)));
    // The namespace's window is removed: app-1 may roll now.
    h.send(Message::Namespace(Event::Apply(annotated(None))));
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-1"]);
}

#[test]
fn a_source_that_says_fan_out_all_skips_waves() {
    let mut h = with_waves(Vec::new(), WAVES, 4);
    // A CA bundle that must reach everyone now.
    source_changed(&mut h, "two", "11", &[("configsum.dev/fan-out", "all")]);
    h.wait(WINDOW);
    let work: Vec<Work> = h.work.drain(..).collect();
    let mut names: Vec<&str> = work.iter().map(|w| &*w.due.key.name).collect();
    names.sort();
    assert_eq!(names, ["app-0", "app-1", "app-2", "app-3"]);
    assert!(work.iter().all(|w| w.waves.is_empty()), "no wave to record");
    for w in work {
        patched_in_wave(&mut h, w);
    }
    for i in 0..4 {
        let patched = app(&h, i, "two", 2, "complete");
        apply(&mut h, patched);
    }
    // Another domain's annotation, or another value, is no say: waves again.
    source_changed(&mut h, "three", "12", &[("configsum.dev/fan-out", "everyone")]);
    h.wait(WINDOW);
    assert_eq!(rolled(&mut h), ["app-0"], "wave 1");
}

/// Under `--namespaces`, each namespace's watch lists on its own: the state is ready once
/// every namespace of every kind has listed, a namespace outside the list is never in scope,
/// and a relist of one namespace finds deleted only what is in it.
#[test]
fn under_namespaces_each_namespace_lists_apart_and_its_relist_deletes_only_its_own() {
    let settings =
        Settings { namespaces: vec!["ns".into(), "other".into()], ..Settings::default() };
    let mut h = Harness::with_gates_and(Vec::new(), settings);
    h.put_secret("one", "10");
    h.list_namespaces(&["ns", "other", "third"]);
    assert!(h.state.scope.contains("ns") && h.state.scope.contains("other"));
    assert!(!h.state.scope.contains("third"), "opted in, but not in --namespaces");
    h.start_workload_watches();
    let within = |namespace: &str| -> Partition { Some(std::sync::Arc::from(namespace)) };
    let web_in_ns = h.deployment("ns", "one", "5");
    for (namespace, workloads) in [("ns", vec![web_in_ns]), ("other", Vec::new())] {
        let partition = within(namespace);
        let mut send = |event| {
            let (kind, epoch, partition) = (WorkloadKind::Deployment, 1, partition.clone());
            h.send(Message::Workload { kind, partition, epoch, event: Box::new(event) })
        };
        send(Event::Init);
        for workload in workloads {
            send(Event::InitApply(workload));
        }
        send(Event::InitDone);
    }
    let list = |h: &mut Harness, kind: ObjectKind, namespace: &str, objects: Vec<ObjectVersion>| {
        h.send(Message::Object(kind, within(namespace), Event::Init));
        for object in objects {
            h.send(Message::Object(kind, within(namespace), Event::InitApply(object)));
        }
        h.send(Message::Object(kind, within(namespace), Event::InitDone));
    };
    list(&mut h, ObjectKind::ConfigMap, "ns", Vec::new());
    list(&mut h, ObjectKind::ConfigMap, "other", Vec::new());
    list(&mut h, ObjectKind::Secret, "ns", vec![version(Some("ns"), "db", "10")]);
    assert!(!h.state.ready(), "other's Secrets have not listed yet");
    list(&mut h, ObjectKind::Secret, "other", Vec::new());
    assert!(h.state.ready());
    let (reads, work) = (h.reads.len(), h.work.len());

    // other's Secrets relisted (a 410 Gone there): db, in ns, is not found deleted.
    list(&mut h, ObjectKind::Secret, "other", Vec::new());
    assert_eq!((h.reads.len(), h.work.len()), (reads, work), "nothing read, nothing due");

    // ns's relisted without db: db was deleted meanwhile, and web rolls to "absent".
    h.store.remove(&db());
    list(&mut h, ObjectKind::Secret, "ns", Vec::new());
    assert_eq!(h.reads[reads..], [db()], "read once, found gone");
    h.wait(WINDOW);
    assert_eq!(h.work.len(), work + 1, "web is due");
}

/// `name` mounting the SecretProviderClass vault, recording `recorded` of it.
fn mounting_vault(name: &str, recorded: Option<&str>, rv: &str) -> WatchedWorkload {
    let annotations = match recorded {
        Some(digest) => json!({"secretproviderclass.configsum.dev/vault": digest}),
        None => json!({}),
    };
    let value = json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "spec": {"template": {"metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "app:1"}],
                "volumes": [{"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io",
                    "volumeAttributes": {"secretProviderClass": "vault"}}}]}}}});
    serde_json::from_value(value).expect("a watched Deployment")
}

/// The status the CSI driver writes for `pod`'s mount of vault.
fn vault_status(
    pod: &str,
    rv: u64,
    version: &str,
) -> crate::core::model::provider_class_status::ProviderClassStatus {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{pod}-ns-vault"), "namespace": "ns", "resourceVersion": rv.to_string()},
        "status": {"podName": pod, "secretProviderClassName": "vault", "mounted": true,
            "objects": [{"id": "secret/db", "version": version}]}
    }))
    .expect("a status")
}

fn vault_digest(version: &str) -> String {
    crate::core::inputs::secret_provider_class::digest([("secret/db", version)])
}

fn status_event(
    h: &mut Harness,
    event: Event<crate::core::model::provider_class_status::ProviderClassStatus>,
) {
    h.send(Message::ProviderClassStatus(None, Box::new(event)));
}

fn list_statuses(h: &mut Harness, statuses: Vec<(&str, u64, &str)>) {
    status_event(h, Event::Init);
    for (pod, rv, version) in statuses {
        status_event(h, Event::InitApply(vault_status(pod, rv, version)));
    }
    status_event(h, Event::InitDone);
}

#[test]
fn a_rotation_rolls_once_and_its_roll_and_first_observations_never_do() {
    let v1 = vault_digest("1");
    let mut h =
        listed(vec![mounting_vault("web", Some(&v1), "1"), mounting_vault("fresh", None, "2")]);
    list_statuses(&mut h, vec![("web-a", 10, "1"), ("fresh-a", 11, "1")]);
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "web is current; fresh records nothing yet: a first observation");
    // More pods with the same versions change nothing.
    status_event(&mut h, Event::Apply(vault_status("web-b", 12, "1")));
    h.wait(WINDOW);
    assert!(h.work.is_empty());

    // The driver's rotation reconciler reports version 2 for one pod: a rotation.
    status_event(&mut h, Event::Apply(vault_status("web-a", 20, "2")));
    h.wait(WINDOW);
    let mut due: Vec<WorkloadKey> = h.work.iter().map(|w| w.due.key.clone()).collect();
    due.sort();
    assert_eq!(due, [key("fresh"), key("web")], "as for a ConfigMap changed while watched");
    let triggers: Vec<String> = h.work[0].due.triggers.iter().map(ToString::to_string).collect();
    assert_eq!(triggers, ["secretproviderclass/vault (rotated)"]);
    let v2 = vault_digest("2");
    assert_eq!(h.work[0].classes, [Some(Observation::Digest(v2.clone()))], "in its work");
    // The other pods' statuses follow: the same rotation, nothing more is due.
    status_event(&mut h, Event::Apply(vault_status("web-b", 21, "2")));
    status_event(&mut h, Event::Apply(vault_status("fresh-a", 22, "2")));
    let work: Vec<Work> = std::mem::take(&mut h.work);
    for (at, done) in work.into_iter().enumerate() {
        let name = done.due.key.name.to_string();
        patched_from(&mut h, done, if name == "web" { "1" } else { "2" });
        apply(&mut h, mounting_vault(&name, Some(&v2), &format!("{}", 10 + at)));
    }
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "each rolled once");

    // The roll: new pods mount version 2, the old pods' statuses are deleted.
    for (pod, rv) in [("web-c", 30), ("web-d", 31), ("fresh-b", 32)] {
        status_event(&mut h, Event::Apply(vault_status(pod, rv, "2")));
    }
    for pod in ["web-a", "web-b", "fresh-a"] {
        status_event(&mut h, Event::Delete(vault_status(pod, 40, "2")));
    }
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "a roll's new pods and its old pods' deletions never roll");
    // Every pod gone (scaled to zero), then back with the same versions: nothing either.
    for pod in ["web-c", "web-d", "fresh-b"] {
        status_event(&mut h, Event::Delete(vault_status(pod, 50, "2")));
    }
    status_event(&mut h, Event::Apply(vault_status("web-e", 60, "2")));
    h.wait(WINDOW);
    assert!(h.work.is_empty());
}

#[test]
fn statuses_served_after_start_up_catch_up_what_rotated_meanwhile() {
    let v1 = vault_digest("1");
    let mut h =
        listed(vec![mounting_vault("web", Some(&v1), "1"), mounting_vault("fresh", None, "2")]);
    h.wait(WINDOW);
    assert!(h.work.is_empty(), "no statuses yet: nothing known, nothing due");
    // The CRD is installed, discovery finds it, the watch lists: version 2 by now.
    list_statuses(&mut h, vec![("web-a", 10, "2"), ("fresh-a", 5, "1")]);
    h.wait(WINDOW);
    let due: Vec<WorkloadKey> = h.work.iter().map(|w| w.due.key.clone()).collect();
    assert_eq!(due, [key("web")], "the greater resourceVersion's version is the latest");
}
