//! References across namespaces, decided end to end from memory: a `<kind>/<a>/<b>` token
//! names key `<b>` of the workload's own `<a>` where that exists, else object `<b>` of
//! namespace `<a>`, honoured only with its owner's consent (docs/behaviour.md, "References
//! across namespaces").

use serde_json::{Value, json};

use super::digest::{Digester, ObjectId};
use super::model::object_content::ObjectContent;
use super::model::object_ref::ObjectRef;
use super::mutate::{Decision, Found, Settings};
use super::refs::ConsumedKeys;
use super::review::{Request, review};

const D: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// A Deployment `web` of namespace `app` tracking `track`, its template annotated `recorded`.
fn web(track: &str, recorded: Value) -> String {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "app", "annotations": {"configsum.dev/track": track}},
        "spec": {"template": {"metadata": {"annotations": recorded},
            "spec": {"containers": [{"name": "c", "image": "web:1"}]}}}})
    .to_string()
}

/// A Secret's content with key `ca`, and its owner's `readable-from` if any.
fn secret(readable_from: Option<&str>) -> ObjectContent {
    let entries = [("ca".to_owned(), b"-----BEGIN CERTIFICATE-----".to_vec())].into();
    ObjectContent::from_entries(entries).with_readable_from(readable_from)
}

/// Where each object lives: `(namespace, name)`, and what reading it gives.
type Objects = Vec<((&'static str, &'static str), Result<ObjectContent, String>)>;

fn decide(object: &str, objects: &Objects, settings: &Settings) -> Decision {
    let request = Request {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        operation: "UPDATE",
        namespace: Some("app"),
        object: Some(object),
        ..Request::default()
    };
    let lookup = |namespace: &str, object: &ObjectRef| -> Found<'_> {
        assert!(object.namespace.is_none(), "looked up by its own namespace and name");
        match objects.iter().find(|(at, _)| *at == (namespace, object.name.as_str())) {
            Some((_, Ok(content))) => Ok(Some(content)),
            Some((_, Err(why))) => Err(why.clone()),
            None => Ok(None),
        }
    };
    review(&request, settings, &Digester::default(), lookup)
}

fn patched(object: &str, decision: &Decision) -> Value {
    let mut value: Value = serde_json::from_str(object).expect("json");
    json_patch::patch(&mut value, &decision.patch).expect("applies");
    value["spec"]["template"]["metadata"]["annotations"].clone()
}

fn digest(namespace: &str, name: &str, keys: &ConsumedKeys) -> String {
    let id = ObjectId { namespace, object: &ObjectRef::secret(name) };
    Digester::default().digest(id, &secret(None), keys, None)
}

#[test]
fn a_consenting_object_of_another_namespace_is_digested_as_its_own() {
    for consent in ["app", " web , app ", "*"] {
        let object = web("secret/shared/ca", json!({}));
        let objects: Objects = vec![(("shared", "ca"), Ok(secret(Some(consent))))];
        let decision = decide(&object, &objects, &Settings::default());
        assert_eq!(
            patched(&object, &decision),
            json!({"secret.configsum.dev/shared_ca": digest("shared", "ca", &ConsumedKeys::All)}),
            "{consent:?}: bound to its own namespace and name, keyed `<namespace>_<name>`"
        );
        assert!(decision.warnings.is_empty(), "{:?}", decision.warnings);
    }
}

#[test]
fn without_consent_the_answer_is_the_same_whether_the_object_exists_or_not() {
    let object = web("secret/shared/ca", json!({"secret.configsum.dev/shared_ca": D}));
    let refusing: Objects = vec![(("shared", "ca"), Ok(secret(Some("other, app-x"))))];
    let unannotated: Objects = vec![(("shared", "ca"), Ok(secret(None)))];
    let missing: Objects = Vec::new();
    let answers: Vec<Decision> = [refusing, unannotated, missing]
        .iter()
        .map(|objects| decide(&object, objects, &Settings::default()))
        .collect();
    let warning = "secret/shared/ca: no secret shared here, and namespace shared gives no \
                   consent (configsum.dev/readable-from); skipped";
    for answer in &answers {
        assert_eq!(answer.warnings, [warning]);
        assert_eq!(patched(&object, answer), json!({}), "a digest honoured before is removed");
        assert_eq!(answer.changed, [ObjectRef::across(super::ObjectKind::Secret, "shared", "ca")]);
        assert_eq!(format!("{:?}", answer.patch), format!("{:?}", answers[0].patch));
    }
}

#[test]
fn the_workloads_own_object_of_that_name_makes_the_token_one_of_its_keys() {
    let object = web("secret/shared/ca", json!({"secret.configsum.dev/shared_ca": D}));
    let objects: Objects =
        vec![(("app", "shared"), Ok(secret(None))), (("shared", "ca"), Ok(secret(Some("*"))))];
    let decision = decide(&object, &objects, &Settings::default());
    let key_ca = ConsumedKeys::Keys(["ca".to_owned()].into());
    assert_eq!(
        patched(&object, &decision),
        json!({"secret.configsum.dev/shared": digest("app", "shared", &key_ca)}),
        "the workload's own namespace decides; the other namespace's digest goes"
    );
    assert!(decision.warnings.is_empty(), "{:?}", decision.warnings);
}

#[test]
fn tokens_that_cannot_name_a_namespace_stay_keys_of_the_workloads_own_objects() {
    // `app` is the workload's own namespace; `db.v1` and `Shared` are no namespace names;
    // `ca_pem` is no object name.
    let track = "secret/app/ca, secret/db.v1/ca, secret/shared/ca_pem";
    let object = web(track, json!({}));
    let decision = decide(&object, &Vec::new(), &Settings::default());
    let annotations = patched(&object, &decision);
    let keys: Vec<&String> = annotations.as_object().expect("a map").keys().collect();
    assert_eq!(
        keys,
        ["secret.configsum.dev/app", "secret.configsum.dev/db.v1", "secret.configsum.dev/shared"]
    );
    assert!(annotations.as_object().expect("a map").values().all(|v| v == "absent"));
}

#[test]
fn an_unreadable_own_object_keeps_the_other_namespaces_digest() {
    let object = web("secret/shared/ca", json!({"secret.configsum.dev/shared_ca": D}));
    let objects: Objects = vec![
        (("app", "shared"), Err("HTTP 503".to_owned())),
        (("shared", "ca"), Ok(secret(Some("app")))),
    ];
    let decision = decide(&object, &objects, &Settings::default());
    assert!(decision.patch.is_empty(), "undecided: kept as it is");
    assert_eq!(
        decision.warnings,
        ["secret/shared: could not be read; no annotation written (HTTP 503)"]
    );
}

#[test]
fn a_namespace_outside_namespaces_is_never_read_and_answers_as_if_refused() {
    let object = web("secret/shared/ca", json!({}));
    // Consenting, but outside `--namespaces`: never read, so never honoured.
    let objects: Objects = vec![(("shared", "ca"), Ok(secret(Some("app"))))];
    let settings = Settings { namespaces: vec!["app".to_owned()], ..Settings::default() };
    let decision = decide(&object, &objects, &settings);
    assert_eq!(patched(&object, &decision), json!({}));
    assert_eq!(decision.warnings.len(), 1, "{:?}", decision.warnings);
    assert!(decision.warnings[0].contains("gives no consent"), "{:?}", decision.warnings);
}
