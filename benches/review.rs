//! One admission review through the pure path: parse the AdmissionReview,
//! plan, digest four objects from memory, decide, encode the answer.
//! `make bench` runs it; `cargo test` runs each benchmark once as a smoke test.

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

use configsum::admission::{encode_response, parse_review};
use configsum::core::{Settings, review};
use divan::{Bencher, black_box};
use fixtures::{Objects, keyed_digester};
use serde_json::{Value, json};

fn main() {
    let (create, update) = (body(false), body(true));
    eprintln!("review bodies: CREATE {} bytes, UPDATE {} bytes", create.len(), update.len());
    divan::main();
}

/// A realistic Deployment of about 20 KB: three containers with env, probes,
/// resources and mounts, reading two ConfigMaps and two Secrets.
fn deployment() -> Value {
    let container = |name: &str| {
        let mut env: Vec<Value> = (0..64)
            .map(|i| json!({"name": format!("{}_SETTING_{i}", name.to_uppercase()), "value": format!("value-{i}-{}", "x".repeat(40))}))
            .collect();
        env.push(json!({"name": "LOG_LEVEL", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "log-level"}}}));
        env.push(json!({"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-credentials", "key": "password"}}}));
        json!({"name": name, "image": format!("registry.example.com/shop/{name}:1.42.0"), "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": env,
            "envFrom": [{"secretRef": {"name": "api-tokens"}}],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5},
            "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"}, {"name": "tmp", "mountPath": "/tmp"}],
            "securityContext": {"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}}})
    };
    let labels = json!({"app.kubernetes.io/name": "shop", "app.kubernetes.io/component": "web",
        "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.42.0"});
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": labels,
            "annotations": {"deployment.kubernetes.io/revision": "17", "team": "checkout"}},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app.kubernetes.io/name": "shop"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {"metadata": {"labels": labels, "annotations": {"prometheus.io/scrape": "true"}},
                "spec": {"serviceAccountName": "web", "containers": [container("web"), container("worker"), container("sidecar")],
                    "volumes": [{"name": "conf", "configMap": {"name": "nginx-conf"}}, {"name": "tmp", "emptyDir": {}}]}}},
        "status": {"replicas": 6, "readyReplicas": 6, "updatedReplicas": 6, "availableReplicas": 6, "observedGeneration": 17}})
}

fn body(update: bool) -> Vec<u8> {
    let object = deployment();
    let old = if update { object.clone() } else { Value::Null };
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "bench", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "operation": if update { "UPDATE" } else { "CREATE" }, "namespace": "shop", "name": "web",
        "object": object, "oldObject": old}}),
    )
    .unwrap_or_default()
}

fn objects() -> Objects {
    let config = "k=v\n".repeat(256);
    Objects::default()
        .config_map("shop", "app-config", &[("log-level", "info"), ("app.properties", &config)])
        .config_map("shop", "nginx-conf", &[("default.conf", &config)])
        .secret(
            "shop",
            "db-credentials",
            &[("password", "correct-horse-battery-staple"), ("username", "shop")],
        )
        .secret(
            "shop",
            "api-tokens",
            &[("STRIPE_TOKEN", "sk_test_0123456789"), ("MAPS_TOKEN", "m_0123456789")],
        )
}

fn run(bencher: Bencher, update: bool) {
    let body = body(update);
    let objects = objects();
    let settings = Settings::default();
    let digester = keyed_digester();
    bencher.bench_local(|| {
        let request = parse_review(black_box(&body)).unwrap_or_else(|e| panic!("{e}"));
        let decision =
            review(&request.as_core(), &settings, &digester, |ns, o| objects.lookup(ns, o));
        assert_eq!(decision.patch.len(), 4, "four digests added");
        encode_response(&request.uid, &decision)
    });
}

#[divan::bench]
fn deployment_20kb_create(bencher: Bencher) {
    run(bencher, false);
}

#[divan::bench]
fn deployment_20kb_update_with_old_object(bencher: Bencher) {
    run(bencher, true);
}
