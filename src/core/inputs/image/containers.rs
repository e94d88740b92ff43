//! The image pass: a second, light read of a workload that tracks images, for
//! its containers' names, images and pull policies, its image pull secrets and
//! its ServiceAccount. Workloads that track no image never pay for it.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};

use crate::core::kinds::TemplateAt;
use crate::core::workload::WorkloadKind;

/// A container that runs an image, with where that image sits in the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerImage {
    pub name: String,
    pub image: String,
    pub pull_policy: Option<String>,
    /// JSON pointer of the container's `image` field.
    pub path: String,
}

/// What the image pass reads of a pod spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodImages {
    /// `containers`, then `initContainers`.
    pub containers: Vec<ContainerImage>,
    /// `imagePullSecrets[].name`, in order.
    pub pull_secrets: Vec<String>,
    /// `serviceAccountName`; the API server's default is `default`.
    pub service_account: Option<String>,
}

impl PodImages {
    /// Reads the pod spec of `object`, sent as `kind`.
    pub fn of(kind: WorkloadKind, object: &str) -> Result<PodImages, serde_json::Error> {
        #[derive(Deserialize)]
        struct Object<S> {
            spec: Option<S>,
        }
        #[derive(Deserialize)]
        struct Template {
            template: Option<Object<PodSpec>>,
        }
        let (spec, base) = match kind.declaration().template {
            TemplateAt::Object => (serde_json::from_str::<Object<PodSpec>>(object)?.spec, "/spec"),
            TemplateAt::SpecTemplate | TemplateAt::SpecTemplateOrWorkloadRef => {
                let object: Object<Template> = serde_json::from_str(object)?;
                (object.spec.and_then(|s| s.template?.spec), "/spec/template/spec")
            }
        };
        let Some(spec) = spec else { return Ok(PodImages::default()) };
        let mut containers = Vec::new();
        for (list, read) in
            [("containers", spec.containers), ("initContainers", spec.init_containers)]
        {
            for (index, container) in read.map(|r| r.0).into_iter().flatten() {
                containers.push(ContainerImage {
                    name: container.name,
                    image: container.image,
                    pull_policy: container.image_pull_policy,
                    path: format!("{base}/{list}/{index}/image"),
                });
            }
        }
        Ok(PodImages {
            containers,
            pull_secrets: spec.image_pull_secrets.map(|s| s.0).unwrap_or_default(),
            service_account: spec.service_account_name.filter(|s| !s.is_empty()),
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    containers: Option<Indexed>,
    init_containers: Option<Indexed>,
    image_pull_secrets: Option<Names>,
    service_account_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Container {
    name: String,
    image: String,
    image_pull_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MaybeContainer {
    name: Option<String>,
    image: Option<String>,
    image_pull_policy: Option<String>,
}

/// The containers that have a name and an image, with their index in the
/// list; the others are dropped as they are read.
struct Indexed(Vec<(usize, Container)>);

impl<'de> Deserialize<'de> for Indexed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Indexed;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of containers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Indexed, A::Error> {
                let mut kept = Vec::new();
                let mut index = 0;
                while let Some(c) = seq.next_element::<MaybeContainer>()? {
                    if let (Some(name), Some(image)) = (c.name, c.image) {
                        let container =
                            Container { name, image, image_pull_policy: c.image_pull_policy };
                        kept.push((index, container));
                    }
                    index += 1;
                }
                Ok(Indexed(kept))
            }
        }
        deserializer.deserialize_seq(List)
    }
}

/// `[{name: …}]`, keeping the named entries only.
struct Names(Vec<String>);

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
                let mut names = Vec::new();
                while let Some(named) = seq.next_element::<Named>()? {
                    names.extend(named.name.filter(|n| !n.is_empty()));
                }
                Ok(Names(names))
            }
        }
        deserializer.deserialize_seq(List)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn a_wrong_type_is_an_error_and_a_missing_spec_is_nothing() {
        let wrong = json!({"spec": {"containers": [{"name": "c", "image": 1}]}});
        assert!(PodImages::of(WorkloadKind::Pod, &wrong.to_string()).is_err());
        let none = PodImages::of(WorkloadKind::Deployment, "{}").expect("empty");
        assert_eq!(none, PodImages::default());
    }
}
