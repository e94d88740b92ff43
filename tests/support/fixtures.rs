//! Small builders for workloads, reviews and object sets, shared by the tests
//! and the benchmark.
#![allow(dead_code)]

use std::collections::BTreeMap;

use configsum::core::model::object_scope::Standing;
use configsum::core::{
    Decision, DigestKeys, Digester, ObjectContent, ObjectKind, ObjectRef, Settings,
};
use configsum::core::{OldObject, Request, review};
use serde_json::{Value, json};

pub const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

pub fn keyed_digester() -> Digester {
    Digester::new(DigestKeys::parse(KEY).expect("test key"))
}

/// ConfigMaps and Secrets by namespace and ref. A map per namespace, so that a lookup (the
/// review bench makes four a review) copies nothing: the bench counts its allocations.
#[derive(Default)]
pub struct Objects {
    objects: BTreeMap<String, BTreeMap<ObjectRef, ObjectContent>>,
    unreadable: BTreeMap<String, BTreeMap<ObjectRef, String>>,
}

impl Objects {
    pub fn config_map(mut self, namespace: &str, name: &str, data: &[(&str, &str)]) -> Self {
        self.insert(namespace, ObjectRef::config_map(name), data);
        self
    }

    pub fn secret(mut self, namespace: &str, name: &str, data: &[(&str, &str)]) -> Self {
        self.insert(namespace, ObjectRef::secret(name), data);
        self
    }

    /// Lookups of this object fail with `reason`.
    pub fn unreadable(mut self, namespace: &str, object: ObjectRef, reason: &str) -> Self {
        self.unreadable.entry(namespace.to_owned()).or_default().insert(object, reason.to_owned());
        self
    }

    pub fn insert(&mut self, namespace: &str, object: ObjectRef, data: &[(&str, &str)]) {
        let entries = data.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect();
        self.insert_content(namespace, object, ObjectContent::from_entries(entries));
    }

    /// The object stands as `standing` (its owner ignores it, or the object selector leaves it
    /// out), as a reader would have judged it.
    pub fn standing(mut self, namespace: &str, object: ObjectRef, standing: Standing) -> Self {
        if let Some(content) = self.objects.get_mut(namespace).and_then(|m| m.remove(&object)) {
            self.insert_content(namespace, object, content.with_standing(standing));
        }
        self
    }

    pub fn remove(&mut self, namespace: &str, object: &ObjectRef) {
        if let Some(objects) = self.objects.get_mut(namespace) {
            objects.remove(object);
        }
    }

    fn insert_content(&mut self, namespace: &str, object: ObjectRef, content: ObjectContent) {
        self.objects.entry(namespace.to_owned()).or_default().insert(object, content);
    }

    pub fn lookup(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<&ObjectContent>, String> {
        if let Some(reason) = self.unreadable.get(namespace).and_then(|m| m.get(object)) {
            return Err(reason.clone());
        }
        Ok(self.objects.get(namespace).and_then(|m| m.get(object)))
    }
}

/// A pod spec whose containers read each named object, all keys (envFrom).
pub fn pod_spec_env_from(config_maps: &[&str], secrets: &[&str]) -> Value {
    let mut env_from: Vec<Value> =
        config_maps.iter().map(|n| json!({"configMapRef": {"name": n}})).collect();
    env_from.extend(secrets.iter().map(|n| json!({"secretRef": {"name": n}})));
    json!({"containers": [{"name": "app", "image": "app:1", "envFrom": env_from}]})
}

/// A pod spec reading each of `objects` whole through `envFrom`. A kind
/// declared in `core::inputs` fails to build here until it has its field.
pub fn pod_spec_reading(objects: &[ObjectRef]) -> Value {
    let env_from: Vec<Value> = objects
        .iter()
        .map(|object| match object.kind {
            ObjectKind::ConfigMap => json!({"configMapRef": {"name": object.name}}),
            ObjectKind::Secret => json!({"secretRef": {"name": object.name}}),
        })
        .collect();
    json!({"containers": [{"name": "app", "image": "app:1", "envFrom": env_from}]})
}

/// A workload of `kind` in `namespace` with `spec` as its pod spec.
pub fn workload(kind: &str, namespace: &str, spec: Value) -> Value {
    let api_version = match kind {
        "Job" | "CronJob" => "batch/v1",
        "Rollout" => "argoproj.io/v1alpha1",
        "Pod" => "v1",
        _ => "apps/v1",
    };
    let metadata = json!({"name": "w", "namespace": namespace});
    match kind {
        "Pod" => {
            json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec})
        }
        "CronJob" => {
            json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": {
            "schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}}})
        }
        _ => json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": {
            "selector": {"matchLabels": {"app": "w"}},
            "template": {"metadata": {"labels": {"app": "w"}}, "spec": spec}}}),
    }
}

/// The API group and version of each kind the tests write, as Kubernetes and
/// Argo define them. An unknown kind panics: a newly declared kind needs its
/// fixtures here.
pub fn group_version(kind: &str) -> (&'static str, &'static str) {
    match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => ("apps", "v1"),
        "Job" | "CronJob" => ("batch", "v1"),
        "Rollout" => ("argoproj.io", "v1alpha1"),
        "Pod" | "ConfigMap" | "Secret" | "Service" => ("", "v1"),
        other => panic!("no fixture for kind {other}: add it to tests/support/fixtures.rs"),
    }
}

/// The pointer of the annotations map that carries the digests, as the
/// README says (independent of the code's own table).
pub fn annotations_pointer(kind: &str) -> &'static str {
    match kind {
        "Pod" => "/metadata/annotations",
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" | "Rollout" => {
            "/spec/template/metadata/annotations"
        }
        other => panic!("no fixture for kind {other}: add it to tests/support/fixtures.rs"),
    }
}

/// One admission: what the webhook decides for `object` (and `old`).
pub struct Admit<'a> {
    pub kind: &'a str,
    pub operation: &'a str,
    pub namespace: &'a str,
    pub sub_resource: Option<&'a str>,
    pub object: &'a Value,
    pub old: Option<&'a Value>,
    pub settings: Settings,
    pub digester: Digester,
}

impl<'a> Admit<'a> {
    pub fn new(kind: &'a str, operation: &'a str, object: &'a Value) -> Self {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default");
        Admit {
            kind,
            operation,
            namespace,
            sub_resource: None,
            object,
            old: None,
            settings: Settings::default(),
            digester: keyed_digester(),
        }
    }

    pub fn run(&self, objects: &Objects) -> Decision {
        let (group, version) = group_version(self.kind);
        let object = self.object.to_string();
        let old = self.old.map(Value::to_string);
        let request = Request {
            group,
            version,
            kind: self.kind,
            sub_resource: self.sub_resource,
            operation: self.operation,
            namespace: Some(self.namespace),
            object: Some(&object),
            old_object: old.as_deref().map(OldObject::Text),
        };
        review(&request, &self.settings, &self.digester, |ns, o| objects.lookup(ns, o))
    }
}

/// `object` with the decision's patch applied, as the API server would.
pub fn apply(object: &Value, decision: &Decision) -> Value {
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &decision.patch).expect("the patch applies");
    patched
}

/// The annotations at `pointer`, or an empty map.
pub fn annotations_at(object: &Value, pointer: &str) -> BTreeMap<String, String> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect()
        })
        .unwrap_or_default()
}
