//! The page's account of field ownership and dry runs, on the real API server with the real
//! webhook and controller: who owns configsum's annotations in `metadata.managedFields` after
//! client-side and server-side applies (the webhook's writes: nobody) and after the controller's
//! patch (`configsum`, `Update`), and what a dry run returns (the webhook's answer, unowned).
//! The managers of Argo CD (`argocd-controller`) and Flux (`kustomize-controller`) are only
//! names given to kubectl here; their code is not run.

use std::collections::BTreeSet;

use configsum::controller::FIELD_MANAGER;
use configsum::core::AnnotationDomain;
use serde_json::{Value, json};

use super::meaning::{
    JsonPath, ignore_entry, jq_delete_all, jq_paths, owned_annotation_paths, strings,
};
use super::page::snippet;
use crate::control_plane::ControlPlane;
use crate::controller::{Controller, one_controller_at_a_time, wait_until};
use crate::digests::config_map as config_map_digest;
use crate::install::{ConsumeAs, config_map, deployment_with_image, installation, run, secret};

const KEY: &str = "configmap.configsum.dev/app";

/// The `fieldsV1` path of the template annotation [`KEY`].
const ANNOTATION: &[&str] =
    &["f:spec", "f:template", "f:metadata", "f:annotations", "f:configmap.configsum.dev/app"];
/// The `fieldsV1` path of container `app`'s image.
const IMAGE: &[&str] =
    &["f:spec", "f:template", "f:spec", "f:containers", r#"k:{"name":"app"}"#, "f:image"];

/// The (manager, operation) of every managedFields entry that owns the field at `path`.
fn owners(object: &Value, path: &[&str]) -> Vec<(String, String)> {
    let entries = object["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    entries
        .iter()
        .filter(|entry| {
            path.iter().try_fold(&entry["fieldsV1"], |fields, token| fields.get(token)).is_some()
        })
        .map(|entry| {
            let text = |field: &str| entry[field].as_str().unwrap_or_default().to_owned();
            (text("manager"), text("operation"))
        })
        .collect()
}

fn owned_by(manager: &str, operation: &str) -> Vec<(String, String)> {
    vec![(manager.to_owned(), operation.to_owned())]
}

fn live(cp: &ControlPlane, namespace: &str, name: &str) -> Value {
    cp.get_json(&["deployment", name, "-n", namespace, "--show-managed-fields"])
}

fn annotation(object: &Value) -> &Value {
    &object["spec"]["template"]["metadata"]["annotations"][KEY]
}

/// `kubectl ARGS -f -` of `yaml`, which must succeed; its stdout.
fn kubectl_stdin(cp: &ControlPlane, args: &[&str], yaml: &str) -> String {
    let mut all = args.to_vec();
    all.extend(["-f", "-"]);
    let output = cp.kubectl_with_input(&all, Some(yaml));
    assert!(
        output.status.success(),
        "kubectl {}: {}\n{yaml}",
        all.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A server-side apply as `manager`, taking the fields it sets from other managers, as Flux
/// applies.
fn server_side_apply(cp: &ControlPlane, manager: &str, yaml: &str) {
    let args = ["apply", "--server-side", "--force-conflicts", "--field-manager", manager];
    kubectl_stdin(cp, &args, yaml);
}

/// A server-side apply dry run as `manager`: the object the API server would store, with its
/// managedFields, as Argo CD's server-side diff and Flux's drift checks ask for it.
fn server_side_dry_run(cp: &ControlPlane, manager: &str, yaml: &str) -> Value {
    let args = [
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager",
        manager,
        "--force-conflicts",
        "--show-managed-fields",
        "-o",
        "json",
    ];
    serde_json::from_str(&kubectl_stdin(cp, &args, yaml)).expect("kubectl JSON")
}

/// What a write of the Deployment (not of its status, which kube-controller-manager updates)
/// would change: its spec, generation and the managedFields entries of its writers.
fn written(object: &Value) -> Value {
    let mut writers: Vec<Value> = object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["subresource"] != "status")
        .filter(|entry| entry["manager"] != "kube-controller-manager")
        .cloned()
        .collect();
    writers.sort_by_key(|entry| entry["manager"].to_string());
    json!({
        "spec": object["spec"],
        "generation": object["metadata"]["generation"],
        "managedFields": writers,
    })
}

/// Who owns what docs/gitops.md says each writer owns ("What changes, and under whose name").
#[test]
fn the_webhooks_annotations_have_no_manager_and_the_controllers_are_configsums() {
    run(async {
        // A controller runs at the end: none of another test may run beside it.
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        let ns = "gitops-owners";
        cp.namespace(ns, true);
        let data = |version: &'static str| [("mode", version)];
        let digest = |version| json!(config_map_digest(ns, "app", &data(version)));
        let workload = |name: &str, image: &str| {
            deployment_with_image(ns, name, image, &[("app", ConsumeAs::EnvFrom)])
        };

        // kubectl's client-side apply creates, then updates (a new image makes it write).
        let client = |image: &str| workload("client", image);
        cp.apply(&format!("{}\n---\n{}", config_map(ns, "app", &data("1")), client("r/app:1")));
        let object = live(cp, ns, "client");
        assert_eq!(annotation(&object), &digest("1"), "the webhook wrote the digest");
        assert_eq!(owners(&object, ANNOTATION), [], "created: {object}");
        assert_eq!(owners(&object, IMAGE), owned_by("kubectl-client-side-apply", "Update"));
        cp.apply(&format!("{}\n---\n{}", config_map(ns, "app", &data("2")), client("r/app:2")));
        let object = live(cp, ns, "client");
        assert_eq!(annotation(&object), &digest("2"));
        assert_eq!(owners(&object, ANNOTATION), [], "updated: {object}");
        // The same manifest again: nothing to send, nothing written.
        let unchanged = cp.apply(&client("r/app:2"));
        assert!(unchanged.contains("deployment.apps/client unchanged"), "{unchanged}");
        assert_eq!(written(&live(cp, ns, "client")), written(&object));

        // Server-side apply, as kubectl and then as Flux's manager.
        let server = |image: &str| workload("server", image);
        server_side_apply(cp, "kubectl", &server("r/app:1"));
        let object = live(cp, ns, "server");
        assert_eq!(annotation(&object), &digest("2"));
        assert_eq!(owners(&object, ANNOTATION), [], "created: {object}");
        assert_eq!(owners(&object, IMAGE), owned_by("kubectl", "Apply"));
        cp.apply(&config_map(ns, "app", &data("3")));
        server_side_apply(cp, "kustomize-controller", &server("r/app:3"));
        let object = live(cp, ns, "server");
        assert_eq!(annotation(&object), &digest("3"));
        assert_eq!(owners(&object, ANNOTATION), [], "updated: {object}");
        assert_eq!(owners(&object, IMAGE), owned_by("kustomize-controller", "Apply"));

        // A dry run goes through the webhook: with the ConfigMap changed and no controller
        // running, it carries the new digest, unowned, and writes nothing.
        cp.apply(&config_map(ns, "app", &data("4")));
        let before = live(cp, ns, "server");
        let dry = server_side_dry_run(cp, "argocd-controller", &server("r/app:3"));
        assert_eq!(annotation(&dry), &digest("4"), "the dry run's digest");
        assert_eq!(owners(&dry, ANNOTATION), [], "in the dry run: {dry}");
        assert_eq!(written(&live(cp, ns, "server")), written(&before), "a dry run writes nothing");
        // A client-side dry run of a new workload: the webhook's digest, and no object.
        let new = kubectl_stdin(
            cp,
            &["apply", "--dry-run=server", "-o", "json"],
            &workload("new", "r/app:1"),
        );
        let new: Value = serde_json::from_str(&new).expect("kubectl JSON");
        assert_eq!(annotation(&new), &digest("4"));
        let absent = cp.kubectl(&["get", "deployment", "new", "-n", ns]);
        assert!(!absent.status.success(), "a dry run created the Deployment");

        // Without the webhook (the namespace not opted in), either apply keeps the annotation
        // that it does not set.
        cp.kubectl_ok(&["label", "namespace", ns, "configsum.dev/enabled-"]);
        cp.apply(&client("r/app:4"));
        server_side_apply(cp, "kustomize-controller", &server("r/app:4"));
        assert_eq!(annotation(&live(cp, ns, "client")), &digest("2"), "client-side apply kept it");
        assert_eq!(annotation(&live(cp, ns, "server")), &digest("3"), "server-side apply kept it");
        cp.kubectl_ok(&["label", "namespace", ns, "configsum.dev/enabled=true"]);

        // The controller catches both up: the annotation it changed is configsum's, and it owns
        // nothing else. Both at once: no node runs their pods here, so with waves the second
        // would wait for the first's rollout for ever (the waves record's own patch is on a
        // real API server in tests/node/waves.rs).
        let controller = Controller::start_as(
            cp,
            &install.dir,
            "configsum-controller",
            "gitops",
            &["--fan-out", "all"],
        )
        .await;
        for name in ["client", "server"] {
            wait_until(&format!("the patch of {name}"), std::time::Duration::from_secs(15), || {
                annotation(&live(cp, ns, name)) == &digest("4")
            })
            .await;
            let object = live(cp, ns, name);
            assert_eq!(owners(&object, ANNOTATION), owned_by(FIELD_MANAGER, "Update"), "{name}");
            let entries = object["metadata"]["managedFields"].as_array().expect("managedFields");
            let ours: Vec<_> = entries.iter().filter(|e| e["manager"] == FIELD_MANAGER).collect();
            assert_eq!(ours.len(), 1, "{name}: {entries:?}");
            assert_eq!(
                ours[0]["fieldsV1"],
                json!({"f:spec": {"f:template": {"f:metadata": {"f:annotations": {
                    format!("f:{KEY}"): {}}}}}}),
                "{name}: configsum owns the annotation it patched, nothing else"
            );
        }
        controller.stop().await;

        // Later applies that do not set the annotation leave it configsum's.
        cp.apply(&client("r/app:5"));
        server_side_apply(cp, "kustomize-controller", &server("r/app:5"));
        for name in ["client", "server"] {
            let object = live(cp, ns, name);
            assert_eq!(annotation(&object), &digest("4"), "{name}");
            assert_eq!(owners(&object, ANNOTATION), owned_by(FIELD_MANAGER, "Update"), "{name}");
        }

        // Digests in Git (configsum render) that are stale: a forced server-side apply (Flux's)
        // takes the field, and the webhook writes the current digest over Git's, in its dry run
        // as in its apply, so Flux sees no drift.
        let stale = serde_json::from_str::<Value>(&server("r/app:5"))
            .map(|mut d| {
                d["spec"]["template"]["metadata"]["annotations"] = json!({KEY: digest("1")});
                d.to_string()
            })
            .expect("JSON");
        let dry = server_side_dry_run(cp, "kustomize-controller", &stale);
        assert_eq!(annotation(&dry), &digest("4"), "the webhook's digest, not Git's");
        assert_eq!(owners(&dry, ANNOTATION), owned_by("kustomize-controller", "Apply"));
        server_side_apply(cp, "kustomize-controller", &stale);
        let object = live(cp, ns, "server");
        assert_eq!(annotation(&object), &digest("4"));
        assert_eq!(owners(&object, ANNOTATION), owned_by("kustomize-controller", "Apply"));
    });
}

/// The page's ignoreDifferences expressions on a Deployment as the API server stores it after
/// the webhook: exactly configsum's annotations, beside `kubectl rollout restart`'s.
#[test]
fn the_ignore_differences_expressions_select_configsums_annotations_on_a_live_object() {
    run(async {
        let install = installation().await;
        let cp = install.cp;
        let ns = "gitops-live";
        cp.namespace(ns, true);
        cp.apply(&format!(
            "{}\n---\n{}\n---\n{}",
            config_map(ns, "app", &[("k", "v")]),
            secret(ns, "db", &[("password", "p")]),
            deployment_with_image(
                ns,
                "web",
                "r/app:1",
                &[("app", ConsumeAs::EnvFrom), ("db", ConsumeAs::SecretEnvFrom)]
            )
        ));
        cp.kubectl_ok(&["rollout", "restart", "deployment/web", "-n", ns]);
        let object = cp.get_json(&["deployment", "web", "-n", ns]);
        let annotations =
            object["spec"]["template"]["metadata"]["annotations"].as_object().expect("annotations");
        let keys: BTreeSet<&str> = annotations.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from([
                "configmap.configsum.dev/app",
                "secret.configsum.dev/db",
                "kubectl.kubernetes.io/restartedAt"
            ])
        );

        let app = snippet("argocd-application-ignore-differences");
        let expressions = strings(&ignore_entry(&app)["jqPathExpressions"], "jqPathExpressions");
        let selected: BTreeSet<JsonPath> =
            expressions.iter().flat_map(|e| jq_paths(e, &object)).collect();
        assert_eq!(selected, owned_annotation_paths(&object));
        assert_eq!(selected.len(), 2);
        let domain = AnnotationDomain::default();
        let normalized = jq_delete_all(&expressions, &object);
        let left = normalized["spec"]["template"]["metadata"]["annotations"]
            .as_object()
            .expect("restartedAt is left");
        assert!(left.keys().all(|k| !domain.owns(k)) && left.len() == 1, "{left:?}");
    });
}
