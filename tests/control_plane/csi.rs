//! SecretProviderClass rotations on the real API server: the Secrets Store CSI driver's CRDs
//! (tests/data/crds, written for this repository from the driver's v1 API) installed after the
//! controller started, statuses created and updated as the driver writes them (no node runs
//! here, so no driver: the test plays its part), the real webhook writing the digest, and the
//! real controller rolling the Deployment once on a rotation and never on the roll's own
//! statuses. Both run with exactly the grants the chart's `csi.enabled` adds.

use std::time::Duration;

use configsum::core::rbac::{csi_controller_permissions, csi_webhook_permissions};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::controller::{
    Controller, generation, one_controller_at_a_time, replica_sets_of, wait_until,
};
use crate::install::{SYSTEM, installation, run};

const CRDS: &str = include_str!("../data/crds/secrets-store-csi.yaml");
const KEY: &str = "secretproviderclass.configsum.dev/vault";

/// A ClusterRole with `permissions` bound to `service_account` of configsum-system: what the
/// chart's `csi.enabled` adds to its ClusterRole (tests/manifests.rs checks the chart's rules
/// are these).
fn grant(
    name: &str,
    service_account: &str,
    permissions: &[configsum::core::rbac::Permission],
) -> String {
    let rules: Vec<Value> = permissions
        .iter()
        .map(|(group, resource, verbs)| json!({"apiGroups": [group], "resources": [resource], "verbs": verbs}))
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": SYSTEM}]}]})
    .to_string()
}

/// The status the driver writes for `pod`'s mount of the class vault.
fn status(namespace: &str, pod: &str, version: &str) -> String {
    json!({"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus",
        "metadata": {"name": format!("{pod}-{namespace}-vault"), "namespace": namespace,
            "labels": {"internal.secrets-store.csi.k8s.io/node-name": "node-1"}},
        "status": {"podName": pod, "secretProviderClassName": "vault", "mounted": true,
            "targetPath": format!("/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/secrets/mount"),
            "objects": [{"id": "secret/db-password", "version": version},
                {"id": "secret/api-key", "version": "7"}]}})
    .to_string()
}

/// What the annotation holds for version `version` of secret/db-password: computed here,
/// apart from the code, as sha256 of the sorted lines `<id>@<version>\n`.
fn digest(version: &str) -> String {
    let lines = format!("secret/api-key@7\nsecret/db-password@{version}\n");
    let hash = Sha256::digest(lines.as_bytes());
    format!("sha256:{}", hash.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn web(namespace: &str, name: &str) -> String {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                    "volumeMounts": [{"name": "secrets", "mountPath": "/mnt/secrets", "readOnly": true}]}],
                    "volumes": [{"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io",
                        "readOnly": true, "volumeAttributes": {"secretProviderClass": "vault"}}}]}}}})
    .to_string()
}

#[test]
fn a_rotation_rolls_the_deployment_once_and_its_roll_never_again() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        cp.apply(&grant("configsum-webhook-csi", "configsum-webhook", &csi_webhook_permissions()));
        cp.apply(&grant(
            "configsum-controller-csi",
            "configsum-controller",
            &csi_controller_permissions(),
        ));
        let ns = "csi";
        cp.namespace(ns, true);
        // Before the CRDs: the webhook cannot list statuses, and admits without the digest.
        // (In a namespace of its own: a rotation in `ns` would roll it too, as a ConfigMap
        // change rolls a workload recording no digest yet, and hold `web` for its wave.)
        let before_crds = "csi-before-crds";
        cp.namespace(before_crds, true);
        cp.apply(&web(before_crds, "web"));
        assert_eq!(install.template_annotations(before_crds, "web").get(KEY), None);

        let extra = ["--discovery-interval", "1s"];
        let controller =
            Controller::start_as(cp, &install.dir, "configsum-controller", "csi", &extra).await;
        // Installed after the controller started: discovery finds them, no restart follows.
        cp.apply(CRDS);
        cp.wait_established(&[
            "crd/secretproviderclasses.secrets-store.csi.x-k8s.io",
            "crd/secretproviderclasspodstatuses.secrets-store.csi.x-k8s.io",
        ]);
        cp.apply(
            &json!({"apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClass",
                "metadata": {"name": "vault", "namespace": ns},
                "spec": {"provider": "vault", "parameters": {"roleName": "web"}}})
            .to_string(),
        );
        cp.apply(&status(ns, "web-a", "1"));
        cp.apply(&web(ns, "web"));
        assert_eq!(install.template_annotations(ns, "web")[KEY], digest("1"), "the webhook's");
        wait_until("the first ReplicaSet", Duration::from_secs(30), || {
            replica_sets_of(install, ns, "web") == 1
        })
        .await;
        wait_until("the statuses watched", Duration::from_secs(20), || {
            controller.logs().iter().any(|l| l.contains("watching SecretProviderClass rotations"))
        })
        .await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while controller.lists_of("secretproviderclasspodstatuses").await < 1.0 {
            assert!(std::time::Instant::now() < deadline, "never listed: {:?}", controller.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let before = generation(install, ns, "web");
        assert_eq!(controller.patches().await, 0.0, "every digest current: nothing to roll");

        // The driver's rotation reconciler finds a new version of db-password.
        cp.apply(&status(ns, "web-a", "2"));
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while install.template_annotations(ns, "web")[KEY] != digest("2") {
            assert!(std::time::Instant::now() < deadline, "not rolled: {:#?}", controller.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        wait_until("the new ReplicaSet", Duration::from_secs(30), || {
            replica_sets_of(install, ns, "web") == 2
        })
        .await;
        let rolled = generation(install, ns, "web");
        assert_eq!(rolled, before + 1, "one roll");

        // The roll: new pods mount version 2, the old pod's status goes.
        cp.apply(&status(ns, "web-b", "2"));
        cp.apply(&status(ns, "web-c", "2"));
        cp.kubectl_ok(&["delete", "secretproviderclasspodstatus", "web-a-csi-vault", "-n", ns]);
        tokio::time::sleep(Duration::from_secs(3)).await;
        controller.idle().await;
        assert_eq!(generation(install, ns, "web"), rolled, "never rolled again");
        assert_eq!(replica_sets_of(install, ns, "web"), 2);
        assert_eq!(controller.patches().await, 1.0);
        // The Event names the class, never a version.
        let events =
            cp.get_json(&["events", "-n", ns, "--field-selector", "involvedObject.name=web"]);
        let messages: Vec<&str> = events["items"]
            .as_array()
            .map(|items| items.iter().filter_map(|e| e["message"].as_str()).collect())
            .unwrap_or_default();
        assert!(messages.iter().any(|m| m.contains("secretproviderclass/vault")), "{messages:?}");
        // A Deployment written now gets the latest version.
        cp.apply(&web(ns, "late"));
        assert_eq!(install.template_annotations(ns, "late")[KEY], digest("2"));
        controller.stop().await;
    });
}
