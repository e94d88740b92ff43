//! Properties over generated workloads and object sets: the patch always
//! applies, admitting the result again changes nothing, and only
//! configsum-owned annotation keys are touched.

#[path = "support/fixtures.rs"]
mod fixtures;

use configsum::core::{AnnotationDomain, ObjectRef};
use fixtures::*;
use json_patch::PatchOperation;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const NS: &str = "ns";
const NAMES: &[&str] = &["a", "b", "app-config", "x.y", "Bad_Name", ""];
const KINDS: &[&str] =
    &["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Rollout", "Pod"];

#[derive(Debug, Clone)]
enum Source {
    EnvKey { secret: bool, name: usize, key: usize, optional: Option<bool> },
    EnvFrom { secret: bool, name: usize, optional: Option<bool> },
    Volume { secret: bool, name: usize, items: Vec<usize>, optional: Option<bool> },
    Projected { secret: bool, name: usize, items: Vec<usize> },
}

#[derive(Debug, Clone, Copy)]
enum State {
    Present(u8),
    Missing,
    Unreadable,
}

#[derive(Debug, Clone)]
struct Case {
    kind: &'static str,
    create: bool,
    sources: Vec<Source>,
    init_sources: Vec<Source>,
    /// Existing owned annotations: (secret, name index, value index).
    existing: Vec<(bool, usize, usize)>,
    foreign: Vec<(String, String)>,
    metadata: u8,
    track: Option<String>,
    ignore: Option<String>,
    states: Vec<(bool, usize, State)>,
}

const KEYS: &[&str] = &["k", "log-level", "a.b", "missing"];

fn source() -> impl Strategy<Value = Source> {
    let name = 0..NAMES.len();
    let items = prop::collection::vec(0..KEYS.len(), 0..3);
    let optional = prop::option::of(any::<bool>());
    prop_oneof![
        (any::<bool>(), name.clone(), 0..KEYS.len(), optional.clone()).prop_map(
            |(secret, name, key, optional)| Source::EnvKey { secret, name, key, optional }
        ),
        (any::<bool>(), name.clone(), optional.clone())
            .prop_map(|(secret, name, optional)| Source::EnvFrom { secret, name, optional }),
        (any::<bool>(), name.clone(), items.clone(), optional).prop_map(
            |(secret, name, items, optional)| Source::Volume { secret, name, items, optional }
        ),
        (any::<bool>(), name, items).prop_map(|(secret, name, items)| Source::Projected {
            secret,
            name,
            items
        }),
    ]
}

fn state() -> impl Strategy<Value = State> {
    prop_oneof![4 => (0u8..3).prop_map(State::Present), 1 => Just(State::Missing), 1 => Just(State::Unreadable)]
}

fn ref_list() -> impl Strategy<Value = Option<String>> {
    let token = prop_oneof![
        Just("*".to_owned()),
        (any::<bool>(), 0..NAMES.len()).prop_map(|(s, n)| format!(
            "{}/{}",
            if s { "secret" } else { "configmap" },
            NAMES[n]
        )),
        Just("bogus/token".to_owned()),
    ];
    prop::option::weighted(0.3, prop::collection::vec(token, 0..4).prop_map(|t| t.join(", ")))
}

prop_compose! {
    fn case()(
        kind in prop::sample::select(KINDS),
        create in any::<bool>(),
        sources in prop::collection::vec(source(), 0..6),
        init_sources in prop::collection::vec(source(), 0..2),
        existing in prop::collection::vec((any::<bool>(), 0..NAMES.len(), 0..4usize), 0..4),
        foreign in prop::collection::vec(("[a-z~/.]{1,8}", "[a-z ]{0,6}"), 0..3),
        metadata in 0u8..3,
        track in ref_list(),
        ignore in ref_list(),
        states in prop::collection::vec((any::<bool>(), 0..NAMES.len(), state()), 0..8),
    ) -> Case {
        Case { kind, create, sources, init_sources, existing, foreign, metadata, track, ignore, states }
    }
}

fn source_json(source: &Source) -> (&'static str, Value) {
    let items = |items: &[usize]| -> Value {
        items.iter().map(|i| json!({"key": KEYS[*i], "path": KEYS[*i]})).collect()
    };
    let kind = |secret: bool| if secret { "secret" } else { "configMap" };
    match source {
        Source::EnvKey { secret, name, key, optional } => {
            let selector = if *secret { "secretKeyRef" } else { "configMapKeyRef" };
            (
                "env",
                json!({"name": "E", "valueFrom": {selector: {"name": NAMES[*name], "key": KEYS[*key], "optional": optional}}}),
            )
        }
        Source::EnvFrom { secret, name, optional } => {
            let r = if *secret { "secretRef" } else { "configMapRef" };
            ("envFrom", json!({r: {"name": NAMES[*name], "optional": optional}}))
        }
        Source::Volume { secret, name, items: i, optional } => {
            let body = if *secret {
                json!({"secretName": NAMES[*name], "items": items(i), "optional": optional})
            } else {
                json!({"name": NAMES[*name], "items": items(i), "optional": optional})
            };
            ("volumes", json!({"name": "v", kind(*secret): body}))
        }
        Source::Projected { secret, name, items: i } => (
            "volumes",
            json!({"name": "p", "projected": {"sources": [{kind(*secret): {"name": NAMES[*name], "items": items(i)}}]}}),
        ),
    }
}

fn container(sources: &[Source], volumes: &mut Vec<Value>) -> Value {
    let (mut env, mut env_from) = (Vec::new(), Vec::new());
    for s in sources {
        match source_json(s) {
            ("env", v) => env.push(v),
            ("envFrom", v) => env_from.push(v),
            (_, v) => volumes.push(v),
        }
    }
    json!({"name": "c", "image": "i", "env": env, "envFrom": env_from})
}

fn build(case: &Case) -> (Value, Objects) {
    let mut volumes = Vec::new();
    let main = container(&case.sources, &mut volumes);
    let init = container(&case.init_sources, &mut volumes);
    let spec = json!({"containers": [main], "initContainers": [init], "volumes": volumes});
    let mut object = workload(case.kind, NS, spec);

    let domain = AnnotationDomain::default();
    let values = ["absent", "sha256:stale", "hmac-sha256:stale", ""];
    let mut annotations = Map::new();
    for (secret, name, value) in &case.existing {
        let name = NAMES[*name];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '-' || c == '.')
        {
            let object =
                if *secret { ObjectRef::secret(name) } else { ObjectRef::config_map(name) };
            annotations.insert(domain.key_for(&object), json!(values[*value]));
        }
    }
    for (k, v) in &case.foreign {
        annotations.insert(format!("example.com/{k}"), json!(v));
    }
    let mut workload_annotations = Map::new();
    if let Some(track) = &case.track {
        workload_annotations.insert("configsum.dev/track".into(), json!(track));
    }
    if let Some(ignore) = &case.ignore {
        workload_annotations.insert("configsum.dev/ignore".into(), json!(ignore));
    }
    if case.kind == "Pod" {
        annotations.extend(workload_annotations);
        object["metadata"]["annotations"] = Value::Object(annotations);
    } else {
        object["metadata"]["annotations"] = Value::Object(workload_annotations);
        let template = &mut object["spec"]["template"];
        match case.metadata {
            0 => {
                template.as_object_mut().map(|t| t.remove("metadata"));
            }
            1 => template["metadata"] = json!({}),
            _ => template["metadata"]["annotations"] = Value::Object(annotations),
        }
    }

    let mut objects = Objects::default();
    for (secret, name, state) in &case.states {
        let object = if *secret {
            ObjectRef::secret(NAMES[*name])
        } else {
            ObjectRef::config_map(NAMES[*name])
        };
        match state {
            State::Present(variant) => {
                let value = ["x", "y", "z"][*variant as usize];
                objects.insert(NS, object, &[("k", value), ("log-level", value), ("other", "o")]);
            }
            State::Missing => objects.remove(NS, &object),
            State::Unreadable => objects = objects.unreadable(NS, object, "timeout"),
        }
    }
    (object, objects)
}

/// Every operation either creates an absent container or names an owned key in the annotations map.
fn touches_only_owned_keys(
    kind: &str,
    object: &Value,
    patch: &[PatchOperation],
) -> Result<(), String> {
    let domain = AnnotationDomain::default();
    let annotations = annotations_pointer(kind);
    let metadata = annotations.trim_end_matches("/annotations");
    for op in patch {
        let path = match op {
            PatchOperation::Add(add) => add.path.to_string(),
            PatchOperation::Remove(remove) => remove.path.to_string(),
            other => return Err(format!("unexpected operation {other:?}")),
        };
        if path == annotations || path == metadata {
            if object.pointer(&path).is_some_and(|v| !v.is_null()) {
                return Err(format!("{path} exists and was replaced"));
            }
            continue;
        }
        let Some(key) = path.strip_prefix(&format!("{annotations}/")) else {
            return Err(format!("{path} is outside the annotations"));
        };
        let key = key.replace("~1", "/").replace("~0", "~");
        if !domain.owns(&key) {
            return Err(format!("{key} is not owned by configsum"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn patches_apply_are_idempotent_and_touch_only_owned_keys(case in case()) {
        let (object, objects) = build(&case);
        let operation = if case.create { "CREATE" } else { "UPDATE" };
        let decision = Admit::new(case.kind, operation, &object).run(&objects);
        prop_assert!(decision.warnings.len() <= 11);
        prop_assert!(decision.warnings.iter().all(|w| w.chars().count() < 120));
        if let Err(e) = touches_only_owned_keys(case.kind, &object, &decision.patch) {
            return Err(TestCaseError::fail(e));
        }

        let mut patched = object.clone();
        let applied = json_patch::patch(&mut patched, &decision.patch);
        prop_assert!(applied.is_ok(), "patch does not apply: {:?}", applied);

        // Foreign annotations are exactly as they were.
        let pointer = annotations_pointer(case.kind);
        let foreign = |o: &Value| -> Vec<(String, String)> {
            annotations_at(o, pointer).into_iter().filter(|(k, _)| !AnnotationDomain::default().owns(k)).collect()
        };
        prop_assert_eq!(foreign(&object), foreign(&patched));

        let again = Admit { old: Some(&object), ..Admit::new(case.kind, operation, &patched) }.run(&objects);
        prop_assert!(again.patch.is_empty(), "second admission patched again: {:?}", again.patch);
    }
}
