//! AdmissionReview bodies and the objects they reference, shared by the
//! micro-benchmark and the load benchmark.
#![allow(dead_code)]

use serde_json::{Value, json};

pub const NAMESPACE: &str = "shop";

/// A realistic Deployment of about 20 KB: three containers with env, probes,
/// resources and mounts, reading two ConfigMaps and two Secrets.
pub fn deployment_20kb(config_maps: [&str; 2], secrets: [&str; 2]) -> Value {
    let container = |name: &str| {
        let mut env: Vec<Value> = (0..64)
            .map(|i| json!({"name": format!("{}_SETTING_{i}", name.to_uppercase()), "value": format!("value-{i}-{}", "x".repeat(40))}))
            .collect();
        env.push(json!({"name": "LOG_LEVEL", "valueFrom": {"configMapKeyRef": {"name": config_maps[0], "key": "log-level"}}}));
        env.push(json!({"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": secrets[0], "key": "password"}}}));
        json!({"name": name, "image": format!("registry.example.com/shop/{name}:1.42.0"), "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": env,
            "envFrom": [{"secretRef": {"name": secrets[1]}}],
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
        "metadata": {"name": "web", "namespace": NAMESPACE, "labels": labels,
            "annotations": {"deployment.kubernetes.io/revision": "17", "team": "checkout"}},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app.kubernetes.io/name": "shop"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {"metadata": {"labels": labels, "annotations": {"prometheus.io/scrape": "true"}},
                "spec": {"serviceAccountName": "web", "containers": [container("web"), container("worker"), container("sidecar")],
                    "volumes": [{"name": "conf", "configMap": {"name": config_maps[1]}}, {"name": "tmp", "emptyDir": {}}]}}},
        "status": {"replicas": 6, "readyReplicas": 6, "updatedReplicas": 6, "availableReplicas": 6, "observedGeneration": 17}})
}

pub fn standard_deployment() -> Value {
    deployment_20kb(["app-config", "nginx-conf"], ["db-credentials", "api-tokens"])
}

/// An AdmissionReview v1 body, its fields in the order the API server writes them (the
/// webhook reads an object in place when the fields before it say it is one to mutate).
pub fn review(
    group_version_kind: (&str, &str, &str),
    operation: &str,
    object: &Value,
    old: Option<&Value>,
) -> Vec<u8> {
    let (group, version, kind) = group_version_kind;
    let resource = format!("{}s", kind.to_lowercase());
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let gvr = json!({"group": group, "version": version, "resource": resource});
    let user = json!({"username": "system:serviceaccount:argocd:argocd-application-controller",
        "uid": "5b2e9a4c-0d6f-4c3e-9a51-2f7c1e8d4b10",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:argocd", "system:authenticated"]});
    let old = old.map_or_else(|| "null".to_owned(), Value::to_string);
    format!(
        r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{{"uid":"bench","kind":{gvk},"resource":{gvr},"requestKind":{gvk},"requestResource":{gvr},"name":{name},"namespace":"{NAMESPACE}","operation":"{operation}","userInfo":{user},"object":{object},"oldObject":{old},"dryRun":false,"options":{{"kind":"{options}","apiVersion":"meta.k8s.io/v1"}}}}}}"#,
        name = object["metadata"]["name"],
        options = if operation == "UPDATE" { "UpdateOptions" } else { "CreateOptions" },
    )
    .into_bytes()
}

/// One kind of review in the load mix and how many lookups it causes.
pub struct MixEntry {
    pub name: &'static str,
    pub body: Vec<u8>,
    pub lookups: usize,
}

/// The load mix: a 20 KB Deployment CREATE (4 references), the same as an
/// UPDATE carrying oldObject, a CronJob (not mutated) and a Pod (1 reference).
pub fn mix() -> Vec<MixEntry> {
    let deployment = standard_deployment();
    let cron_job = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "report", "namespace": NAMESPACE},
        "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "report", "image": "report:1", "envFrom": [{"configMapRef": {"name": "app-config"}}]}]}}}}}});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "shell", "image": "busybox:1", "envFrom": [{"configMapRef": {"name": "app-config"}}]}]}});
    vec![
        MixEntry {
            name: "Deployment CREATE",
            body: review(("apps", "v1", "Deployment"), "CREATE", &deployment, None),
            lookups: 4,
        },
        MixEntry {
            name: "Deployment UPDATE",
            body: review(("apps", "v1", "Deployment"), "UPDATE", &deployment, Some(&deployment)),
            lookups: 4,
        },
        MixEntry {
            name: "CronJob CREATE",
            body: review(("batch", "v1", "CronJob"), "CREATE", &cron_job, None),
            lookups: 0,
        },
        MixEntry {
            name: "Pod CREATE",
            body: review(("", "v1", "Pod"), "CREATE", &pod, None),
            lookups: 1,
        },
    ]
}

/// A referenced object: kind, name and data.
pub type BenchObject = (&'static str, &'static str, Vec<(&'static str, String)>);

/// The referenced objects.
pub fn objects() -> Vec<BenchObject> {
    let config = "k=v\n".repeat(256);
    vec![
        (
            "ConfigMap",
            "app-config",
            vec![("log-level", "info".into()), ("app.properties", config.clone())],
        ),
        ("ConfigMap", "nginx-conf", vec![("default.conf", config)]),
        (
            "Secret",
            "db-credentials",
            vec![("password", "correct-horse-battery-staple".into()), ("username", "shop".into())],
        ),
        (
            "Secret",
            "api-tokens",
            vec![
                ("STRIPE_TOKEN", "sk_test_0123456789".into()),
                ("MAPS_TOKEN", "m_0123456789".into()),
            ],
        ),
    ]
}

/// `objects()` as a YAML stream for `--objects-from`.
pub fn objects_yaml() -> String {
    let mut out = String::new();
    for (kind, name, data) in objects() {
        let field = if kind == "Secret" { "stringData" } else { "data" };
        out.push_str(&format!("---\napiVersion: v1\nkind: {kind}\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\n{field}:\n"));
        for (key, value) in data {
            out.push_str(&format!(
                "  {key}: {}\n",
                serde_json::to_string(&value).unwrap_or_default()
            ));
        }
    }
    out
}
