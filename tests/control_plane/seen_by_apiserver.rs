//! configsum as the API server sees it (issue 40 point 6): after `serve`, `controller` and
//! `explain` have done some work, the audit log shows every request of theirs with the
//! User-Agent `configsum/<version> (<command>)` and a well-formed request URI (no `?&`, no
//! trailing `?` or `&`), and the API server's flowcontrol metrics show their requests
//! dispatched under the chart's FlowSchema `configsum`, at `workload-low`.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::control_plane::ControlPlane;
use crate::controller::{Controller, one_controller_at_a_time, secret_digest, wait_until};
use crate::install::{ConsumeAs, SYSTEM, deployment, installation, run, secret};

fn user_agent(command: &str) -> String {
    format!("configsum/{} ({command})", env!("CARGO_PKG_VERSION"))
}

/// The requests the API server dispatched under FlowSchema `flow_schema` at `priority_level`,
/// from its `/metrics`.
fn dispatched(cp: &ControlPlane, flow_schema: &str, priority_level: &str) -> f64 {
    let metrics = cp.kubectl_ok(&["get", "--raw", "/metrics"]);
    let (schema, level) =
        (format!("flow_schema=\"{flow_schema}\""), format!("priority_level=\"{priority_level}\""));
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_dispatched_requests_total{"))
        .filter(|l| l.contains(&schema) && l.contains(&level))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A request URI as it should be: parameters joined by single `&`s, none empty.
fn well_formed(uri: &str) -> bool {
    !uri.contains("?&") && !uri.contains("&&") && !uri.ends_with('?') && !uri.ends_with('&')
}

#[test]
fn seen_by_apiserver_configsum_names_its_command_sends_clean_uris_and_has_its_own_flow() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        let ns = "seen-by-apiserver";
        cp.namespace(ns, true);

        // The chart's FlowSchema is installed and its level exists (not dangling).
        let schema = cp.get_json(&["flowschema", "configsum"]);
        assert_eq!(schema["spec"]["priorityLevelConfiguration"]["name"], "workload-low");
        let conditions = schema["status"]["conditions"].as_array().cloned().unwrap_or_default();
        assert!(
            conditions.iter().any(|c| c["type"] == "Dangling" && c["status"] == "False"),
            "{schema}"
        );

        let mark = cp.audit_events().len();
        let before = dispatched(cp, "configsum", "workload-low");

        // Work for all three: the webhook reads db when web is admitted, the controller rolls
        // web when db changes, explain reads them.
        let controller = Controller::start(install, "seen-by-apiserver").await;
        let data = |password: &'static str| [("password", password)];
        cp.apply(&format!(
            "{}\n---\n{}",
            secret(ns, "db", &data("one")),
            deployment(ns, "web", &[("db", ConsumeAs::SecretEnvFrom)])
        ));
        let key = "secret.configsum.dev/db";
        assert_eq!(
            install.template_annotations(ns, "web")[key],
            secret_digest(ns, "db", &data("one"))
        );
        cp.apply(&secret(ns, "db", &data("two")));
        wait_until("the controller rolled web", Duration::from_secs(30), || {
            install.template_annotations(ns, "web")[key] == secret_digest(ns, "db", &data("two"))
        })
        .await;
        controller.idle().await;
        controller.stop().await;
        let explained = Command::new(env!("CARGO_BIN_EXE_configsum"))
            .args(["explain", "secret/db", "-n", ns, "--output", "json"])
            .env("KUBECONFIG", &cp.kubeconfig)
            .output()
            .expect("configsum explain");
        assert!(explained.status.success(), "{}", String::from_utf8_lossy(&explained.stderr));

        let events: Vec<Value> = cp.audit_events().into_iter().skip(mark).collect();
        let agent = |e: &Value| e["userAgent"].as_str().unwrap_or_default().to_owned();
        let uri = |e: &Value| e["requestURI"].as_str().unwrap_or_default().to_owned();
        let of_user = |account: &str| -> Vec<&Value> {
            let user = format!("system:serviceaccount:{SYSTEM}:{account}");
            events.iter().filter(|e| e["user"]["username"] == user.as_str()).collect()
        };

        // (a) Each command's requests carry its User-Agent, never an empty one.
        let mut seen = Vec::new();
        for (account, command) in
            [("configsum-webhook", "serve"), ("configsum-controller", "controller")]
        {
            let requests = of_user(account);
            assert!(!requests.is_empty(), "{account} made requests");
            let agents: std::collections::BTreeSet<String> =
                requests.iter().map(|e| agent(e)).collect();
            assert_eq!(agents, [user_agent(command)].into(), "{account}");
            seen.extend(requests);
        }
        let explain: Vec<&Value> =
            events.iter().filter(|e| agent(e) == user_agent("explain")).collect();
        assert!(!explain.is_empty(), "explain's requests carry (explain)");
        // As the kubeconfig's user (the admin), get and list only.
        assert!(
            explain.iter().all(|e| e["user"]["username"] == "configsum-test-admin"
                && matches!(e["verb"].as_str(), Some("get" | "list"))),
            "{explain:#?}"
        );
        seen.extend(explain.iter().copied());
        // Every request with configsum's product name is one of the three.
        let configsum_agents: std::collections::BTreeSet<String> =
            events.iter().map(agent).filter(|a| a.starts_with("configsum/")).collect();
        println!("user agents seen: {configsum_agents:?}");
        let expected = ["controller", "explain", "serve"].map(user_agent);
        assert_eq!(configsum_agents, expected.into_iter().collect());

        // (b) No request URI of theirs is malformed; writes name the field manager alone.
        let malformed: Vec<String> =
            seen.iter().map(|e| uri(e)).filter(|u| !well_formed(u)).collect();
        assert!(malformed.is_empty(), "malformed request URIs: {malformed:#?}");
        let writes: Vec<String> = seen
            .iter()
            .filter(|e| matches!(e["verb"].as_str(), Some("create" | "patch" | "update")))
            .map(|e| uri(e))
            .collect();
        println!("writes: {writes:#?}");
        assert!(writes.iter().any(|u| u.ends_with("/deployments/web?fieldManager=configsum")));

        // (c) The FlowSchema matched them: dispatched under it, at workload-low, at least once
        // for each request of serve and controller the audit log completed (a watch is
        // dispatched too; the digest-key Job never runs here: no node).
        let after = dispatched(cp, "configsum", "workload-low");
        let completed = ["configsum-webhook", "configsum-controller"]
            .iter()
            .flat_map(|account| of_user(account))
            .filter(|e| e["stage"] == "ResponseComplete")
            .count();
        println!(
            "apiserver_flowcontrol_dispatched_requests_total{{flow_schema=\"configsum\",priority_level=\"workload-low\"}}: {before} -> {after}; {completed} completed requests of serve and controller audited"
        );
        assert!(after - before >= completed as f64, "{before} -> {after}, {completed} requests");
    });
}
