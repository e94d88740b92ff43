//! `configsum explain` against the real API server, as an on-call user bound to the read-only
//! Role docs/explain.md gives: the digests the real webhook wrote, a Secret changed while no
//! controller runs, the ReplicaSet and the pending Pod kube-controller-manager made. The answer
//! equals the one explain gives offline from `kubectl get -o json` of the same objects, and the
//! API server's audit log shows the user made no request but get, list and discovery.

use std::process::Command;

use serde_json::Value;

use crate::install::{ConsumeAs, KEY, SYSTEM, deployment, installation, run, secret};

/// The Roles docs/explain.md gives an on-call user (`oncall` of `ns` here): read the
/// namespace's workloads, objects and Events, and the installed digest key; and the optional
/// ClusterRole: get the Namespace, for its roll-window.
fn on_call_roles(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: oncall, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: configsum-explain, namespace: {ns}}}
rules:
- apiGroups: ["apps"]
  resources: [deployments, statefulsets, daemonsets, replicasets]
  verbs: [get, list]
- apiGroups: ["batch"]
  resources: [jobs]
  verbs: [get, list]
- apiGroups: ["argoproj.io"]
  resources: [rollouts]
  verbs: [get, list]
- apiGroups: [""]
  resources: [pods, events]
  verbs: [get, list]
- apiGroups: [""]
  resources: [configmaps, secrets, serviceaccounts]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: configsum-explain, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: configsum-explain}}
subjects: [{{kind: ServiceAccount, name: oncall, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: configsum-explain-digest-key-{ns}, namespace: {SYSTEM}}}
rules:
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [configsum-digest-key]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: configsum-explain-digest-key-{ns}, namespace: {SYSTEM}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: configsum-explain-digest-key-{ns}}}
subjects: [{{kind: ServiceAccount, name: oncall, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: configsum-explain-namespace-{ns}}}
rules:
- apiGroups: [""]
  resources: [namespaces]
  resourceNames: [{ns}]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: configsum-explain-namespace-{ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: configsum-explain-namespace-{ns}}}
subjects: [{{kind: ServiceAccount, name: oncall, namespace: {ns}}}]
"#
    )
}

fn explain(kubeconfig: Option<&std::path::Path>, args: &[&str]) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_configsum"));
    command.arg("explain").args(args).args(["--output", "json"]);
    match kubeconfig {
        Some(path) => command.env("KUBECONFIG", path),
        None => command.env("KUBECONFIG", "/dev/null"),
    };
    let out = command.output().expect("configsum explain");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{args:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn explain_reads_the_real_api_server_as_it_reads_the_same_objects_offline() {
    run(async {
        let install = installation().await;
        let cp = install.cp;
        let ns = "explain";
        cp.namespace(ns, true);
        let data = |password: &'static str| [("password", password), ("user", "shop")];
        cp.apply(&format!(
            "{}\n---\n{}",
            secret(ns, "db", &data("one")),
            deployment(ns, "web", &[("db", ConsumeAs::SecretEnvFrom)])
        ));
        assert!(install.template_annotations(ns, "web")["secret.configsum.dev/db"].is_string());
        // A Pod of no controller: listed, and it never rolls.
        cp.apply(&format!(
            r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "debug", "namespace": "{ns}"}},
            "spec": {{"containers": [{{"name": "c", "image": "registry.example/app:1",
            "envFrom": [{{"secretRef": {{"name": "db"}}}}]}}]}}}}"#
        ));
        // The password changes while no controller runs: web is stale.
        cp.apply(&secret(ns, "db", &data("two")));
        cp.apply(&secret(SYSTEM, "configsum-digest-key", &[("keys", KEY)]));
        cp.apply(&on_call_roles(ns));
        let oncall = cp.kubeconfig_as(ns, "oncall");

        // kube-controller-manager has made web's ReplicaSet and its Pod (pending: no kubelet).
        // Their digests are web's: they are left out of the answer, as their owner is in it.
        crate::controller::wait_until(
            "the Deployment's ReplicaSet and Pod",
            std::time::Duration::from_secs(30),
            || {
                let pods = cp.get_json(&["pods", "-n", ns]);
                let web = cp.get_json(&["deployment", "web", "-n", ns]);
                pods["items"].as_array().is_some_and(|p| p.len() == 2)
                    && web["status"]["updatedReplicas"] == 1
            },
        )
        .await;

        let mark = cp.audit_events().len();
        let live = explain(Some(&oncall), &["secret/db", "-n", ns]);
        assert_eq!(live["digestKey"], true, "{live}");
        assert_eq!(live["unread"], serde_json::json!([]), "{live}");
        let verdicts: Vec<(String, String)> = live["workloads"]
            .as_array()
            .expect("workloads")
            .iter()
            .map(|w| {
                (
                    w["kind"].as_str().unwrap_or("").to_owned(),
                    w["verdict"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            verdicts,
            [pair("Deployment", "stale"), pair("Pod", "not-rolling")],
            "web's ReplicaSet and Pod are left to their owner: {live}"
        );
        let web = explain(Some(&oncall), &["deployment/web", "-n", ns]);
        assert_eq!(web["verdict"], "stale");
        // Its pod was created from its template but never runs it (no node here): the rollout
        // is not complete until the pod is ready.
        assert_eq!(web["rollout"]["state"], "progressing", "no pod of it is ready: {web}");
        assert_eq!(web["rollout"]["updatedReplicas"], 1, "{web}");
        assert_eq!(web["rollout"]["readyReplicas"], 0, "{web}");
        assert_eq!(
            web["rollout"]["message"],
            "rolling out: 1 of 1 pods run the current template, 0 ready"
        );

        // Only reads reached the API server from explain.
        let verbs: Vec<String> = cp
            .audit_events()
            .into_iter()
            .skip(mark)
            .filter(|e| e["user"]["username"] == format!("system:serviceaccount:{ns}:oncall"))
            .map(|e| e["verb"].as_str().unwrap_or("").to_owned())
            .collect();
        assert!(!verbs.is_empty(), "the audit log shows explain's requests");
        assert!(verbs.iter().all(|v| v == "get" || v == "list"), "{verbs:?}");

        // The same objects, as kubectl gives them, read offline: the same answers.
        let listed = cp.kubectl_ok(&[
            "get",
            "deployments,replicasets,pods,secrets,configmaps",
            "-n",
            ns,
            "-o",
            "json",
        ]);
        let file = install.path("explain-namespace.json");
        std::fs::write(&file, listed).expect("objects");
        let key = install.path("digest.key");
        let (file, key) = (file.display().to_string(), key.display().to_string());
        let offline = |subject: &str| {
            explain(None, &[subject, "-n", ns, "-f", &file, "--digest-key-file", &key])
        };
        assert_eq!(offline("secret/db"), live, "secret/db offline");
        assert_eq!(offline("deployment/web"), web, "deployment/web offline");
    });
}
