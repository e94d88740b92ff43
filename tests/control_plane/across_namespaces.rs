//! References across namespaces (SPEC 17 point 4) on the real API server: a `configsum.dev/track`
//! token `secret/<namespace>/<name>` or `configmap/<namespace>/<name>` names an object of
//! another namespace, honoured only when that object's `configsum.dev/readable-from` lists the
//! tracker's namespace or is `*`. Without consent, a tracker learns nothing it could not learn
//! of a missing object: the same warning, byte for byte, and no measurable difference in the
//! webhook's time. The controller rolls a tracker when the remote object changes, and takes the
//! digest away when the consent goes.
//!
//! Each test serves its tracker's namespace with a webhook of its own (a scoped copy of the
//! chart's configuration, as object_say.rs does); the remote namespaces are not opted in.
//! None of them holds a Secret or ConfigMap named like the remote namespace except where the
//! test says so: `secret/<a>/<b>` is key `<b>` of a local Secret `<a>` when one exists.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::controller::{Controller, one_controller_at_a_time, secret_digest, wait_until};
use crate::digests;
use crate::install::{
    Installation, KEY, SYSTEM, deployment_with_image, installation, run, secret, start_serve,
};
use crate::server::Server;
use crate::webhook::scoped_copy;

/// The reads the webhook makes are made as this user (the chart's ServiceAccount).
fn webhook_user() -> String {
    format!("system:serviceaccount:{SYSTEM}:configsum-webhook")
}

/// A Secret (`kind` "Secret") or ConfigMap with one key `k`, and `readable_from` as its
/// `configsum.dev/readable-from` annotation when given.
fn remote(
    kind: &str,
    namespace: &str,
    name: &str,
    readable_from: Option<&str>,
    value: &str,
) -> String {
    let data = if kind == "Secret" { "stringData" } else { "data" };
    let mut object = json!({"apiVersion": "v1", "kind": kind,
        "metadata": {"name": name, "namespace": namespace}, data: {"k": value}});
    if let Some(readable_from) = readable_from {
        object["metadata"]["annotations"] = json!({"configsum.dev/readable-from": readable_from});
    }
    object.to_string()
}

/// Deployment `name` that reads nothing itself and tracks `track`: the only warnings its
/// writes can get are about those tokens.
fn tracker(namespace: &str, name: &str, track: &str, image: &str) -> String {
    let mut deployment: Value =
        serde_json::from_str(&deployment_with_image(namespace, name, image, &[])).expect("json");
    deployment["metadata"]["annotations"] = json!({"configsum.dev/track": track});
    deployment.to_string()
}

/// A namespace that `scoped_copy(install, name, ..)`'s webhook serves, and no other.
fn served_namespace(install: &Installation, name: &str) {
    install.cp.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{configsum-test/{name}: \"true\"}}\n"
    ));
}

/// `kubectl apply` of `yaml` (server-side dry run when `dry_run`), which must succeed; its
/// stderr, where kubectl prints the admission warnings.
fn write(install: &Installation, yaml: &str, dry_run: bool) -> String {
    let mut args = vec!["apply", "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    let applied = install.cp.kubectl_with_input(&args, Some(yaml));
    let stderr = String::from_utf8_lossy(&applied.stderr).into_owned();
    assert!(applied.status.success(), "{stderr}");
    stderr
}

/// The warning lines of `stderr` that mention `namespace`: those about a token naming it.
fn warnings_naming(stderr: &str, namespace: &str) -> Vec<String> {
    stderr.lines().filter(|line| line.contains(namespace)).map(str::to_owned).collect()
}

/// The "admission answered" log lines `serve` wrote for `object` (`namespace/name`).
fn answers(serve: &Server, object: &str) -> Vec<Value> {
    serve
        .logs()
        .iter()
        .filter(|line| line.contains("admission answered"))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["object"] == object)
        .collect()
}

/// The answer after the first `seen`: the webhook writes its lines in batches, a moment after
/// it answers, so it is waited for (10 s at most).
async fn answer_after(serve: &Server, object: &str, seen: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answers = answers(serve, object);
        if answers.len() > seen {
            assert_eq!(answers.len(), seen + 1, "one review per apply: {answers:?}");
            return answers[seen].clone();
        }
        assert!(Instant::now() < deadline, "no answer logged for {object}: {:?}", serve.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many reads of `resource` in `namespace` the webhook made after audit event `since`.
fn webhook_reads(install: &Installation, since: usize, resource: &str, namespace: &str) -> usize {
    let user = webhook_user();
    install
        .cp
        .audit_events()
        .into_iter()
        .skip(since)
        .filter(|e| e["user"]["username"] == user.as_str())
        .filter(|e| {
            e["objectRef"]["resource"] == resource && e["objectRef"]["namespace"] == namespace
        })
        .count()
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    let middle = samples.len() / 2;
    if samples.len() % 2 == 0 {
        (samples[middle - 1] + samples[middle]) / 2.0
    } else {
        samples[middle]
    }
}

#[test]
fn across_namespaces_a_remote_object_is_read_only_with_its_owners_consent() {
    const APP: &str = "xns-app";
    const SHARED: &str = "xns-shared";
    run(async {
        let install = installation().await;
        let cp = install.cp;
        let serve = start_serve(cp, &install.dir, "configsum-webhook").await;
        scoped_copy(install, APP, &serve.addr);
        served_namespace(install, APP);
        cp.namespace(SHARED, false);
        let db = |readable_from: Option<&str>| remote("Secret", SHARED, "db", readable_from, "one");
        let token = format!("secret/{SHARED}/db");
        let key = format!("secret.configsum.dev/{SHARED}_db");
        // Each write changes the image, so that kubectl sends it and the webhook is called.
        let image = Cell::new(0);
        let web = || {
            image.set(image.get() + 1);
            tracker(APP, "web", &token, &format!("registry.example/app:{}", image.get()))
        };
        let remote_annotations = || {
            let annotations = install.template_annotations(APP, "web");
            let named: Vec<String> = annotations
                .as_object()
                .map(|a| a.keys().filter(|k| k.contains(SHARED)).cloned().collect())
                .unwrap_or_default();
            (named, annotations)
        };

        // Listed among others, with spaces: honoured. The digest binds the remote object's own
        // namespace and name, and it is no key form (there is no local Secret `xns-shared`).
        cp.apply(&db(Some("other-team, xns-app")));
        let mark = cp.audit_events().len();
        wait_until("web admitted with the cross-namespace digest", Duration::from_secs(30), || {
            cp.apply(&web());
            install.template_annotations(APP, "web").get(&key).is_some()
        })
        .await;
        let (named, annotations) = remote_annotations();
        assert_eq!(
            named,
            std::slice::from_ref(&key),
            "only the cross-namespace digest: {annotations}"
        );
        assert_eq!(annotations[&key], secret_digest(SHARED, "db", &[("k", "one")]));
        assert!(webhook_reads(install, mark, "secrets", SHARED) > 0, "the remote Secret was read");

        // Without consent, three ways: a list that only nearly names this namespace, no
        // annotation at all, no Secret at all. Each write takes the digest away and gets the
        // same one warning, byte for byte: nothing tells an existing Secret from a missing one.
        cp.apply(&db(Some("other-team, xns-app-staging")));
        let refused = warnings_naming(&write(install, &web(), false), SHARED);
        assert_eq!(refused.len(), 1, "one warning about {token}: {refused:?}");
        let (named, annotations) = remote_annotations();
        assert!(named.is_empty(), "a near miss is no consent: {annotations}");
        cp.apply(&db(None));
        assert_eq!(warnings_naming(&write(install, &web(), false), SHARED), refused);
        let (named, annotations) = remote_annotations();
        assert!(named.is_empty(), "no consent: {annotations}");
        cp.kubectl_ok(&["delete", "secret", "db", "-n", SHARED]);
        assert_eq!(warnings_naming(&write(install, &web(), false), SHARED), refused);
        // Missing is not SPEC 12's "absent" digest of a local Secret either.
        let (named, annotations) = remote_annotations();
        assert!(named.is_empty(), "missing: {annotations}");

        // Nor in time. Measured in the webhook: its "admission answered" line carries
        // `duration_ms`, from request to answer, to the microsecond, per review. The wall
        // time of `kubectl apply` is mostly kubectl's start-up and the API server's own work,
        // and the admission histogram's buckets are far coarser than the difference sought;
        // the log line times exactly the part that reads the Secret and decides. Existing
        // and missing alternate in ABBA order, so drift (other tests, the builders sharing
        // the machine) falls on both alike; server-side dry runs reach the webhook without
        // writing a new revision each time.
        let object = format!("{APP}/web");
        let (mut existing, mut missing) = (Vec::new(), Vec::new());
        let mut answered = BTreeSet::new();
        // The lines of the writes above are out (a batch waits 20 ms at most); from here each
        // apply adds exactly one.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut seen = answers(&serve, &object).len();
        for round in 0..16 {
            let order = if round % 2 == 0 { [true, false] } else { [false, true] };
            for exists in order {
                if exists {
                    cp.apply(&db(None));
                } else {
                    cp.kubectl_ok(&["delete", "secret", "db", "-n", SHARED, "--ignore-not-found"]);
                }
                let stderr = write(install, &web(), true);
                assert_eq!(warnings_naming(&stderr, SHARED), refused, "round {round}, {exists}");
                let answer = answer_after(&serve, &object, seen).await;
                seen += 1;
                answered.insert(format!(
                    "{} {} {}",
                    answer["outcome"], answer["patch_ops"], answer["warnings"]
                ));
                let took = answer["duration_ms"].as_f64().expect("duration_ms");
                if exists { existing.push(took) } else { missing.push(took) }
            }
        }
        assert_eq!(answered.len(), 1, "the same answer either way: {answered:?}");
        eprintln!("webhook ms, existing without consent: {existing:?}; missing: {missing:?}");
        let (existing, missing) = (median(existing), median(missing));
        let allowed = f64::max(3.0, 0.5 * existing.min(missing));
        assert!(
            (existing - missing).abs() <= allowed,
            "median {existing} ms with a Secret that does not consent, {missing} ms without \
             one: more apart than {allowed} ms"
        );

        // A local Secret named like the remote namespace makes the token its key `db` (SPEC
        // 12), even while the remote one consents; then nothing remote is read.
        cp.apply(&db(Some(APP)));
        let local = [("db", "local")];
        cp.apply(&secret(APP, SHARED, &local));
        let mark = cp.audit_events().len();
        write(install, &web(), false);
        let annotations = install.template_annotations(APP, "web");
        assert_eq!(
            annotations[format!("secret.configsum.dev/{SHARED}")],
            digests::secret_keys(KEY, APP, SHARED, &local, &["db"]),
            "the local key: {annotations}"
        );
        assert!(annotations.get(&key).is_none(), "the local Secret wins: {annotations}");
        assert_eq!(webhook_reads(install, mark, "secrets", SHARED), 0, "nothing remote read");

        cp.kubectl_ok(&["delete", "mutatingwebhookconfiguration", APP]);
        drop(serve);
    });
}

#[test]
fn across_namespaces_the_controller_rolls_on_remote_changes_and_drops_withdrawn_ones() {
    const APP: &str = "xns-roll";
    const SOURCE: &str = "xns-source";
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        let serve = start_serve(cp, &install.dir, "configsum-webhook").await;
        scoped_copy(install, APP, &serve.addr);
        served_namespace(install, APP);
        cp.namespace(SOURCE, false);
        // The Secret lists this namespace (spaces around the comma); the ConfigMap says `*`.
        let db = |value: &str| remote("Secret", SOURCE, "db", Some("other-team , xns-roll"), value);
        let settings = |value: &str| remote("ConfigMap", SOURCE, "settings", Some("*"), value);
        cp.apply(&format!("{}\n---\n{}", db("one"), settings("one")));
        let db_key = format!("secret.configsum.dev/{SOURCE}_db");
        let settings_key = format!("configmap.configsum.dev/{SOURCE}_settings");
        let db_digest = |value: &str| secret_digest(SOURCE, "db", &[("k", value)]);
        let settings_digest =
            |value: &str| digests::config_map(SOURCE, "settings", &[("k", value)]);

        let track = format!("secret/{SOURCE}/db, configmap/{SOURCE}/settings");
        let image = Cell::new(0);
        wait_until(
            "web admitted with both cross-namespace digests",
            Duration::from_secs(30),
            || {
                image.set(image.get() + 1);
                let image = format!("registry.example/app:{}", image.get());
                cp.apply(&tracker(APP, "web", &track, &image));
                let annotations = install.template_annotations(APP, "web");
                annotations.get(&db_key).is_some() && annotations.get(&settings_key).is_some()
            },
        )
        .await;
        let annotations = install.template_annotations(APP, "web");
        assert_eq!(annotations[&db_key], db_digest("one"), "{annotations}");
        assert_eq!(annotations[&settings_key], settings_digest("one"), "{annotations}");

        // The controller serves only the tracker's namespace; the remote one is not opted in,
        // yet its objects' changes are seen.
        let extra = ["--namespace-selector", "configsum-test/xns-roll=true"];
        let controller =
            Controller::start_as(cp, &install.dir, "configsum-controller", "xns", &extra).await;
        cp.apply(&db("two"));
        wait_until("the remote Secret's change rolled web", Duration::from_secs(30), || {
            install.template_annotations(APP, "web")[&db_key] == db_digest("two")
        })
        .await;
        cp.apply(&settings("two"));
        wait_until("the `*` ConfigMap's change rolled web", Duration::from_secs(30), || {
            install.template_annotations(APP, "web")[&settings_key] == settings_digest("two")
        })
        .await;

        // Consent withdrawn (data unchanged): the digest goes, as for a deletion; the
        // ConfigMap's stays.
        cp.kubectl_ok(&["annotate", "secret", "db", "-n", SOURCE, "configsum.dev/readable-from-"]);
        wait_until("the digest went with the consent", Duration::from_secs(30), || {
            install.template_annotations(APP, "web").get(&db_key).is_none()
        })
        .await;
        controller.idle().await;
        let annotations = install.template_annotations(APP, "web");
        assert_eq!(annotations[&settings_key], settings_digest("two"), "{annotations}");
        assert_eq!(
            controller.patches().await,
            3.0,
            "two rolls and one removal: {:?}",
            controller.logs()
        );
        controller.stop().await;
        cp.kubectl_ok(&["delete", "mutatingwebhookconfiguration", APP]);
        drop(serve);
    });
}
