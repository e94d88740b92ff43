//! A review as the core reads it: which requests are configsum's to mutate (kind, subresource,
//! operation), the typed workload and its image pass ([`plan_review`]), and the whole decision
//! with objects from memory ([`review`], for render and the tests).

use std::collections::BTreeMap;

use super::digest::Digester;
use super::inputs::image::containers::PodImages;
use super::model::kinds::WorkloadKind;
use super::model::object_ref::ObjectRef;
use super::model::operation::Operation;
use super::mutate::Observed;
use super::mutate::{Decision, Found, Plan, Settings, Skip, plan};
use super::workload::{ObjectRead, ParseError};

/// The parts of an AdmissionReview request the decision reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub sub_resource: Option<&'a str>,
    pub operation: &'a str,
    pub namespace: Option<&'a str>,
    /// `request.object` as raw JSON.
    pub object: Option<&'a str>,
    pub old_object: Option<OldObject<'a>>,
}

/// `request.oldObject`, of which the decision reads only the map the digests are in (their
/// fallback "existing" values): its text, or that map when the wire parser read it in the
/// pass over the review.
#[derive(Clone, Copy, Debug)]
pub enum OldObject<'a> {
    Text(&'a str),
    Annotations(&'a BTreeMap<String, String>),
}

/// Reads the request: is it ours, and which objects does its pod template consume?
pub fn plan_review(request: &Request<'_>, settings: &Settings) -> Plan {
    plan_object(request, settings, None, || request.object)
}

/// [`plan_review`] for a request whose object the wire parser read in its own pass over the
/// review ([`WorkloadKind::object_seed`], for a kind that [`WorkloadKind::reads_in_one_pass`]).
/// `text` finds the object's text again, for an image pass the wire parser did not read in
/// its pass (see [`super::pod_spec_reader`]): only a workload that tracks images, or
/// carries their digests, may need it.
pub fn plan_read_review<'t>(
    request: &Request<'_>,
    settings: &Settings,
    read: ObjectRead,
    text: impl FnOnce() -> Option<&'t str>,
) -> Plan {
    plan_object(request, settings, Some(read), text)
}

fn plan_object<'t>(
    request: &Request<'_>,
    settings: &Settings,
    read: Option<ObjectRead>,
    text: impl FnOnce() -> Option<&'t str>,
) -> Plan {
    let Some(kind) = WorkloadKind::from_gvk(request.group, request.version, request.kind) else {
        return Plan::Skip(Skip::Kind);
    };
    if request.sub_resource.is_some_and(|s| !s.is_empty()) {
        return Plan::Skip(Skip::Subresource);
    }
    if !Operation::parse(request.operation).is_some_and(|op| kind.mutates(op)) {
        return Plan::Skip(Skip::Operation);
    }
    let unparsable = |why: &str| {
        Plan::Unparsable(format!("configsum: the {} was not changed: {why}", kind.as_str()))
    };
    let parsed = match (read, request.object) {
        (Some(read), _) => kind.from_read(read),
        (None, Some(object)) => kind.parse(object),
        (None, None) => return unparsable("the request has no object"),
    };
    let mut workload = match parsed {
        Ok(workload) => workload,
        Err(e @ (ParseError::NoPodSpec | ParseError::WrongKind { .. } | ParseError::NeedsText)) => {
            return unparsable(&e.to_string());
        }
        // serde's message may quote the object's values: give only the position.
        Err(ParseError::Json(e)) => {
            return unparsable(&format!(
                "it does not parse (line {}, column {})",
                e.line(),
                e.column()
            ));
        }
    };
    // The request's namespace wins: a Pod being created may not carry one yet.
    if let Some(namespace) = request.namespace.filter(|n| !n.is_empty()) {
        workload.namespace = Some(namespace.to_owned());
    }
    let read;
    let old_annotations = match request.old_object {
        Some(OldObject::Annotations(annotations)) => annotations,
        Some(OldObject::Text(old)) => {
            read = kind.annotations_of(old);
            &read
        }
        None => {
            read = BTreeMap::new();
            &read
        }
    };
    // What the pass over a review read for the image pass, if it did (and read `env` when
    // that is needed); else the object's text is read again.
    let in_pass = workload.images_in_pass.take();
    let pod_images = |env: bool| match in_pass {
        Some(read) if read.env || !env => Some(Ok(read.pod)),
        _ => text().map(|object| PodImages::of(kind, object)),
    };
    match plan(workload, old_annotations, settings) {
        Plan::Mutate(mutation) => match mutation.with_pod_images(settings, pod_images) {
            Ok(mutation) => Plan::Mutate(mutation),
            Err(e) => unparsable(&format!(
                "its containers do not parse (line {}, column {})",
                e.line(),
                e.column()
            )),
        },
        other => other,
    }
}

/// The whole decision with objects from memory and no registry: plan, digest, decide. The
/// webhook and the controller observe through `crate::lookup::observe` in between.
pub fn review<'a>(
    request: &Request<'_>,
    settings: &Settings,
    digester: &Digester,
    lookup: impl Fn(&str, &ObjectRef) -> Found<'a>,
) -> Decision {
    decide_from_memory(plan_review(request, settings), settings, digester, lookup)
}

/// The rest of [`review`], for a plan made elsewhere (the webhook's, in the bench).
pub fn decide_from_memory<'a>(
    plan: Plan,
    settings: &Settings,
    digester: &Digester,
    lookup: impl Fn(&str, &ObjectRef) -> Found<'a>,
) -> Decision {
    match plan {
        Plan::Skip(_) => Decision::default(),
        Plan::Unparsable(warning) => Decision::warn(warning),
        Plan::Mutate(mutation) => {
            let unobserved: Vec<String> =
                mutation.workloads.iter().map(|w| w.to_string()).collect();
            let objects = mutation
                .targets
                .iter()
                .map(|t| {
                    let found = match mutation.lookup_key(t) {
                        Some(key) => lookup(key.namespace, &key.object),
                        None => Ok(None),
                    };
                    mutation.observe(t, digester, found)
                })
                .collect();
            // No API server here (render, tests): tracked workloads keep their annotations.
            let observed = Observed { objects, ..Observed::default() };
            let mut decision = mutation.decide(observed, settings);
            decision.unobserved_workloads = unobserved;
            decision
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::annotations::AnnotationDomain;
    use crate::core::mutate::{Mutation, Observation};
    use serde_json::{Value, json};

    const D: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn keycloak(track: &str, recorded: Value) -> String {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "keycloak", "namespace": "auth", "annotations": {"configsum.dev/track": track}},
            "spec": {"template": {"metadata": {"annotations": recorded},
                "spec": {"containers": [{"name": "c", "image": "keycloak:26"}]}}}})
        .to_string()
    }

    fn planned(object: &str) -> Mutation {
        let request = Request {
            group: "apps",
            version: "v1",
            kind: "Deployment",
            operation: "UPDATE",
            namespace: Some("auth"),
            object: Some(object),
            ..Request::default()
        };
        match plan_review(&request, &Settings::default()) {
            Plan::Mutate(mutation) => mutation,
            other => panic!("not mutated: {other:?}"),
        }
    }

    fn decide(mutation: Mutation, workloads: Vec<Option<Observation>>) -> Decision {
        let observed = Observed { workloads, ..Observed::default() };
        mutation.decide(observed, &Settings::default())
    }

    fn patched(object: &str, decision: &Decision) -> Value {
        let mut value: Value = serde_json::from_str(object).expect("json");
        json_patch::patch(&mut value, &decision.patch).expect("applies");
        value["spec"]["template"]["metadata"]["annotations"].clone()
    }

    #[test]
    fn track_names_workloads_of_trackable_kinds_in_the_namespace() {
        let object = keycloak(
            "deployment/db, statefulset/cache, rollout/web, job/once, deployment/keycloak, deployment/Bad",
            json!({}),
        );
        let mutation = planned(&object);
        let tracked: Vec<String> = mutation.workloads.iter().map(ToString::to_string).collect();
        assert_eq!(tracked, ["deployment/db", "statefulset/cache", "rollout/web"]);
        assert_eq!(mutation.workloads[1].key, "statefulset.configsum.dev/cache");
        let digest = mutation.observe_workload(
            Ok(Some(&json!({"spec": {"containers": []}}))),
            &AnnotationDomain::default(),
        );
        let decision = decide(
            mutation,
            vec![
                Some(digest.clone()),
                Some(Observation::Absent),
                Some(Observation::Unreadable("HTTP 503".into())),
            ],
        );
        let Observation::Digest(digest) = digest else { panic!("a digest") };
        assert_eq!(
            patched(&object, &decision),
            json!({"deployment.configsum.dev/db": digest, "statefulset.configsum.dev/cache": "absent"})
        );
        assert_eq!(
            decision.warnings,
            [
                r#""job/once" in configsum.dev/track: not a kind that can be tracked; skipped"#,
                r#"deployment/"Bad": not a valid object name; skipped"#,
                "deployment/keycloak: a workload cannot track itself; skipped",
                r#"statefulset/cache: not found; its digest is "absent""#,
                "rollout/web: could not be read; no annotation written (HTTP 503)",
            ]
        );
        assert!(decision.changed_workloads.is_empty(), "first digests change nothing");
    }

    #[test]
    fn a_changed_template_is_audited_and_an_unobserved_one_keeps_its_digest() {
        let object = keycloak(
            "deployment/db, deployment/cache",
            json!({
            "deployment.configsum.dev/db": D, "deployment.configsum.dev/cache": D,
            "deployment.configsum.dev/gone": D}),
        );
        let other = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
        let mutation = planned(&object);
        let tracked: Vec<String> = mutation.workloads.iter().map(ToString::to_string).collect();
        assert_eq!(tracked, ["deployment/cache", "deployment/db"], "in kind and name order");
        let decision = decide(mutation, vec![None, Some(Observation::Digest(other.into()))]);
        assert_eq!(
            patched(&object, &decision),
            json!({"deployment.configsum.dev/db": other, "deployment.configsum.dev/cache": D}),
            "no longer tracked: removed, as configsum owns the key"
        );
        assert_eq!(decision.changed_workloads, ["deployment/db"]);
    }

    fn mounting(classes: &[(&str, &str)], recorded: Value) -> String {
        let volumes: Vec<Value> = classes
            .iter()
            .map(|(driver, class)| {
                json!({"name": class, "csi": {"driver": driver,
                    "volumeAttributes": {"secretProviderClass": class}}})
            })
            .collect();
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "auth"},
            "spec": {"template": {"metadata": {"annotations": recorded},
                "spec": {"containers": [{"name": "c", "image": "web:1"}], "volumes": volumes}}}})
        .to_string()
    }

    fn decide_classes(mutation: Mutation, classes: Vec<Option<Observation>>) -> Decision {
        mutation.decide(Observed { classes, ..Observed::default() }, &Settings::default())
    }

    const CSI: &str = "secrets-store.csi.k8s.io";

    #[test]
    fn csi_volumes_name_the_classes_whose_digests_the_template_carries() {
        let object = mounting(
            &[(CSI, "vault"), (CSI, "aws"), ("ebs.csi.aws.com", "disk"), (CSI, "Bad_Name")],
            json!({"secretproviderclass.configsum.dev/gone": D}),
        );
        let mutation = planned(&object);
        let names: Vec<&str> = mutation.classes().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["aws", "vault"], "the other driver's volume and a bad name left out");
        assert_eq!(mutation.classes()[1].key, "secretproviderclass.configsum.dev/vault");
        assert!(!mutation.records_every_input());
        let decision = decide_classes(
            mutation,
            vec![Some(Observation::Absent), Some(Observation::Digest(D.into()))],
        );
        assert_eq!(
            patched(&object, &decision),
            json!({"secretproviderclass.configsum.dev/vault": D}),
            "no status for aws: none written; a class no volume names: removed"
        );
        assert!(decision.changed_classes.is_empty(), "a first digest changes nothing");
        assert_eq!(decision.warnings.len(), 1, "{:?}", decision.warnings);
        assert!(decision.warnings[0].contains("not a valid name"), "{:?}", decision.warnings);
    }

    #[test]
    fn an_unreadable_or_unreported_class_keeps_its_digest_and_a_rotation_is_audited() {
        let other = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
        let recorded = json!({"secretproviderclass.configsum.dev/aws": D,
            "secretproviderclass.configsum.dev/gcp": D, "secretproviderclass.configsum.dev/vault": D});
        let object = mounting(&[(CSI, "aws"), (CSI, "gcp"), (CSI, "vault")], recorded.clone());
        let mutation = planned(&object);
        assert!(mutation.records_every_input());
        let observed = vec![
            Some(Observation::Absent),
            Some(Observation::Unreadable("HTTP 503".into())),
            Some(Observation::Digest(other.into())),
        ];
        let deny = crate::core::LookupErrorPolicy::Deny;
        let settings = Settings { on_lookup_error: deny, ..Settings::default() };
        let decision =
            mutation.decide(Observed { classes: observed, ..Observed::default() }, &settings);
        assert_eq!(decision.denied, None, "a class never denies");
        let mut expected = recorded;
        expected["secretproviderclass.configsum.dev/vault"] = json!(other);
        assert_eq!(patched(&object, &decision), expected);
        assert_eq!(decision.changed_classes, ["secretproviderclass/vault"]);
        assert_eq!(
            decision.warnings,
            ["secretproviderclass/gcp: could not be read; its annotation was kept (HTTP 503)"]
        );
        // Not observed at all (render, or a source without statuses): all kept.
        let decision = decide_classes(planned(&object), Vec::new());
        assert!(decision.patch.is_empty());
    }
}
