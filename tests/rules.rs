//! Every admission rule of the README ("What it does", "Annotations") and of docs/behaviour.md ("Limits"), through the pure core: plan, digest from
//! memory, decide, then apply the patch as the API server would.

#[path = "support/digests.rs"]
mod digests;
#[path = "support/fixtures.rs"]
mod fixtures;

use std::collections::BTreeMap;

use configsum::core::model::kinds::WorkloadKind;
use configsum::core::{
    AnnotationDomain, DigestKeys, Digester, LookupErrorPolicy, ObjectRef, Settings,
};
use fixtures::*;
use serde_json::{Value, json};

const NS: &str = "team-a";
const CM_KEY: &str = "configmap.configsum.dev/app-config";
const SECRET_KEY: &str = "secret.configsum.dev/db";

fn objects() -> Objects {
    Objects::default()
        .config_map(NS, "app-config", &[("log-level", "debug"), ("app.properties", "a=1\n")])
        .secret(NS, "db", &[("password", "hunter2"), ("username", "admin")])
}

fn spec() -> Value {
    pod_spec_env_from(&["app-config"], &["db"])
}

/// The digests the webhook should write for `objects()` consumed whole, from the published
/// format (support/digests.rs), not from the code under test.
fn expected_digests() -> BTreeMap<String, String> {
    let key = std::str::from_utf8(KEY).expect("a text key");
    BTreeMap::from([
        (
            CM_KEY.to_owned(),
            digests::config_map(
                NS,
                "app-config",
                &[("log-level", "debug"), ("app.properties", "a=1\n")],
            ),
        ),
        (
            SECRET_KEY.to_owned(),
            digests::secret(key, NS, "db", &[("password", "hunter2"), ("username", "admin")]),
        ),
    ])
}

fn with_template_annotations(mut object: Value, kind: &str, annotations: Value) -> Value {
    let pointer = annotations_pointer(kind);
    let parent = pointer.trim_end_matches("/annotations");
    if let Some(meta) = object.pointer_mut(parent).and_then(Value::as_object_mut) {
        meta.insert("annotations".into(), annotations);
    }
    object
}

fn with_workload_annotations(mut object: Value, annotations: Value) -> Value {
    object["metadata"]["annotations"] = annotations;
    object
}

#[test]
fn every_mutated_kind_gets_digests_at_its_path_and_is_idempotent() {
    // Every declared kind: a new one fails here until its fixtures exist.
    for kind in WorkloadKind::all().map(WorkloadKind::as_str) {
        let object = workload(kind, NS, spec());
        let decision = Admit::new(kind, "CREATE", &object).run(&objects());
        let patched = apply(&object, &decision);
        assert_eq!(
            annotations_at(&patched, annotations_pointer(kind)),
            expected_digests(),
            "{kind}"
        );
        assert!(decision.warnings.is_empty(), "{kind}: {:?}", decision.warnings);

        let again =
            Admit { old: Some(&patched), ..Admit::new(kind, "CREATE", &patched) }.run(&objects());
        assert!(
            again.patch.is_empty(),
            "{kind}: admitting the patched object again changes nothing"
        );
    }
}

#[test]
fn updates_are_mutated_except_for_jobs_and_pods() {
    for kind in ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Rollout"] {
        let object = workload(kind, NS, spec());
        assert!(!Admit::new(kind, "UPDATE", &object).run(&objects()).patch.is_empty(), "{kind}");
    }
    for kind in ["Job", "Pod"] {
        let object = workload(kind, NS, spec());
        assert!(
            Admit::new(kind, "UPDATE", &object).run(&objects()).patch.is_empty(),
            "{kind} UPDATE"
        );
    }
}

#[test]
fn untouched_kinds_operations_and_subresources() {
    let cron_job = workload("CronJob", NS, spec());
    assert!(Admit::new("CronJob", "CREATE", &cron_job).run(&objects()).patch.is_empty());
    let deployment = workload("Deployment", NS, spec());
    for operation in ["DELETE", "CONNECT", "PATCH"] {
        assert!(
            Admit::new("Deployment", operation, &deployment).run(&objects()).patch.is_empty(),
            "{operation}"
        );
    }
    for sub in ["scale", "status"] {
        let admit =
            Admit { sub_resource: Some(sub), ..Admit::new("Deployment", "UPDATE", &deployment) };
        assert!(admit.run(&objects()).patch.is_empty(), "{sub}");
    }
    let decision = Admit::new("Service", "CREATE", &deployment).run(&objects());
    assert!(decision.patch.is_empty() && decision.warnings.is_empty());
}

#[test]
fn rollout_with_workload_ref_is_skipped() {
    let rollout = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "r", "namespace": NS},
        "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}});
    let decision = Admit::new("Rollout", "CREATE", &rollout).run(&objects());
    assert!(decision.patch.is_empty() && decision.warnings.is_empty());
}

#[test]
fn nothing_in_kube_system_or_configsums_own_namespace_is_mutated_or_looked_up() {
    let mut objects = Objects::default();
    for ns in ["kube-system", "configsum-system", "ops"] {
        objects = objects.secret(ns, "db", &[("password", "root-token")]).config_map(
            ns,
            "app-config",
            &[("log-level", "debug")],
        );
    }
    for ns in ["kube-system", "configsum-system"] {
        let object = workload("Deployment", ns, spec());
        let decision = Admit::new("Deployment", "CREATE", &object).run(&objects);
        assert!(decision.patch.is_empty() && decision.warnings.is_empty(), "{ns}");
    }
    // Named only in the object, not in the request: still protected.
    let mut admit_pod = workload("Pod", "kube-system", spec());
    admit_pod["metadata"]["namespace"] = json!("kube-system");
    let mut pod = Admit::new("Pod", "CREATE", &admit_pod);
    pod.namespace = "";
    assert!(pod.run(&objects).patch.is_empty());
    // Another namespace is mutated as usual.
    let ops = workload("Deployment", "ops", spec());
    assert!(!Admit::new("Deployment", "CREATE", &ops).run(&objects).patch.is_empty());
}

#[test]
fn outside_namespaces_nothing_is_mutated_or_looked_up() {
    let mut objects = objects();
    for ns in ["team-b", "team-c"] {
        objects = objects.secret(ns, "db", &[("password", "other-tenant")]);
        objects = objects.config_map(ns, "app-config", &[("log-level", "debug")]);
    }
    // Every lookup outside team-a fails the test: none may be made.
    for ns in ["team-b", "team-c"] {
        objects = objects.unreadable(ns, ObjectRef::secret("db"), "looked up outside --namespaces");
    }
    let settings = Settings { namespaces: vec![NS.into(), "team-c".into()], ..Settings::default() };
    let in_b = workload("Deployment", "team-b", spec());
    let mut admit = Admit::new("Deployment", "CREATE", &in_b);
    admit.settings = settings.clone();
    let decision = admit.run(&objects);
    assert!(decision.patch.is_empty() && decision.warnings.is_empty(), "{decision:?}");
    let in_a = workload("Deployment", NS, spec());
    let mut admit = Admit::new("Deployment", "CREATE", &in_a);
    admit.settings = settings;
    assert!(!admit.run(&objects).patch.is_empty(), "a listed namespace is served");
}

#[test]
fn controller_owned_objects_are_never_mutated() {
    let owner = |controller: bool| {
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d",
        "uid": "1", "controller": controller}])
    };
    let mut owned = workload("ReplicaSet", NS, spec());
    owned["metadata"]["ownerReferences"] = owner(true);
    assert!(Admit::new("ReplicaSet", "CREATE", &owned).run(&objects()).patch.is_empty());
    let mut pod = workload("Pod", NS, spec());
    pod["metadata"]["ownerReferences"] = owner(true);
    assert!(Admit::new("Pod", "CREATE", &pod).run(&objects()).patch.is_empty());
    // An owner that is not the controller does not count.
    let mut referenced = workload("ReplicaSet", NS, spec());
    referenced["metadata"]["ownerReferences"] = owner(false);
    assert!(!Admit::new("ReplicaSet", "CREATE", &referenced).run(&objects()).patch.is_empty());
}

#[test]
fn enabled_false_leaves_everything_including_stale_digests() {
    let object = with_template_annotations(
        workload("Deployment", NS, spec()),
        "Deployment",
        json!({"configmap.configsum.dev/gone": "sha256:00"}),
    );
    let disabled =
        with_workload_annotations(object.clone(), json!({"configsum.dev/enabled": "false"}));
    assert!(Admit::new("Deployment", "UPDATE", &disabled).run(&objects()).patch.is_empty());
    // Only the exact "false" disables; on the template it means nothing.
    let enabled =
        with_workload_annotations(object.clone(), json!({"configsum.dev/enabled": "true"}));
    assert!(!Admit::new("Deployment", "UPDATE", &enabled).run(&objects()).patch.is_empty());
    let on_template =
        with_template_annotations(object, "Deployment", json!({"configsum.dev/enabled": "false"}));
    assert!(!Admit::new("Deployment", "UPDATE", &on_template).run(&objects()).patch.is_empty());
    // A Pod's own annotations are its workload annotations.
    let pod = with_workload_annotations(
        workload("Pod", NS, spec()),
        json!({"configsum.dev/enabled": "false"}),
    );
    assert!(Admit::new("Pod", "CREATE", &pod).run(&objects()).patch.is_empty());
}

#[test]
fn track_and_ignore_are_read_from_the_workload() {
    let object = with_workload_annotations(
        workload("Deployment", NS, spec()),
        json!({"configsum.dev/track": "secret/db, secret/extra", "configsum.dev/ignore": "secret/extra"}),
    );
    let patched = apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects()));
    let annotations = annotations_at(&patched, annotations_pointer("Deployment"));
    assert_eq!(annotations.keys().collect::<Vec<_>>(), [SECRET_KEY]);

    // A tracked object the pod spec does not reference is digested whole.
    let object = with_workload_annotations(
        workload("Deployment", NS, pod_spec_env_from(&[], &[])),
        json!({"configsum.dev/track": "configmap/app-config"}),
    );
    let patched = apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects()));
    assert_eq!(
        annotations_at(&patched, annotations_pointer("Deployment"))[CM_KEY],
        expected_digests()[CM_KEY]
    );
}

#[test]
fn ignore_star_removes_every_object_digest_and_keeps_image_tracking() {
    let digest = format!("sha256:{}", "1".repeat(64));
    let object = with_template_annotations(
        with_workload_annotations(
            workload("Deployment", NS, spec()),
            json!({"configsum.dev/ignore": "*", "configsum.dev/images": "*",
                "configsum.dev/image-policy": "pin"}),
        ),
        "Deployment",
        json!({CM_KEY: "sha256:old", SECRET_KEY: "hmac-sha256:old",
            "image.configsum.dev/app": digest, "example.com/owner": "team-a"}),
    );
    let decision = Admit::new("Deployment", "UPDATE", &object).run(&objects());
    assert!(decision.warnings.is_empty(), "{:?}", decision.warnings);
    let annotations = annotations_at(&apply(&object, &decision), annotations_pointer("Deployment"));
    assert_eq!(
        annotations,
        BTreeMap::from([
            ("example.com/owner".to_owned(), "team-a".to_owned()),
            ("image.configsum.dev/app".to_owned(), digest),
        ]),
        "the object digests go, the image's stays (not resolved here: kept)"
    );
}

#[test]
fn an_object_that_does_not_count_gets_no_digest_and_loses_its_old_one() {
    use configsum::core::model::object_scope::Standing;
    for (standing, why) in [
        (Standing::Ignored, "its owner ignores it"),
        (Standing::Unselected, "outside the object selector"),
    ] {
        let objects = objects().standing(NS, ObjectRef::secret("db"), standing);
        // Created: no digest for it, and nothing to say.
        let created = workload("Deployment", NS, spec());
        let decision = Admit::new("Deployment", "CREATE", &created).run(&objects);
        assert!(decision.warnings.is_empty(), "{:?}", decision.warnings);
        let annotations =
            annotations_at(&apply(&created, &decision), annotations_pointer("Deployment"));
        assert_eq!(annotations.keys().collect::<Vec<_>>(), [CM_KEY], "{standing:?}");
        // Updated with a digest from before: removed, with the reason.
        let updated = with_template_annotations(
            workload("Deployment", NS, spec()),
            "Deployment",
            json!({SECRET_KEY: "hmac-sha256:old"}),
        );
        let decision = Admit::new("Deployment", "UPDATE", &updated).run(&objects);
        assert_eq!(
            decision.warnings,
            [format!("secret/db: {why}; its digest is removed")],
            "{standing:?}"
        );
        let annotations =
            annotations_at(&apply(&updated, &decision), annotations_pointer("Deployment"));
        assert!(!annotations.contains_key(SECRET_KEY), "{standing:?}: {annotations:?}");
        assert!(annotations.contains_key(CM_KEY));
    }
}

#[test]
fn unparseable_tokens_warn() {
    let object = with_workload_annotations(
        workload("Deployment", NS, spec()),
        // A Job cannot be tracked (nothing would roll when it changes): not a token here.
        json!({"configsum.dev/track": "*, job/x"}),
    );
    let decision = Admit::new("Deployment", "CREATE", &object).run(&objects());
    assert_eq!(decision.warnings.len(), 1);
    assert_eq!(
        decision.warnings[0],
        r#""job/x" in configsum.dev/track: not a kind that can be tracked; skipped"#
    );
    assert_eq!(
        annotations_at(&apply(&object, &decision), annotations_pointer("Deployment")),
        expected_digests()
    );
}

#[test]
fn only_consumed_keys_are_digested() {
    let spec = json!({"containers": [{"name": "c", "env": [
        {"name": "L", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "log-level"}}}]}]});
    let object = workload("Deployment", NS, spec);
    let before = apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects()));
    // A key the pods do not read changes: nothing to roll.
    let unrelated = Objects::default().config_map(
        NS,
        "app-config",
        &[("log-level", "debug"), ("app.properties", "a=2\n")],
    );
    assert!(Admit::new("Deployment", "UPDATE", &before).run(&unrelated).patch.is_empty());
    // The key they read changes: a new digest.
    let related = Objects::default().config_map(NS, "app-config", &[("log-level", "info")]);
    assert_eq!(Admit::new("Deployment", "UPDATE", &before).run(&related).patch.len(), 1);
}

#[test]
fn stale_digests_are_removed_and_other_annotations_kept() {
    let object = with_template_annotations(
        workload("Deployment", NS, spec()),
        "Deployment",
        json!({
            "configmap.configsum.dev/removed-from-spec": "sha256:00",
            "secret.configsum.dev/also-gone": "absent",
            "example.com/owner": "team-a",
            "configsum.dev/track": "not-ours-either",
        }),
    );
    let patched = apply(&object, &Admit::new("Deployment", "UPDATE", &object).run(&objects()));
    let mut expected = expected_digests();
    expected.insert("example.com/owner".into(), "team-a".into());
    expected.insert("configsum.dev/track".into(), "not-ours-either".into());
    assert_eq!(annotations_at(&patched, annotations_pointer("Deployment")), expected);
    // The patch touched nothing but the annotations.
    let mut stripped = patched.clone();
    stripped["spec"]["template"]["metadata"]["annotations"] = Value::Null;
    let mut original = object.clone();
    original["spec"]["template"]["metadata"]["annotations"] = Value::Null;
    assert_eq!(stripped, original);
}

#[test]
fn template_without_metadata_gets_it_created() {
    let mut object = workload("Deployment", NS, spec());
    object["spec"]["template"].as_object_mut().map(|t| t.remove("metadata"));
    let patched = apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects()));
    assert_eq!(annotations_at(&patched, annotations_pointer("Deployment")), expected_digests());
}

#[test]
fn pod_without_metadata_gets_it_created() {
    // The API server always sends metadata; a direct caller need not.
    for metadata in [None, Some(Value::Null)] {
        let mut object = workload("Pod", NS, spec());
        match &metadata {
            None => object.as_object_mut().map(|o| o.remove("metadata")),
            Some(value) => {
                object.as_object_mut().map(|o| o.insert("metadata".into(), value.clone()))
            }
        };
        let admit = Admit { namespace: NS, ..Admit::new("Pod", "CREATE", &object) };
        let patched = apply(&object, &admit.run(&objects()));
        assert_eq!(
            annotations_at(&patched, annotations_pointer("Pod")),
            expected_digests(),
            "{metadata:?}"
        );
    }
}

#[test]
fn missing_objects_are_absent_and_warned_unless_optional() {
    let spec = json!({"containers": [{"name": "c", "envFrom": [
        {"configMapRef": {"name": "not-there"}}, {"secretRef": {"name": "maybe", "optional": true}}]}]});
    let object = workload("Deployment", NS, spec);
    let decision = Admit::new("Deployment", "CREATE", &object).run(&objects());
    let annotations = annotations_at(&apply(&object, &decision), annotations_pointer("Deployment"));
    assert_eq!(annotations["configmap.configsum.dev/not-there"], "absent");
    assert_eq!(annotations["secret.configsum.dev/maybe"], "absent");
    assert_eq!(decision.warnings.len(), 1, "{:?}", decision.warnings);
    assert!(
        decision.warnings[0] == r#"configmap/not-there: not found; its digest is "absent""#,
        "{:?}",
        decision.warnings
    );
}

#[test]
fn audit_names_changed_digests_only() {
    let object = workload("Deployment", NS, spec());
    let first = apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects()));
    assert!(
        Admit::new("Deployment", "CREATE", &object).run(&objects()).changed.is_empty(),
        "additions are not changes"
    );

    let mut changed = objects();
    changed.insert(NS, ObjectRef::secret("db"), &[("password", "rotated"), ("username", "admin")]);
    let decision = Admit::new("Deployment", "UPDATE", &first).run(&changed);
    assert_eq!(decision.changed, [ObjectRef::secret("db")]);

    // absent to a digest and back are changes too.
    let mut gone = objects();
    gone.remove(NS, &ObjectRef::config_map("app-config"));
    let decision = Admit::new("Deployment", "UPDATE", &first).run(&gone);
    assert_eq!(decision.changed, [ObjectRef::config_map("app-config")]);
    let absent = apply(&first, &decision);
    assert_eq!(
        Admit::new("Deployment", "UPDATE", &absent).run(&objects()).changed,
        [ObjectRef::config_map("app-config")]
    );
}

#[test]
fn existing_digests_fall_back_to_the_old_object() {
    // `kubectl replace` sends a template without the digests; the old object has them.
    let object = workload("Deployment", NS, spec());
    let current = apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects()));
    let unreadable = objects().unreadable(NS, ObjectRef::secret("db"), "HTTP 503");
    let decision = Admit { old: Some(&current), ..Admit::new("Deployment", "UPDATE", &object) }
        .run(&unreadable);
    let patched = apply(&object, &decision);
    assert_eq!(
        annotations_at(&patched, annotations_pointer("Deployment")),
        expected_digests(),
        "the unreadable Secret keeps the old object's digest"
    );
    assert!(decision.changed.is_empty());

    let mut rotated = objects();
    rotated.insert(NS, ObjectRef::secret("db"), &[("password", "new")]);
    let decision =
        Admit { old: Some(&current), ..Admit::new("Deployment", "UPDATE", &object) }.run(&rotated);
    assert_eq!(
        decision.changed,
        [ObjectRef::secret("db")],
        "compared against the old object's digest"
    );
}

#[test]
fn unreadable_objects_keep_their_annotation_and_the_rest_still_applies() {
    let object = workload("Deployment", NS, spec());
    let current = apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects()));
    let mut changed = objects().unreadable(NS, ObjectRef::secret("db"), "timeout");
    changed.insert(NS, ObjectRef::config_map("app-config"), &[("log-level", "info")]);
    let decision = Admit::new("Deployment", "UPDATE", &current).run(&changed);
    let annotations =
        annotations_at(&apply(&current, &decision), annotations_pointer("Deployment"));
    assert_eq!(annotations[SECRET_KEY], expected_digests()[SECRET_KEY], "kept as it was");
    assert_ne!(annotations[CM_KEY], expected_digests()[CM_KEY], "the other digest moved");
    assert_eq!(decision.warnings.len(), 1);
    assert!(
        decision.warnings[0] == "secret/db: could not be read; its annotation was kept (timeout)",
        "{:?}",
        decision.warnings
    );

    // Without an existing annotation, nothing is written for it.
    let fresh = Admit::new("Deployment", "CREATE", &object).run(&objects().unreadable(
        NS,
        ObjectRef::secret("db"),
        "timeout",
    ));
    let annotations = annotations_at(&apply(&object, &fresh), annotations_pointer("Deployment"));
    assert!(!annotations.contains_key(SECRET_KEY) && annotations.contains_key(CM_KEY));
    assert_eq!(fresh.warnings, ["secret/db: could not be read; no annotation written (timeout)"]);
}

#[test]
fn warnings_about_253_character_names_fit_in_119_characters() {
    // The longest valid names, a multibyte invalid one and a long bad token.
    let name = |c: char| format!("head-{}-tail", c.to_string().repeat(253 - 10));
    let (missing, unreadable, invalid) = (name('m'), name('u'), name('ä'));
    let object = with_workload_annotations(
        workload("Deployment", NS, pod_spec_env_from(&[&missing, &invalid], &[&unreadable])),
        json!({"configsum.dev/ignore": format!("job/{}", name('t'))}),
    );
    let objects = objects().unreadable(NS, ObjectRef::secret(&unreadable), "timeout");
    let decision = Admit::new("Deployment", "CREATE", &object).run(&objects);
    let warnings = &decision.warnings;
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    for warning in warnings {
        assert_eq!(warning.chars().count(), 119, "{warning}");
        let subject = warning.split(": ").next().unwrap_or_default();
        assert_eq!(subject.matches('…').count(), 1, "shortened in the middle: {warning}");
    }
    let starts =
        [r#""job/head-ttt"#, r#"configmap/"head-äää"#, "configmap/head-mmm", "secret/head-uuu"];
    let ends = [
        r#"ttt-tail" in configsum.dev/ignore: not a kind that can be tracked; skipped"#,
        r#"äää-tail": not a valid object name; skipped"#,
        r#"mmm-tail: not found; its digest is "absent""#,
        "uuu-tail: could not be read; no annotation written (t…",
    ];
    for ((warning, start), end) in warnings.iter().zip(starts).zip(ends) {
        assert!(warning.starts_with(start) && warning.ends_with(end), "{warning}");
    }
}

#[test]
fn deny_mode_denies_on_lookup_errors_only() {
    let object = workload("Deployment", NS, spec());
    let settings = Settings { on_lookup_error: LookupErrorPolicy::Deny, ..Settings::default() };
    let admit = Admit { settings, ..Admit::new("Deployment", "CREATE", &object) };
    let denied = admit.run(&objects().unreadable(NS, ObjectRef::secret("db"), "HTTP 403"));
    assert!(denied.patch.is_empty());
    assert!(
        denied.denied.as_deref().is_some_and(|m| m.contains("secret/db")),
        "{:?}",
        denied.denied
    );
    let fine = admit.run(&objects());
    assert!(fine.denied.is_none() && !fine.patch.is_empty());
}

#[test]
fn unreadable_objects_are_named_under_either_policy() {
    let object = workload("Deployment", NS, spec());
    for on_lookup_error in [LookupErrorPolicy::Allow, LookupErrorPolicy::Deny] {
        let settings = Settings { on_lookup_error, ..Settings::default() };
        let admit = Admit { settings, ..Admit::new("Deployment", "CREATE", &object) };
        let decision = admit.run(&objects().unreadable(NS, ObjectRef::secret("db"), "HTTP 403"));
        assert_eq!(decision.unreadable, [ObjectRef::secret("db")], "{on_lookup_error:?}");
        assert!(admit.run(&objects()).unreadable.is_empty());
    }
}

#[test]
fn objects_beyond_the_limit_keep_their_annotations() {
    let names: Vec<String> = (0..130).map(|i| format!("cm-{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut objects = Objects::default();
    for name in &refs {
        objects.insert(NS, ObjectRef::config_map(*name), &[("k", "v")]);
    }
    let object = with_template_annotations(
        workload("Deployment", NS, pod_spec_env_from(&refs, &[])),
        "Deployment",
        json!({"configmap.configsum.dev/cm-129": "sha256:kept"}),
    );
    let decision = Admit::new("Deployment", "UPDATE", &object).run(&objects);
    let annotations = annotations_at(&apply(&object, &decision), annotations_pointer("Deployment"));
    assert_eq!(annotations.len(), 129, "128 digests and the kept one");
    assert_eq!(annotations["configmap.configsum.dev/cm-129"], "sha256:kept");
    assert!(!annotations.contains_key("configmap.configsum.dev/cm-128"));
    assert!(decision.warnings.iter().any(|w| w.contains("beyond the limit of 128")));
}

#[test]
fn no_patch_when_annotations_would_exceed_256_kib() {
    let big = "x".repeat(256 * 1024 - 100);
    let object = with_template_annotations(
        workload("Deployment", NS, spec()),
        "Deployment",
        json!({"big": big}),
    );
    let decision = Admit::new("Deployment", "CREATE", &object).run(&objects());
    assert!(decision.patch.is_empty());
    assert!(decision.warnings.iter().any(|w| w.contains("262144")), "{:?}", decision.warnings);
    // Just under the limit is fine.
    let fits = "x".repeat(256 * 1024 - 400);
    let object = with_template_annotations(
        workload("Deployment", NS, spec()),
        "Deployment",
        json!({"big": fits}),
    );
    assert!(!Admit::new("Deployment", "CREATE", &object).run(&objects()).patch.is_empty());
}

#[test]
fn unparsable_objects_are_allowed_with_a_warning() {
    // A field configsum reads, with the wrong type.
    let not_a_deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {
        "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "PASSWORD", "value": "hunter2",
            "valueFrom": {"secretKeyRef": {"name": ["many"], "key": "k"}}}]}]}}}});
    let decision = Admit::new("Deployment", "CREATE", &not_a_deployment).run(&objects());
    assert!(decision.patch.is_empty() && decision.denied.is_none());
    assert_eq!(decision.warnings.len(), 1);
    assert!(
        decision.warnings[0].contains("does not parse") && !decision.warnings[0].contains("many"),
        "{:?}",
        decision.warnings
    );
    let wrong_kind =
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"template": {"spec": {}}}});
    let decision = Admit::new("Deployment", "CREATE", &wrong_kind).run(&objects());
    assert!(
        decision.patch.is_empty() && decision.warnings[0].contains("not an apps/v1 Deployment"),
        "{:?}",
        decision.warnings
    );
    let no_template = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}});
    assert_eq!(Admit::new("Deployment", "CREATE", &no_template).run(&objects()).warnings.len(), 1);
}

#[test]
fn annotation_domain_moves_every_name() {
    let domain = AnnotationDomain::new("example.com").expect("domain");
    let object = with_template_annotations(
        with_workload_annotations(
            workload("Deployment", NS, spec()),
            json!({"example.com/ignore": "secret/db"}),
        ),
        "Deployment",
        json!({"configmap.configsum.dev/app-config": "sha256:left-alone"}),
    );
    let admit = Admit {
        settings: Settings { domain, ..Settings::default() },
        ..Admit::new("Deployment", "UPDATE", &object)
    };
    let annotations =
        annotations_at(&apply(&object, &admit.run(&objects())), annotations_pointer("Deployment"));
    assert_eq!(annotations.len(), 2);
    assert_eq!(annotations["configmap.example.com/app-config"], expected_digests()[CM_KEY]);
    assert_eq!(annotations["configmap.configsum.dev/app-config"], "sha256:left-alone");
}

#[test]
fn digests_bind_the_namespace() {
    let object = workload("Deployment", "team-b", spec());
    let objects = Objects::default()
        .config_map("team-b", "app-config", &[("log-level", "debug"), ("app.properties", "a=1\n")])
        .secret("team-b", "db", &[("password", "hunter2"), ("username", "admin")]);
    let annotations = annotations_at(
        &apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects)),
        annotations_pointer("Deployment"),
    );
    assert_eq!(annotations.len(), 2);
    for (key, value) in expected_digests() {
        assert_ne!(
            annotations[&key], value,
            "{key}: same data in another namespace, another digest"
        );
    }
}

#[test]
fn key_rotation_rolls_nothing() {
    let object = workload("Deployment", NS, spec());
    let current = apply(&object, &Admit::new("Deployment", "CREATE", &object).run(&objects()));
    let rotated = Digester::new(
        DigestKeys::parse(b"a-brand-new-signing-key\n0123456789abcdef0123456789abcdef\n")
            .expect("keys"),
    );
    let admit = Admit { digester: rotated.clone(), ..Admit::new("Deployment", "UPDATE", &current) };
    assert!(admit.run(&objects()).patch.is_empty(), "old digests confirmed by the listed old key");
    // Dropping the old key moves every Secret digest to the new key: one roll.
    let new_only = Digester::new(DigestKeys::parse(b"a-brand-new-signing-key\n").expect("key"));
    let decision = Admit { digester: new_only, ..Admit::new("Deployment", "UPDATE", &current) }
        .run(&objects());
    assert_eq!(decision.changed, [ObjectRef::secret("db")]);
}

#[test]
fn plain_secret_digests_are_replaced_once_a_key_is_configured() {
    let object = workload("Deployment", NS, spec());
    let plain =
        Admit { digester: Digester::default(), ..Admit::new("Deployment", "CREATE", &object) };
    let current = apply(&object, &plain.run(&objects()));
    assert!(
        annotations_at(&current, annotations_pointer("Deployment"))[SECRET_KEY]
            .starts_with("sha256:")
    );
    let keyed = Admit::new("Deployment", "UPDATE", &current).run(&objects());
    let annotations = annotations_at(&apply(&current, &keyed), annotations_pointer("Deployment"));
    assert!(annotations[SECRET_KEY].starts_with("hmac-sha256:"));
    assert_eq!(
        annotations[CM_KEY],
        expected_digests()[CM_KEY],
        "ConfigMap digests never use the key"
    );
}
