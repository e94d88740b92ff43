//! A workload as the core sees it, and how each kind is read: how to recognise
//! it from `request.kind`, which operations it mutates, where its pod
//! template and its digests live, all from its row in [`super::model::kinds`].

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::field_path::{AtPath, Key, LenientMapAt, Named, OrNull, collect_all, map_at};
use super::model::kinds::{KindRow, ReferenceDeclaration, WorkloadKind};
use super::model::operation::Operation;
use super::model::path_segment::Segment;
use super::model::pod_spec::Metadata;
use super::pod_spec_reader::{ImageHint, ImagesInPass, PodSpecSeed, Reads};
use super::refs::PodSpec;

impl WorkloadKind {
    /// API group, version and resource (plural), as in webhook rules.
    pub fn resource(self) -> (&'static str, &'static str, &'static str) {
        let declared = self.declaration();
        (declared.group, declared.version, declared.resource)
    }

    pub fn as_str(self) -> &'static str {
        self.declaration().name
    }

    /// Whether reviews of this operation are mutated (Jobs and Pods: CREATE only).
    pub fn mutates(self, operation: Operation) -> bool {
        self.declaration().operations.contains(&operation)
    }

    /// JSON path tokens of the annotations map that carries the digests.
    pub fn annotations_path(self) -> &'static [&'static str] {
        &self.row().annotations
    }

    /// JSON path tokens of the pod spec, for kinds with a pod template.
    pub fn pod_spec_path(self) -> Option<&'static [&'static str]> {
        self.row().pod_spec.as_deref()
    }

    /// `apiVersion` of this kind: `group/version`, or the version for the core group.
    pub fn api_version(self) -> &'static str {
        &self.row().api_version
    }

    /// Reads an object sent as this kind (an admission request's `object`), in one pass
    /// (another for a kind whose digests go somewhere of its own, and one for all its reference paths):
    /// its `apiVersion` and `kind` must match, and the fields configsum reads
    /// must have their API types.
    pub fn parse(self, object: &str) -> Result<Workload, ParseError> {
        let mut deserializer = serde_json::Deserializer::from_str(object);
        // The image pass reads the text on its own: this reading stays the one the pass over
        // a review is held to.
        let seed = ObjectSeed { row: self.row(), images: false };
        let read = seed.deserialize(&mut deserializer)?;
        deserializer.end()?;
        self.workload_of(read, Text::Object(object))
    }

    /// Whether one pass reads all this kind needs of an object ([`Self::object_seed`]), so that
    /// a pass over a larger document (an AdmissionReview) can read it in place: every
    /// built-in kind, and a declared kind without reference paths or digests of its own place.
    pub fn reads_in_one_pass(self) -> bool {
        let declaration = self.declaration();
        declaration.annotations.is_none() && declaration.references.is_empty()
    }

    /// What [`Self::parse`] reads of an object, as a seed for a pass over a larger document;
    /// with it, what the image pass reads when the metadata before `spec` says the workload
    /// tracks images (see [`super::pod_spec_reader`]).
    pub fn object_seed(self) -> ObjectSeed<'static> {
        ObjectSeed { row: self.row(), images: true }
    }

    /// The workload from what [`Self::object_seed`] read, for a kind that
    /// [`Self::reads_in_one_pass`]; checked as [`Self::parse`] checks.
    pub fn from_read(self, read: ObjectRead) -> Result<Workload, ParseError> {
        if !self.reads_in_one_pass() {
            // Its reference paths or digests' place would go unread: never silently.
            return Err(ParseError::NeedsText);
        }
        self.workload_of(read, Text::Spec(None))
    }

    fn workload_of(self, read: ObjectRead, text: Text<'_>) -> Result<Workload, ParseError> {
        if read.api_version != self.api_version() || read.kind != self.as_str() {
            return Err(ParseError::WrongKind {
                expected: format!("{} {}", self.api_version(), self.as_str()),
            });
        }
        let metadata_present = read.metadata.is_some();
        let metadata = read.metadata.unwrap_or_default();
        self.workload_from(metadata, metadata_present, read.spec, text)
    }

    /// The workload from its metadata and the text of its `spec`, known to be of this kind
    /// (the controller's watches say the kind; list items carry no `apiVersion`/`kind`).
    pub fn from_parts(
        self,
        metadata: Metadata,
        spec: Option<&str>,
    ) -> Result<Workload, ParseError> {
        let read = match spec {
            Some(text) => {
                let mut deserializer = serde_json::Deserializer::from_str(text);
                let seed = SpecSeed { row: self.row(), images: ImageHint::default() };
                let read = seed.deserialize(&mut deserializer)?;
                deserializer.end()?;
                Some(read)
            }
            None => None,
        };
        self.workload_from(metadata, true, read, Text::Spec(spec))
    }

    fn workload_from(
        self,
        metadata: Metadata,
        metadata_present: bool,
        spec: Option<SpecRead>,
        text: Text<'_>,
    ) -> Result<Workload, ParseError> {
        let declaration = self.declaration();
        let has_template = declaration.template.is_some();
        // The annotations map as the pass over the object found it, and how much of its path
        // exists: the template's metadata (or, for a Pod, the object's own).
        let template_path_len = declaration.template.map_or(0, <[_]>::len);
        let mut annotations = AnnotationsMap::default();
        let mut images_in_pass = None;
        let template = match spec {
            None if has_template => return Err(ParseError::NoPodSpec),
            None => Template::None,
            Some(SpecRead::Elsewhere) => Template::WorkloadRef,
            Some(SpecRead::Pod(pod_spec, images)) => {
                images_in_pass = images;
                annotations = AnnotationsMap {
                    present: usize::from(metadata_present)
                        + usize::from(metadata.annotations.is_some()),
                    values: metadata.annotations.clone(),
                };
                Template::Present(Box::new(PodTemplate { spec: pod_spec }))
            }
            Some(SpecRead::Template(template)) if has_template => {
                let template = template.ok_or(ParseError::NoPodSpec)?;
                let pod_spec = template.spec.ok_or(ParseError::NoPodSpec)?;
                images_in_pass = template.images;
                let metadata_present = template.metadata.is_some();
                // Taken, not copied: nothing reads the template's metadata after this.
                let values = template.metadata.and_then(|m| m.annotations);
                annotations = AnnotationsMap {
                    present: template_path_len
                        + usize::from(metadata_present)
                        + usize::from(values.is_some()),
                    values,
                };
                Template::Present(Box::new(PodTemplate { spec: pod_spec }))
            }
            Some(SpecRead::Template(_)) => Template::None,
        };
        let path = self.annotations_path();
        if declaration.annotations.is_some() {
            // Digests somewhere of the kind's own: one more pass to find that map.
            annotations = text.map_at(path, &metadata, metadata_present)?;
        } else if !has_template {
            annotations = AnnotationsMap {
                present: usize::from(metadata_present)
                    + usize::from(metadata.annotations.is_some()),
                values: metadata.annotations.clone(),
            };
        }
        // Every reference path in one pass, however many the kind declares.
        let paths: Vec<&[Segment<'_>]> = declaration.references.iter().map(|r| r.path).collect();
        let found = text.collect_all(&paths)?;
        let named = (declaration.references.iter().zip(found))
            .map(|(reference, (values, beyond))| NamedAt { reference, values, beyond })
            .collect();
        let namespace = metadata.namespace.clone().filter(|n| !n.is_empty());
        Ok(Workload {
            kind: self,
            namespace,
            metadata,
            template,
            annotations,
            named,
            images_in_pass,
        })
    }

    /// Only the digest-carrying annotations of an object (for `oldObject`, whose
    /// annotations are the fallback "existing" values); anything unreadable is empty.
    pub fn annotations_of(self, object: &str) -> BTreeMap<String, String> {
        let mut deserializer = serde_json::Deserializer::from_str(object);
        match self.old_annotations().deserialize(&mut deserializer) {
            Ok(found) if deserializer.end().is_ok() => found.unwrap_or_default(),
            _ => BTreeMap::new(),
        }
    }

    /// What [`Self::annotations_of`] reads, as a seed: the wire parser reads `oldObject` with
    /// it in the pass that reads the whole review, and never keeps the old object's text.
    pub fn old_annotations(self) -> LenientMapAt<'static> {
        LenientMapAt { path: self.annotations_path() }
    }
}

/// What configsum needs of a workload object: the typed entry to the core.
#[derive(Debug)]
pub struct Workload {
    pub kind: WorkloadKind,
    /// Where its references are looked up: the request's namespace, else the object's.
    pub namespace: Option<String>,
    /// The workload's own metadata: opt-out annotations and owner references.
    pub metadata: Metadata,
    pub template: Template,
    /// The map the digests go in, as found.
    pub annotations: AnnotationsMap,
    /// What the kind's reference paths hold (operators' custom resources).
    pub named: Vec<NamedAt>,
    /// What the image pass reads, when the pass over a review read it too.
    pub images_in_pass: Option<ImagesInPass>,
}

#[derive(Debug)]
pub enum Template {
    Present(Box<PodTemplate>),
    /// An Argo Rollout whose pods come from `spec.workloadRef`, not its own template.
    WorkloadRef,
    /// A kind with no pod template: only the objects it names at its reference paths.
    None,
}

#[derive(Debug)]
pub struct PodTemplate {
    pub spec: PodSpec,
}

/// The map the digests go in, as found in the object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnnotationsMap {
    pub values: Option<BTreeMap<String, String>>,
    /// How many leading segments of the kind's annotations path exist (all of them when the
    /// map does): a patch creates the others and never replaces these.
    pub present: usize,
}

/// The values at one reference path of the kind.
#[derive(Debug)]
pub struct NamedAt {
    pub reference: &'static ReferenceDeclaration,
    pub values: Vec<Named>,
    /// Values beyond [`super::field_path::MAX_NAMED`], counted only.
    pub beyond: usize,
}

/// The text the paths of a kind's row are read from: the whole object (a review), or its
/// `spec` alone (the controller keeps no more), which the paths start at.
#[derive(Clone, Copy)]
enum Text<'a> {
    Object(&'a str),
    Spec(Option<&'a str>),
}

impl Text<'_> {
    /// The map at `path`, for a kind whose digests go somewhere of its own.
    fn map_at(
        self,
        path: &[&str],
        metadata: &Metadata,
        metadata_present: bool,
    ) -> Result<AnnotationsMap, serde_json::Error> {
        let (values, present) = match self {
            Text::Object(object) => map_at(object, path)?,
            Text::Spec(_) if path == ["metadata", "annotations"] => (
                metadata.annotations.clone(),
                usize::from(metadata_present) + usize::from(metadata.annotations.is_some()),
            ),
            Text::Spec(Some(spec)) => {
                let (values, present) = map_at(spec, path.get(1..).unwrap_or_default())?;
                (values, present + 1)
            }
            Text::Spec(None) => (None, 0),
        };
        Ok(AnnotationsMap { values, present })
    }

    /// The values at each reference path (which start at `spec`), in one pass.
    fn collect_all(
        self,
        paths: &[&[Segment<'_>]],
    ) -> Result<Vec<(Vec<Named>, usize)>, serde_json::Error> {
        match self {
            Text::Object(object) => collect_all(object, paths),
            Text::Spec(Some(spec)) => {
                let below: Vec<&[Segment<'_>]> =
                    paths.iter().map(|p| p.get(1..).unwrap_or_default()).collect();
                collect_all(spec, &below)
            }
            Text::Spec(None) => Ok(paths.iter().map(|_| (Vec::new(), 0)).collect()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("it is not an {expected}")]
    WrongKind { expected: String },
    #[error("it has no pod template spec")]
    NoPodSpec,
    #[error("its kind reads more than one pass over the object")]
    NeedsText,
}

/// A pod template as configsum reads it: its metadata and its pod spec.
#[derive(Deserialize)]
struct TemplateView {
    metadata: Option<Metadata>,
    spec: Option<PodSpec>,
    /// Read by [`TemplateSeed`] alone.
    #[serde(skip)]
    images: Option<ImagesInPass>,
}

/// What the one pass over an object reads ([`WorkloadKind::object_seed`]).
#[derive(Default)]
pub struct ObjectRead {
    api_version: String,
    kind: String,
    metadata: Option<Metadata>,
    spec: Option<SpecRead>,
}

/// What is read under `spec`, by the kind's row.
enum SpecRead {
    /// The object is the pod: `spec` is the pod spec, and what the image pass reads of it
    /// when that was read too.
    Pod(PodSpec, Option<ImagesInPass>),
    /// The template at the kind's path, if present.
    Template(Option<TemplateView>),
    /// The kind's `template_elsewhere` field is set: no template of its own.
    Elsewhere,
}

/// Reads an object's `apiVersion`, `kind`, `metadata` and `spec` (by [`SpecSeed`]), skipping
/// every other field.
pub struct ObjectSeed<'k> {
    row: &'k KindRow,
    /// Read the image pass's fields too when the metadata, read before `spec`, hints at it.
    images: bool,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_> {
    type Value = ObjectRead;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ObjectRead, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_> {
    type Value = ObjectRead;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} object", self.row.declaration.name)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ObjectRead, A::Error> {
        let mut read = ObjectRead::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "apiVersion" => {
                    read.api_version = map.next_value::<Option<String>>()?.unwrap_or_default()
                }
                "kind" => read.kind = map.next_value::<Option<String>>()?.unwrap_or_default(),
                "metadata" if read.metadata.is_none() => read.metadata = map.next_value()?,
                "spec" if read.spec.is_none() => {
                    let images = match &read.metadata {
                        Some(metadata) if self.images => {
                            ImageHint::of(metadata.annotations.as_ref())
                        }
                        _ => ImageHint::default(),
                    };
                    read.spec = map.next_value_seed(OrNull(SpecSeed { row: self.row, images }))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(read)
    }
}

/// Reads a `spec` by the kind's row: the pod spec itself, or the template at the rest of the
/// template path and whether the `template_elsewhere` field is set.
struct SpecSeed<'k> {
    row: &'k KindRow,
    images: ImageHint,
}

impl<'de> DeserializeSeed<'de> for SpecSeed<'_> {
    type Value = SpecRead;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<SpecRead, D::Error> {
        let declaration = &self.row.declaration;
        let images = self.row.pod_spec.as_deref().filter(|_| self.images.images);
        let reads = if self.images.env { Reads::ALL } else { Reads::IN_PASS };
        let images = images.map(|pointer| PodSpecSeed { pointer, reads });
        match declaration.template.map(<[_]>::split_first) {
            Some(None) => match images {
                Some(seed) => {
                    let (spec, images) = seed.deserialize(deserializer)?;
                    Ok(SpecRead::Pod(spec, images))
                }
                None => PodSpec::deserialize(deserializer).map(|spec| SpecRead::Pod(spec, None)),
            },
            Some(Some((_spec, rest))) => deserializer.deserialize_map(SpecVisitor {
                template: rest,
                elsewhere: declaration.template_elsewhere.and_then(|p| p.get(1..)),
                images,
            }),
            // No pod template: the spec is read by the reference paths only.
            None => IgnoredAny::deserialize(deserializer).map(|_| SpecRead::Template(None)),
        }
    }
}

struct SpecVisitor<'k> {
    /// The template's path below `spec` (not empty).
    template: &'k [&'k str],
    /// The `template_elsewhere` path below `spec`, if the kind has one.
    elsewhere: Option<&'k [&'k str]>,
    /// Read the template's pod spec for the image pass too.
    images: Option<PodSpecSeed<'k>>,
}

impl<'de> Visitor<'de> for SpecVisitor<'_> {
    type Value = SpecRead;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a spec map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SpecRead, A::Error> {
        let (template_field, template_rest) = match self.template.split_first() {
            Some(split) => split,
            None => return Err(serde::de::Error::custom("a template path below spec")),
        };
        let elsewhere = self.elsewhere.and_then(|p| p.split_first());
        let (mut template, mut template_read, mut delegated) = (None, false, false);
        let mut images = self.images;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if !template_read && key.as_str() == *template_field {
                template_read = true;
                let seed = TemplateSeed { images: images.take() };
                template = map.next_value_seed(AtPath { path: template_rest, seed })?;
            } else if let Some((_, rest)) = elsewhere.filter(|(f, _)| key.as_str() == **f) {
                let seed = AtPath { path: rest, seed: PhantomData::<Option<IgnoredAny>> };
                delegated |= map.next_value_seed(seed)?.flatten().is_some();
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(if delegated { SpecRead::Elsewhere } else { SpecRead::Template(template) })
    }
}

/// A pod template: [`TemplateView`]'s derived reading, or (for the image pass too) a map
/// whose `spec` is read by [`PodSpecSeed`].
struct TemplateSeed<'k> {
    images: Option<PodSpecSeed<'k>>,
}

impl<'de> DeserializeSeed<'de> for TemplateSeed<'_> {
    type Value = TemplateView;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<TemplateView, D::Error> {
        match self.images {
            None => TemplateView::deserialize(deserializer),
            Some(_) => deserializer.deserialize_map(self),
        }
    }
}

impl<'de> Visitor<'de> for TemplateSeed<'_> {
    type Value = TemplateView;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a pod template map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TemplateView, A::Error> {
        let mut view = TemplateView { metadata: None, spec: None, images: None };
        let (mut images, mut metadata_read) = (self.images, false);
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "metadata" if !metadata_read => {
                    metadata_read = true;
                    view.metadata = map.next_value()?;
                }
                "spec" => match images.take() {
                    Some(seed) => {
                        let read = map.next_value_seed(OrNull(seed))?;
                        (view.spec, view.images) = read.map_or((None, None), |(s, i)| (Some(s), i));
                    }
                    // As the derived reading refuses it.
                    None => return Err(serde::de::Error::duplicate_field("spec")),
                },
                "metadata" => return Err(serde::de::Error::duplicate_field("metadata")),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn recognises_exactly_the_spec_kinds() {
        assert_eq!(
            WorkloadKind::from_gvk("apps", "v1", "Deployment"),
            Some(WorkloadKind::Deployment)
        );
        assert_eq!(WorkloadKind::from_gvk("", "v1", "Pod"), Some(WorkloadKind::Pod));
        assert_eq!(
            WorkloadKind::from_gvk("argoproj.io", "v1alpha1", "Rollout"),
            Some(WorkloadKind::Rollout)
        );
        assert_eq!(WorkloadKind::from_gvk("batch", "v1", "CronJob"), None);
        assert_eq!(WorkloadKind::from_gvk("apps", "v1beta1", "Deployment"), None);
        assert_eq!(WorkloadKind::from_gvk("", "v1", "ConfigMap"), None);
    }

    #[test]
    fn resources_agree_with_kinds() {
        for kind in WorkloadKind::all() {
            let (group, version, _) = kind.resource();
            assert_eq!(WorkloadKind::from_gvk(group, version, kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn jobs_and_pods_only_on_create() {
        use Operation::*;
        for kind in [WorkloadKind::Job, WorkloadKind::Pod] {
            assert!(kind.mutates(Create));
            assert!(!kind.mutates(Update) && !kind.mutates(Delete) && !kind.mutates(Connect));
        }
        for kind in [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
            WorkloadKind::ReplicaSet,
            WorkloadKind::Rollout,
        ] {
            assert!(kind.mutates(Create) && kind.mutates(Update));
            assert!(!kind.mutates(Delete) && !kind.mutates(Connect));
        }
    }

    #[test]
    fn a_pods_own_lists_are_read_sparsely_too() {
        // `[]` reads as a struct of absent fields, as serde allows.
        let (arrays, objects) = (vec!["[]"; 100_000].join(","), vec!["{}"; 100_000].join(","));
        let pod = format!(
            r#"{{"apiVersion": "v1", "kind": "Pod", "spec": {{"containers": [{arrays}],
                "initContainers": [{objects}], "volumes": [{objects}, {{"secret": {{"secretName": "s"}}}}]}}}}"#
        );
        let workload = WorkloadKind::Pod.parse(&pod).expect("a Pod");
        let Template::Present(template) = workload.template else { panic!("a template") };
        let objects: Vec<_> = template.spec.references.iter().map(|(o, _)| o.clone()).collect();
        assert_eq!(objects, [super::super::model::object_ref::ObjectRef::secret("s")]);
    }

    #[test]
    fn rollout_with_workload_ref_is_recognised() {
        let object = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "r"},
            "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}});
        let workload = WorkloadKind::Rollout.parse(&object.to_string()).expect("rollout");
        assert!(matches!(workload.template, Template::WorkloadRef));
    }

    #[test]
    fn wrong_kind_or_missing_template_does_not_parse() {
        let as_pod =
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}}).to_string();
        assert!(WorkloadKind::Deployment.parse(&as_pod).is_err());
        let no_template =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1}});
        assert!(matches!(
            WorkloadKind::Deployment.parse(&no_template.to_string()),
            Err(ParseError::NoPodSpec)
        ));
        assert!(WorkloadKind::Pod.parse("[1, 2]").is_err());
    }

    #[test]
    fn reads_old_object_annotations_only() {
        let d = json!({"metadata": {"annotations": {"outer": "x"}},
            "spec": {"template": {"metadata": {"annotations": {"inner": "y"}}}}})
        .to_string();
        assert_eq!(
            WorkloadKind::Deployment.annotations_of(&d),
            BTreeMap::from([("inner".into(), "y".into())])
        );
        assert_eq!(
            WorkloadKind::Pod.annotations_of(&d),
            BTreeMap::from([("outer".into(), "x".into())])
        );
        assert!(WorkloadKind::Deployment.annotations_of("not json").is_empty());
    }
}
