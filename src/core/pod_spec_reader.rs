//! The one reader of a pod spec. Every pass reads a pod spec through it, in one visit: the
//! references (`core::refs`: which ConfigMaps and Secrets it consumes), the image pass (each
//! container's name, image and pull policy, the pull secrets and the ServiceAccount) and, for
//! `<domain>/image-env`, the containers' `env` names and values. [`Reads`] says which of the
//! three a caller needs; what is not needed is skipped unbuilt, and refused only where a
//! caller that needs it would refuse it (a field given twice, a wrong type).
//!
//! The webhook reads a workload's `metadata` before its `spec`, so by the pod spec its pass over
//! a review knows whether the workload tracks images ([`ImageHint`]), and reads everything at
//! once ([`Reads::ALL`] or [`Reads::IN_PASS`]): the review's text is never read twice.
//! Everything else reads one part from an object's text: [`PodSpec`]'s `Deserialize`
//! ([`Reads::REFERENCES`]) and [`PodImages::of`] ([`Reads::IMAGES`]).
//!
//! The field names it reads by hand are those of [`crate::core::model::pod_spec::field`]; the list
//! elements that reference something are kept by the tracked kinds' table
//! ([`crate::core::inputs::DECLARED`]), whose sites this reader asks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::field_path::{AtPath, Key, OrNull};
use super::inputs::DECLARED;
use super::inputs::image::containers::{
    Capped, Container, EnvVar, Indexed, MAX_CONTAINERS_READ, MAX_ENV_READ, Names, PodImages,
};
use super::inputs::secret_provider_class;
use super::model::kinds::WorkloadKind;
use super::model::pod_spec::{
    Borrowed, EnvFromSource, EnvVarSource, References, Volume, VolumeProjection, field,
};
use super::refs::{self, PodSpec};

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

/// Which parts of a pod spec a reading needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reads {
    /// What references ConfigMaps and Secrets: [`PodSpec`].
    pub references: bool,
    /// The image pass: [`PodImages`].
    pub images: bool,
    /// With `images`, the containers' `env` names and values.
    pub env: bool,
}

impl Reads {
    /// The references alone.
    pub const REFERENCES: Reads = Reads { references: true, images: false, env: false };
    /// The image pass alone, `env` included.
    pub const IMAGES: Reads = Reads { references: false, images: true, env: true };
    /// All of it, in the pass over a review.
    pub const ALL: Reads = Reads { references: true, images: true, env: true };
    /// The references and the image pass, without `env` values.
    pub const IN_PASS: Reads = Reads { references: true, images: true, env: false };
}

impl<'de> Deserialize<'de> for PodSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let seed = PodSpecSeed { pointer: &[], reads: Reads::REFERENCES };
        seed.deserialize(deserializer).map(|(spec, _)| spec)
    }
}

impl PodImages {
    /// Reads the pod spec of `object`, sent as `kind`.
    pub fn of(kind: WorkloadKind, object: &str) -> Result<PodImages, serde_json::Error> {
        match kind.row().pod_spec.as_deref() {
            Some(path) => images_at(object, path, path),
            None => Ok(PodImages::default()),
        }
    }

    /// Reads `spec`, the `spec` of an object of `kind` (the controller keeps
    /// only that of a watched workload).
    pub fn of_spec(kind: WorkloadKind, spec: &str) -> Result<PodImages, serde_json::Error> {
        // The pod spec path starts at `spec` (kinds.rs refuses any other).
        match kind.row().pod_spec.as_deref() {
            Some(path) => images_at(spec, path.get(1..).unwrap_or_default(), path),
            None => Ok(PodImages::default()),
        }
    }
}

/// The image pass's reading of the pod spec at `path` in `json`; `pointer` is its path in the
/// object, the base of each container's image pointer.
fn images_at(json: &str, path: &[&str], pointer: &[&str]) -> Result<PodImages, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let seed = PodSpecSeed { pointer, reads: Reads::IMAGES };
    let read = AtPath { path, seed }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(read.and_then(|(_, images)| images).map(|i| i.pod).unwrap_or_default())
}

/// The image pass's reading of a pod spec, made in the object's own pass.
#[derive(Debug)]
pub struct ImagesInPass {
    pub pod: PodImages,
    /// Whether the containers' `env` was kept; without it they carry none, and an
    /// image-env workload needs the text read again.
    pub env: bool,
}

/// Reads a pod spec (a map) for the parts `reads` names: the references' [`PodSpec`] (empty
/// unless read) and, when the image pass is read, its [`ImagesInPass`].
pub struct PodSpecSeed<'p> {
    /// The pod spec's path in the object: the base of each container's image pointer.
    pub pointer: &'p [&'p str],
    pub reads: Reads,
}

impl<'de> DeserializeSeed<'de> for PodSpecSeed<'_> {
    type Value = (PodSpec, Option<ImagesInPass>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        // Each part read is a type of its own, so that a reading compiles to only the checks
        // its parts make: the references alone cost what their derived reading did.
        let pointer = self.pointer;
        // A struct: a map, or (for the references alone) a list.
        macro_rules! read {
            ($r:literal, $i:literal, $e:literal) => {
                deserializer.deserialize_struct("PodSpec", &[], PodSpecVisit::<$r, $i, $e> { pointer })
            };
        }
        match (self.reads.references, self.reads.images, self.reads.env) {
            (true, true, true) => read!(true, true, true),
            (true, true, false) => read!(true, true, false),
            (true, false, true) => read!(true, false, true),
            (true, false, false) => read!(true, false, false),
            (false, true, true) => read!(false, true, true),
            (false, true, false) => read!(false, true, false),
            (false, false, true) => read!(false, false, true),
            (false, false, false) => read!(false, false, false),
        }
    }
}

/// [`Reads`] as a type: `R`eferences, `I`mages, `E`nv.
const fn reads<const R: bool, const I: bool, const E: bool>() -> Reads {
    Reads { references: R, images: I, env: E }
}

/// [`PodSpecSeed`]'s visit, for one [`Reads`].
struct PodSpecVisit<'p, const R: bool, const I: bool, const E: bool> {
    pointer: &'p [&'p str],
}

impl<'de, const R: bool, const I: bool, const E: bool> Visitor<'de> for PodSpecVisit<'_, R, I, E> {
    type Value = (PodSpec, Option<ImagesInPass>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a pod spec map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let reads = reads::<R, I, E>();
        let (references, images) = (reads.references, reads.images);
        let mut spec = PodSpec::default();
        let refs = &mut spec.references;
        let mut lists: [Option<Indexed>; 2] = [None, None];
        let (mut pull_secrets, mut service_account) = (None, None);
        let mut seen = [false; 5];
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                field::CONTAINERS if references || images => {
                    once(&mut seen[0], field::CONTAINERS)?;
                    lists[0] = map.next_value_seed(OrNull(ContainersSeed::<R, I, E>(refs)))?;
                }
                field::INIT_CONTAINERS if references || images => {
                    once(&mut seen[1], field::INIT_CONTAINERS)?;
                    lists[1] = map.next_value_seed(OrNull(ContainersSeed::<R, I, E>(refs)))?;
                }
                field::VOLUMES if references => {
                    once(&mut seen[2], field::VOLUMES)?;
                    map.next_value_seed(OrNull(volumes(refs, &mut spec.classes)))?;
                }
                field::IMAGE_PULL_SECRETS if images => {
                    once(&mut seen[3], field::IMAGE_PULL_SECRETS)?;
                    pull_secrets = map.next_value::<Option<Names>>()?;
                }
                field::SERVICE_ACCOUNT_NAME if images => {
                    once(&mut seen[4], field::SERVICE_ACCOUNT_NAME)?;
                    service_account = map.next_value::<Option<String>>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let images = images.then(|| ImagesInPass {
            pod: PodImages::assemble(self.pointer, lists, pull_secrets, service_account),
            env: reads.env,
        });
        Ok((spec, images))
    }

    /// A pod spec written as a list of its fields in order, as serde reads a struct: the
    /// references' reading alone takes it, as their derived reading did.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if reads::<R, I, E>() != Reads::REFERENCES {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        let mut spec = PodSpec::default();
        let refs = &mut spec.references;
        seq.next_element_seed(OrNull(ContainersSeed::<R, I, E>(refs)))?;
        seq.next_element_seed(OrNull(ContainersSeed::<R, I, E>(refs)))?;
        seq.next_element_seed(OrNull(volumes(refs, &mut spec.classes)))?;
        Ok((spec, None))
    }
}

/// A field read twice is refused, as a derived reading refuses it.
fn once<E: de::Error>(seen: &mut bool, field: &'static str) -> Result<(), E> {
    if std::mem::replace(seen, true) { Err(E::duplicate_field(field)) } else { Ok(()) }
}

/// `containers` or `initContainers`: what they reference, added as read, and the image pass's.
struct ContainersSeed<'r, const R: bool, const I: bool, const E: bool>(&'r mut refs::References);

impl<'de, const R: bool, const I: bool, const E: bool> DeserializeSeed<'de>
    for ContainersSeed<'_, R, I, E>
{
    type Value = Indexed;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, const R: bool, const I: bool, const E: bool> Visitor<'de>
    for ContainersSeed<'_, R, I, E>
{
    type Value = Indexed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of containers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut images = Capped::new();
        let mut index = 0;
        while let Some(image) = seq.next_element_seed(ContainerSeed::<R, I, E>(&mut *self.0))? {
            images.offer(index, image, MAX_CONTAINERS_READ);
            index += 1;
        }
        Ok(images)
    }
}

/// One container, as a map only: the references' reading, and the image pass's when it has
/// a name and an image.
struct ContainerSeed<'r, const R: bool, const I: bool, const E: bool>(&'r mut refs::References);

impl<'de, const R: bool, const I: bool, const E: bool> DeserializeSeed<'de>
    for ContainerSeed<'_, R, I, E>
{
    type Value = Option<Container>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        // A struct: a map, or (for the references alone) a list.
        deserializer.deserialize_struct("Container", &[], self)
    }
}

impl<'de, const R: bool, const I: bool, const E: bool> Visitor<'de> for ContainerSeed<'_, R, I, E> {
    type Value = Option<Container>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a container map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Reads { references, images, .. } = reads::<R, I, E>();
        let (mut name, mut image, mut pull_policy) = (None, None, None);
        let mut env = None;
        let mut seen = [false; 5];
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                field::NAME if images => {
                    once(&mut seen[0], field::NAME)?;
                    name = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                field::IMAGE if images => {
                    once(&mut seen[1], field::IMAGE)?;
                    image = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                field::IMAGE_PULL_POLICY if images => {
                    once(&mut seen[2], field::IMAGE_PULL_POLICY)?;
                    pull_policy = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                field::ENV => {
                    once(&mut seen[3], field::ENV)?;
                    env = map.next_value_seed(OrNull(EnvSeed::<R, I, E>(&mut *self.0)))?;
                }
                field::ENV_FROM if references => {
                    once(&mut seen[4], field::ENV_FROM)?;
                    map.next_value_seed(OrNull(env_from(&mut *self.0)))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let image = name.zip(image).map(|(name, image)| Container {
            name: name.0.into_owned(),
            image: image.0.into_owned(),
            image_pull_policy: pull_policy.map(|p| p.0.into_owned()),
            env: env.flatten(),
        });
        Ok(image)
    }

    /// As [`PodSpecSeed::visit_seq`]: `[env, envFrom]`, for the references alone.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if reads::<R, I, E>() != Reads::REFERENCES {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        seq.next_element_seed(OrNull(EnvSeed::<R, I, E>(&mut *self.0)))?;
        seq.next_element_seed(OrNull(env_from(&mut *self.0)))?;
        Ok(None)
    }
}

/// A container's `env`: what its entries reference, added as read, and (when kept) the image
/// pass's names and values.
struct EnvSeed<'r, const R: bool, const I: bool, const E: bool>(&'r mut refs::References);

impl<'de, const R: bool, const I: bool, const E: bool> DeserializeSeed<'de>
    for EnvSeed<'_, R, I, E>
{
    type Value = Option<Capped<EnvVar>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, const R: bool, const I: bool, const E: bool> Visitor<'de> for EnvSeed<'_, R, I, E> {
    type Value = Option<Capped<EnvVar>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of environment variables")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut kept = Capped::new();
        let mut index = 0;
        while let Some(named) = seq.next_element_seed(EnvVarSeed::<R, I, E>(&mut *self.0))? {
            kept.offer(index, named, MAX_ENV_READ);
            index += 1;
        }
        Ok((reads::<R, I, E>().images && reads::<R, I, E>().env).then_some(kept))
    }
}

/// One `env` entry, as a map only: what its `valueFrom` references, added. For the image pass,
/// its name and value are checked to be strings whether or not they are kept.
struct EnvVarSeed<'r, const R: bool, const I: bool, const E: bool>(&'r mut refs::References);

impl<'de, const R: bool, const I: bool, const E: bool> DeserializeSeed<'de>
    for EnvVarSeed<'_, R, I, E>
{
    type Value = Option<EnvVar>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        // A struct: a map, or (for the references alone) a list.
        deserializer.deserialize_struct("EnvVar", &[], self)
    }
}

impl<'de, const R: bool, const I: bool, const E: bool> Visitor<'de> for EnvVarSeed<'_, R, I, E> {
    type Value = Option<EnvVar>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an environment variable map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Reads { references, images, env } = reads::<R, I, E>();
        let (mut name, mut value, mut from_present) = (None, None, false);
        let mut seen = [false; 3];
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                field::NAME if images => {
                    once(&mut seen[0], field::NAME)?;
                    name = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                field::VALUE if images => {
                    once(&mut seen[1], field::VALUE)?;
                    value = map.next_value::<Option<Borrowed<'de>>>()?;
                }
                field::VALUE_FROM if references => {
                    once(&mut seen[2], field::VALUE_FROM)?;
                    let value_from = map.next_value::<Option<EnvVarSource<'de>>>()?;
                    from_present = value_from.is_some();
                    if let Some(from) = &value_from {
                        self.0.add_sites(|sites| (sites.env)(from));
                    }
                }
                // The image pass only asks whether a value comes from elsewhere.
                field::VALUE_FROM => {
                    once(&mut seen[2], field::VALUE_FROM)?;
                    from_present = map.next_value::<Option<IgnoredAny>>()?.is_some();
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let kept = (images && env)
            .then(|| EnvVar::read(name.map(|n| n.0), value.map(|v| v.0), from_present));
        Ok(kept.flatten())
    }

    /// As [`PodSpecSeed::visit_seq`]: `[valueFrom]`, required, for the references alone.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if reads::<R, I, E>() != Reads::REFERENCES {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        let Some(value_from) = seq.next_element::<Option<EnvVarSource<'de>>>()? else {
            return Err(de::Error::invalid_length(0, &self));
        };
        if let Some(from) = &value_from {
            self.0.add_sites(|sites| (sites.env)(from));
        }
        Ok(None)
    }
}

/// A list read element by element, each handed to a closure as it is read: nothing is collected.
/// A container's `envFrom` and the pod spec's `volumes` are read so.
struct EachElement<T, F>(F, PhantomData<fn() -> T>);

fn each<T, F: FnMut(T)>(f: F) -> EachElement<T, F> {
    EachElement(f, PhantomData)
}

impl<'de, T: Deserialize<'de>, F: FnMut(T)> DeserializeSeed<'de> for EachElement<T, F> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de>, F: FnMut(T)> Visitor<'de> for EachElement<T, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while let Some(element) = seq.next_element::<T>()? {
            (self.0)(element);
        }
        Ok(())
    }
}

/// A container's `envFrom`: what each entry references, added as read.
fn env_from<'r, 'de>(
    refs: &'r mut refs::References,
) -> EachElement<EnvFromSource<'de>, impl FnMut(EnvFromSource<'de>) + 'r> {
    each(move |source: EnvFromSource<'de>| refs.add_sites(|sites| (sites.env_from)(&source)))
}

/// The pod spec's `volumes`: what each volume and its projected sources reference, added as
/// read, and the SecretProviderClass a CSI volume names.
fn volumes<'r, 'de>(
    refs: &'r mut refs::References,
    classes: &'r mut BTreeSet<String>,
) -> EachElement<Volume<'de>, impl FnMut(Volume<'de>) + 'r> {
    each(move |volume: Volume<'de>| {
        refs.add_sites(|sites| (sites.volume)(&volume));
        let sources = volume.projected.iter().flat_map(|p| p.sources.iter().flatten());
        for source in sources {
            refs.add_sites(|sites| (sites.projection)(source));
        }
        if let Some(class) = secret_provider_class::class_of(&volume) {
            if !classes.contains(class) {
                classes.insert(class.to_owned());
            }
        }
    })
}

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Named {
            name: Option<String>,
        }
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of references")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
                let mut capped = Capped::new();
                let mut index = 0;
                while let Some(named) = seq.next_element::<Named>()? {
                    capped.offer(index, named.name.filter(|n| !n.is_empty()), MAX_CONTAINERS_READ);
                    index += 1;
                }
                Ok(capped)
            }
        }
        deserializer.deserialize_seq(List)
    }
}

// Which list elements are kept: those that reference something, by the tracked kinds' sites.

impl References for VolumeProjection<'_> {
    fn references_anything(&self) -> bool {
        DECLARED.iter().any(|input| (input.sites.projection)(self).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::inputs::image::containers::{ContainerImage, EnvValue};
    use serde_json::{Value, json};

    fn in_pass(pod_spec: &str, env: bool) -> Result<(PodSpec, ImagesInPass), serde_json::Error> {
        let reads = if env { Reads::ALL } else { Reads::IN_PASS };
        let seed = PodSpecSeed { pointer: &["spec"], reads };
        let (spec, images) = seed.deserialize(&mut serde_json::Deserializer::from_str(pod_spec))?;
        Ok((spec, images.expect("the image pass was read")))
    }

    /// The pass over a review reads at once what the references and the image pass read on
    /// their own.
    #[test]
    fn reads_at_once_what_each_part_reads_alone() {
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
    fn refuses_what_either_part_would_refuse() {
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
    fn each_part_alone_reads_only_its_fields() {
        // The references never look at names, images or the pull credentials.
        for spec in [
            r#"{"containers": [{"name": 1, "image": 2, "env": [{"name": 3, "value": 4}]}]}"#,
            r#"{"serviceAccountName": 1, "serviceAccountName": 2, "imagePullSecrets": "x"}"#,
        ] {
            assert!(serde_json::from_str::<PodSpec>(spec).is_ok(), "{spec}");
            assert!(in_pass(spec, false).is_err(), "{spec}");
        }
        // The image pass never looks at volumes, `envFrom`, or what a `valueFrom` holds.
        let pod = |spec: &str| PodImages::of(WorkloadKind::Pod, &format!(r#"{{"spec": {spec}}}"#));
        for spec in [
            r#"{"volumes": 1, "volumes": 2}"#,
            r#"{"containers": [{"name": "c", "image": "i", "envFrom": 1, "env": [{"valueFrom": "x"}]}]}"#,
        ] {
            assert!(pod(spec).is_ok(), "{spec}");
            assert!(serde_json::from_str::<PodSpec>(spec).is_err(), "{spec}");
        }
        let read = pod(
            r#"{"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "valueFrom": "x"}]}]}"#,
        );
        let env = read.expect("reads").containers[0].env.clone().expect("env");
        assert_eq!(env.vars[0].1.value, EnvValue::From);
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

    #[test]
    fn reads_containers_with_their_paths_and_the_pull_credentials() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {
            "serviceAccountName": "builder",
            "imagePullSecrets": [{"name": "regcred"}, {}, {"name": ""}],
            "containers": [{}, {"name": "app", "image": "app:prod", "imagePullPolicy": "Always"}],
            "initContainers": [{"name": "init", "image": "busybox"}]}}}});
        let pod = PodImages::of(WorkloadKind::Deployment, &deployment.to_string()).expect("reads");
        assert_eq!(pod.pull_secrets, vec!["regcred"]);
        assert_eq!(pod.service_account.as_deref(), Some("builder"));
        let paths: Vec<(&str, &str)> =
            pod.containers.iter().map(|c| (c.name.as_str(), c.path.as_str())).collect();
        assert_eq!(
            paths,
            vec![
                ("app", "/spec/template/spec/containers/1/image"),
                ("init", "/spec/template/spec/initContainers/0/image"),
            ]
        );
        assert_eq!(pod.containers[0].pull_policy.as_deref(), Some("Always"));

        let bare = json!({"spec": {"containers": [{"name": "c", "image": "x"}]}});
        let pod = PodImages::of(WorkloadKind::Pod, &bare.to_string()).expect("reads");
        assert_eq!(pod.containers[0].path, "/spec/containers/0/image");
        assert_eq!(pod.service_account, None);
    }

    #[test]
    fn at_most_256_containers_and_pull_secrets_are_kept_and_the_rest_counted() {
        let containers: Vec<Value> =
            (0..300).map(|i| json!({"name": format!("c{i}"), "image": "x"})).collect();
        let secrets: Vec<Value> = (0..260).map(|i| json!({"name": format!("s{i}")})).collect();
        let pod = json!({"spec": {"containers": containers, "initContainers": [{"name": "i", "image": "x"}],
            "imagePullSecrets": secrets}});
        let pod = PodImages::of(WorkloadKind::Pod, &pod.to_string()).expect("reads");
        assert_eq!(pod.containers.len(), MAX_CONTAINERS_READ);
        assert_eq!(pod.pull_secrets.len(), MAX_CONTAINERS_READ);
        assert_eq!(pod.unread, 44 + 1 + 4);
    }

    #[test]
    fn a_wrong_type_is_an_error_and_a_missing_spec_is_nothing() {
        let wrong = json!({"spec": {"containers": [{"name": "c", "image": 1}]}});
        assert!(PodImages::of(WorkloadKind::Pod, &wrong.to_string()).is_err());
        let none = PodImages::of(WorkloadKind::Deployment, "{}").expect("empty");
        assert_eq!(none, PodImages::default());
    }
}
