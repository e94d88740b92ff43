//! A namespaced install (`rbac.scope: namespaced`, `namespaces`) on the real API server: the
//! webhook and the controller run as the chart's ServiceAccounts with only the Roles the chart
//! grants in the listed namespaces (and the controller's ClusterRole for namespaces). Nothing
//! fails for want of a cluster-wide permission, and the audit log shows no read of an object
//! outside the list.

use std::time::Duration;

use serde_json::Value;

use crate::chart::Helm;
use crate::control_plane::secret;
use crate::controller::{Controller, one_controller_at_a_time, secret_digest, wait_until};
use crate::install::{ConsumeAs, deployment, installation, run, start_serve_in};
use crate::webhook::scoped_copy;

/// The release namespace of this install, its ServiceAccounts' own.
const RELEASE_NS: &str = "configsum-scoped";
const LISTED: [&str; 2] = ["scoped-a", "scoped-b"];
const OUTSIDE: &str = "scoped-c";

/// The chart's objects for a namespaced install that a second install beside the shared one
/// can take: the ServiceAccounts, Roles and RoleBindings, and the controller's ClusterRole
/// (namespaces only) under a name of its own. (The chart's cluster-scoped names are fixed:
/// one configsum per cluster.)
fn namespaced_rbac() -> Vec<Value> {
    let namespaces = format!("namespaces={{{}}}", LISTED.join(","));
    let args = ["--set", "rbac.scope=namespaced", "--set", &namespaces];
    let mut objects = Vec::new();
    for mut object in Helm::V3.render(RELEASE_NS, &args) {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "ServiceAccount" | "Role" | "RoleBinding" => objects.push(object),
            "ClusterRole" if name == "configsum-controller" => {
                object["metadata"]["name"] = "configsum-scoped-controller".into();
                objects.push(object);
            }
            "ClusterRoleBinding" if name == "configsum-controller" => {
                object["metadata"]["name"] = "configsum-scoped-controller".into();
                object["roleRef"]["name"] = "configsum-scoped-controller".into();
                objects.push(object);
            }
            "ClusterRole" | "ClusterRoleBinding" if name.starts_with("configsum") => {
                panic!("a namespaced install grants no other ClusterRole: {name}")
            }
            _ => {}
        }
    }
    objects
}

/// Whether `logs` tell of a request refused: `forbidden`, or 403 as a number of its own (not
/// inside a timestamp's fraction, a duration or a uid).
fn refused(logs: &str) -> bool {
    let apart = |c: Option<char>| c.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '.');
    let status = logs.match_indices("403").any(|(at, _)| {
        apart(logs[..at].chars().next_back()) && apart(logs[at + 3..].chars().next())
    });
    status || logs.to_lowercase().contains("forbidden")
}

#[test]
fn refusals_are_told_from_numbers_that_contain_403() {
    assert!(refused("HTTP 403"));
    assert!(refused(r#"{"error":"ApiError: pods is forbidden (Forbidden)"}"#));
    assert!(refused("status (403)"));
    assert!(!refused(r#"{"timestamp":"2026-11-28T23:26:11.812403Z","duration_ms":11.403}"#));
    assert!(!refused(r#"{"uid":"d37ec2fb-4403-466b"}"#));
}

#[test]
fn a_namespaced_install_reads_nothing_outside_its_namespaces() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        let label = "configsum-test/scoped";
        cp.apply(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {RELEASE_NS}\n"));
        for ns in LISTED.iter().chain([&OUTSIDE]) {
            cp.apply(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{{label}: \"true\"}}\n"
            ));
        }
        let rbac = namespaced_rbac();
        let kinds: Vec<&str> = rbac.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert!(kinds.contains(&"Role") && kinds.contains(&"RoleBinding"), "{kinds:?}");
        cp.apply(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": rbac}).to_string(),
        );

        let namespaces = format!("--namespaces={}", LISTED.join(","));
        let serve =
            start_serve_in(cp, &install.dir, RELEASE_NS, "configsum-webhook", &[&namespaces]).await;
        scoped_copy(install, "scoped", &serve.addr);
        let data = |value: &'static str| [("k", value)];
        let key = "secret.configsum.dev/db";
        for ns in LISTED.iter().chain([&OUTSIDE]) {
            cp.apply(&secret(ns, "db", &data("one")));
        }
        // The scoped webhook configuration reaches the API server through its own watch.
        wait_until("the scoped webhook is called", Duration::from_secs(30), || {
            cp.apply(&deployment(LISTED[0], "web", &[("db", ConsumeAs::SecretEnvFrom)]));
            install.template_annotations(LISTED[0], "web").get(key).is_some()
        })
        .await;
        for ns in LISTED.iter().chain([&OUTSIDE]) {
            cp.apply(&deployment(ns, "web", &[("db", ConsumeAs::SecretEnvFrom)]));
        }
        assert_eq!(
            install.template_annotations(LISTED[1], "web")[key],
            secret_digest(LISTED[1], "db", &data("one"))
        );
        assert!(
            install.template_annotations(OUTSIDE, "web").get(key).is_none(),
            "the webhook serves no namespace outside --namespaces"
        );

        let selector = format!("--namespace-selector={label}=true");
        let extra = [namespaces.as_str(), selector.as_str(), "--fan-out", "all"];
        let controller = Controller::start_in(
            cp,
            &install.dir,
            RELEASE_NS,
            "configsum-controller",
            "scoped",
            &extra,
        )
        .await;
        // A change in a listed namespace rolls; one outside is not even seen.
        cp.apply(&secret(OUTSIDE, "db", &data("two")));
        cp.apply(&secret(LISTED[1], "db", &data("two")));
        wait_until("web in scoped-b rolled", Duration::from_secs(20), || {
            install.template_annotations(LISTED[1], "web")[key]
                == secret_digest(LISTED[1], "db", &data("two"))
        })
        .await;
        controller.idle().await;
        assert_eq!(controller.patches().await, 1.0, "{:?}", controller.logs());
        let logs = controller.logs().join("\n") + &serve.logs().join("\n");
        assert!(!refused(&logs), "refused for want of a permission:\n{logs}");
        controller.stop().await;

        // The audit log: every request of this install's ServiceAccounts for ConfigMaps,
        // Secrets or workloads names a listed namespace; none lists them cluster-wide.
        let users = [
            format!("system:serviceaccount:{RELEASE_NS}:configsum-webhook"),
            format!("system:serviceaccount:{RELEASE_NS}:configsum-controller"),
        ];
        let ours: Vec<Value> = cp
            .audit_events()
            .into_iter()
            .filter(|e| users.iter().any(|u| e["user"]["username"] == u.as_str()))
            .collect();
        assert!(!ours.is_empty(), "the audit log has this install's requests");
        let mut secrets_read = 0;
        for event in &ours {
            let object = &event["objectRef"];
            // Discovery and /version name no object; namespaces, the Lease and Events are
            // granted elsewhere (the ClusterRole, the release namespace), and any user may
            // ask what it may do.
            let Some(resource) = object["resource"].as_str() else { continue };
            if ["namespaces", "leases", "events", "selfsubjectaccessreviews"].contains(&resource) {
                continue;
            }
            let namespace = object["namespace"].as_str().unwrap_or_default();
            assert!(
                LISTED.contains(&namespace),
                "{} {} outside the listed namespaces: {event}",
                event["verb"],
                event["requestURI"]
            );
            assert_eq!(
                event["responseStatus"]["code"].as_i64().map(|c| c < 400),
                Some(true),
                "{event}"
            );
            secrets_read += usize::from(resource == "secrets");
        }
        assert!(secrets_read > 0, "the install read its Secrets: {ours:?}");
    });
}
