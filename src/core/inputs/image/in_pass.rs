//! The image pass inside the object's own pass. The API server writes a workload's
//! `metadata` before its `spec`, so by the pod spec the reader knows whether the workload
//! tracks images. When it does, the one visit of the pod spec also reads what the image pass
//! needs: each container's name, image and pull policy (and, for `<domain>/image-env`, its
//! `env` values), the pull secrets and the ServiceAccount. The review's text is not read a
//! second time.
//!
//! What this reader makes must be exactly what the two readers make apart: [`PodSpec`]'s
//! derived reading and [`PodImages::of`]. Where it cannot be sure of that (a field given
//! twice, a list element that is not a map, a type either reader refuses) it fails, and the
//! caller reads the object from its text with the two readers apart.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::containers::{
    Capped, Container, EnvVar, Indexed, MAX_CONTAINERS_READ, MAX_ENV_READ, Names, PodImages,
};
use crate::core::field_path::{Key, OrNull};
use crate::core::pod_spec::{self, EnvFromSource, EnvVarSource, PodSpec, References, SparseList};

/// Whether the object's pass should read the image pass's fields too, from the workload's
/// annotations. Only a hint, the same under any annotation domain: reading the fields when
/// they turn out unneeded costs a little time, and missing them costs a second read of the
/// text, never a different answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageHint {
    /// An `…/images` or `…/image-env` annotation: read the containers' images.
    pub images: bool,
    /// An `…/image-env` annotation: keep their `env` values as well.
    pub env: bool,
}

impl ImageHint {
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> ImageHint {
        let mut hint = ImageHint::default();
        for key in annotations.into_iter().flat_map(BTreeMap::keys) {
            match key.rsplit_once('/').map(|(_, name)| name) {
                Some("images") => hint.images = true,
                Some("image-env") => hint = ImageHint { images: true, env: true },
                _ => {}
            }
        }
        hint
    }
}

/// The image pass's reading of a pod spec, made in the object's own pass.
#[derive(Debug)]
pub struct ImagesInPass {
    pub pod: PodImages,
    /// Whether the containers' `env` was kept; without it they carry none, and an
    /// image-env workload needs the text read again.
    pub env: bool,
}

/// Reads a pod spec (a map) for both readers at once.
pub struct PodSpecSeed<'p> {
    /// The pod spec's path in the object: the base of each container's image pointer.
    pub pointer: &'p [&'p str],
    /// Keep the containers' `env` names and values.
    pub env: bool,
}

impl<'de> DeserializeSeed<'de> for PodSpecSeed<'_> {
    type Value = (PodSpec, ImagesInPass);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PodSpecSeed<'_> {
    type Value = (PodSpec, ImagesInPass);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a pod spec map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let env = self.env;
        let mut spec = PodSpec::default();
        let mut lists: [Option<Indexed>; 2] = [None, None];
        let (mut pull_secrets, mut service_account) = (None, None);
        let mut seen = [false; 5];
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "containers" => {
                    once(&mut seen[0], "containers")?;
                    let read = map.next_value_seed(OrNull(ContainersSeed { env }))?;
                    (spec.containers, lists[0]) = read.unzip();
                }
                "initContainers" => {
                    once(&mut seen[1], "initContainers")?;
                    let read = map.next_value_seed(OrNull(ContainersSeed { env }))?;
                    (spec.init_containers, lists[1]) = read.unzip();
                }
                "volumes" => {
                    once(&mut seen[2], "volumes")?;
                    spec.volumes = map.next_value::<Option<SparseList<_>>>()?.map(|l| l.0);
                }
                "imagePullSecrets" => {
                    once(&mut seen[3], "imagePullSecrets")?;
                    pull_secrets = map.next_value::<Option<Names>>()?;
                }
                "serviceAccountName" => {
                    once(&mut seen[4], "serviceAccountName")?;
                    service_account = map.next_value::<Option<String>>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let pod = PodImages::assemble(self.pointer, lists, pull_secrets, service_account);
        Ok((spec, ImagesInPass { pod, env }))
    }
}

/// A field read twice is refused, as both derived readers refuse it.
fn once<E: de::Error>(seen: &mut bool, field: &'static str) -> Result<(), E> {
    if std::mem::replace(seen, true) { Err(E::duplicate_field(field)) } else { Ok(()) }
}

/// A string, borrowed from the text when it holds no escape.
#[derive(Deserialize)]
struct Borrowed<'a>(#[serde(borrow)] Cow<'a, str>);

/// `containers` or `initContainers`: those that reference something, and the image pass's.
struct ContainersSeed {
    env: bool,
}

impl<'de> DeserializeSeed<'de> for ContainersSeed {
    type Value = (Vec<pod_spec::Container>, Indexed);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ContainersSeed {
    type Value = (Vec<pod_spec::Container>, Indexed);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of containers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (mut referencing, mut images) = (Vec::new(), Capped::new());
        let mut index = 0;
        while let Some((container, image)) = seq.next_element_seed(ContainerSeed(self.env))? {
            if container.references_anything() {
                referencing.push(container);
            }
            images.offer(index, image, MAX_CONTAINERS_READ);
            index += 1;
        }
        Ok((referencing, images))
    }
}

/// One container, as a map only: the references' reading, and the image pass's when it has
/// a name and an image.
struct ContainerSeed(bool);

impl<'de> DeserializeSeed<'de> for ContainerSeed {
    type Value = (pod_spec::Container, Option<Container>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ContainerSeed {
    type Value = (pod_spec::Container, Option<Container>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a container map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut name, mut image, mut pull_policy) = (None, None, None);
        let (mut env, mut env_from) = (None, None);
        let mut seen = [false; 5];
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "name" => {
                    once(&mut seen[0], "name")?;
                    name = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                "image" => {
                    once(&mut seen[1], "image")?;
                    image = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                "imagePullPolicy" => {
                    once(&mut seen[2], "imagePullPolicy")?;
                    pull_policy = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                "env" => {
                    once(&mut seen[3], "env")?;
                    env = map.next_value_seed(OrNull(EnvSeed(self.0)))?;
                }
                "envFrom" => {
                    once(&mut seen[4], "envFrom")?;
                    env_from = map.next_value::<Option<SparseList<EnvFromSource>>>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let (env, image_env) = env.unzip();
        let referencing =
            pod_spec::Container { env, env_from: env_from.map(|l: SparseList<_>| l.0) };
        let image = name.zip(image).map(|(name, image)| Container {
            name: name.0.into_owned(),
            image: image.0.into_owned(),
            image_pull_policy: pull_policy.map(|p| p.0.into_owned()),
            env: image_env.flatten(),
        });
        Ok((referencing, image))
    }
}

/// A container's `env`: the entries that reference something, and (when kept) the image
/// pass's names and values.
struct EnvSeed(bool);

impl<'de> DeserializeSeed<'de> for EnvSeed {
    type Value = (Vec<pod_spec::EnvVar>, Option<Capped<EnvVar>>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EnvSeed {
    type Value = (Vec<pod_spec::EnvVar>, Option<Capped<EnvVar>>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of environment variables")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (mut referencing, mut kept) = (Vec::new(), Capped::new());
        let mut index = 0;
        while let Some((var, named)) = seq.next_element_seed(EnvVarSeed(self.0))? {
            if var.references_anything() {
                referencing.push(var);
            }
            kept.offer(index, named, MAX_ENV_READ);
            index += 1;
        }
        Ok((referencing, self.0.then_some(kept)))
    }
}

/// One `env` entry, as a map only. Its name and value are checked to be strings whether or
/// not they are kept, as the image pass's own reading checks them.
struct EnvVarSeed(bool);

impl<'de> DeserializeSeed<'de> for EnvVarSeed {
    type Value = (pod_spec::EnvVar, Option<EnvVar>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EnvVarSeed {
    type Value = (pod_spec::EnvVar, Option<EnvVar>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an environment variable map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut name, mut value, mut value_from) = (None, None, None);
        let mut seen = [false; 3];
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "name" => {
                    once(&mut seen[0], "name")?;
                    name = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                "value" => {
                    once(&mut seen[1], "value")?;
                    value = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                "valueFrom" => {
                    once(&mut seen[2], "valueFrom")?;
                    value_from = map.next_value::<Option<EnvVarSource>>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let kept = self
            .0
            .then(|| EnvVar::read(name.map(|n| n.0), value.map(|v| v.0), value_from.is_some()));
        Ok((pod_spec::EnvVar { value_from }, kept.flatten()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::inputs::image::ContainerImage;
    use crate::core::workload::WorkloadKind;
    use serde_json::json;

    fn in_pass(pod_spec: &str, env: bool) -> Result<(PodSpec, ImagesInPass), serde_json::Error> {
        let seed = PodSpecSeed { pointer: &["spec"], env };
        seed.deserialize(&mut serde_json::Deserializer::from_str(pod_spec))
    }

    #[test]
    fn reads_what_the_two_readers_read_apart() {
        let env: Vec<_> = (0..400)
            .map(|i| match i % 4 {
                0 => json!({"name": format!("V{i}"), "value": "sha256:1"}),
                1 => json!({"name": format!("V{i}"), "value": "x".repeat(200)}),
                2 => json!({"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
                _ => json!({"value": "no name"}),
            })
            .collect();
        let spec = json!({"serviceAccountName": "builder", "imagePullSecrets": [{"name": "reg"}, {}],
            "containers": [{}, {"name": "a", "image": "app:1", "imagePullPolicy": "Always", "env": env},
                {"name": "b", "image": "b:2", "envFrom": [{"configMapRef": {"name": "c"}}]}],
            "initContainers": [{"name": "i", "image": "busybox", "env": null}],
            "volumes": [{"name": "v", "secret": {"secretName": "s"}}, {"name": "e", "emptyDir": {}}]});
        let text = spec.to_string();
        let alone: PodSpec = serde_json::from_str(&text).expect("pod spec");
        let pod =
            PodImages::of(WorkloadKind::Pod, &json!({"spec": spec}).to_string()).expect("images");
        let (read, images) = in_pass(&text, true).expect("one pass");
        assert_eq!(format!("{read:?}"), format!("{alone:?}"));
        assert_eq!(images.pod, pod);
        assert!(images.env);
        assert_eq!(
            images.pod.containers[0].env.as_ref().map(|e| e.unread),
            Some(300 - MAX_ENV_READ),
            "named beyond the cap"
        );

        let (read, images) = in_pass(&text, false).expect("one pass");
        assert_eq!(format!("{read:?}"), format!("{alone:?}"));
        let without_env = PodImages {
            containers: pod
                .containers
                .into_iter()
                .map(|c| ContainerImage { env: None, ..c })
                .collect(),
            ..pod
        };
        assert_eq!((images.pod, images.env), (without_env, false));
    }

    #[test]
    fn refuses_what_it_cannot_read_as_both_readers_would() {
        for spec in [
            r#"{"containers": [], "containers": []}"#,
            r#"{"serviceAccountName": "a", "serviceAccountName": "b"}"#,
            r#"{"containers": [["c", "app:1"]]}"#,
            r#"{"containers": [{"name": "c", "name": "d"}]}"#,
            r#"{"containers": [{"name": 1, "image": "app:1"}]}"#,
            r#"{"containers": [{"env": [["A", "1"]]}]}"#,
            r#"{"containers": [{"env": [{"name": "A", "value": 1}]}]}"#,
            r#"{"containers": [{"env": [{"valueFrom": "x"}]}]}"#,
            r#"{"volumes": [], "volumes": []}"#,
        ] {
            // An env value of the wrong type is refused even when `env` is not kept.
            assert!(in_pass(spec, false).is_err(), "{spec}");
        }
        assert!(in_pass("[]", true).is_err());
    }

    #[test]
    fn the_hint_follows_the_image_annotations_under_any_domain() {
        let hint = |keys: &[&str]| {
            let map = keys.iter().map(|k| ((*k).to_owned(), String::new())).collect();
            ImageHint::of(Some(&map))
        };
        assert_eq!(ImageHint::of(None), ImageHint::default());
        assert_eq!(hint(&["configsum.dev/track", "images"]), ImageHint::default());
        assert_eq!(hint(&["example.com/images"]), ImageHint { images: true, env: false });
        assert_eq!(hint(&["a.io/image-env", "a.io/images"]), ImageHint { images: true, env: true });
    }
}
