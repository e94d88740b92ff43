//! The image pass: a light read of a workload that tracks images, for its
//! containers' names, images and pull policies, its image pull secrets and its
//! ServiceAccount. Workloads that track no image never pay for it. This is the
//! read from an object's text (render, explain, the controller); the webhook
//! makes the same read inside its pass over a review ([`super::in_pass`]).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};

use crate::core::field_path::read_at;
use crate::core::workload::WorkloadKind;

/// A container that runs an image, with where that image sits in the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerImage {
    pub name: String,
    pub image: String,
    pub pull_policy: Option<String>,
    /// JSON pointer of the container's `image` field.
    pub path: String,
    /// Its `env`, for `<domain>/image-env`; `None` when the container has no `env` list.
    pub env: Option<ContainerEnv>,
}

/// A container's `env` list as the image-env pass needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerEnv {
    /// The named variables, up to [`MAX_ENV_READ`], with their index in the list.
    pub vars: Vec<(usize, EnvVar)>,
    /// Entries beyond [`MAX_ENV_READ`], counted only.
    pub unread: usize,
}

/// One `env` entry: its name and how its value is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvVar {
    pub name: String,
    pub value: EnvValue,
}

impl EnvVar {
    /// The entry as kept, from its `name`, its `value` and whether it has a `valueFrom`;
    /// `None` without a name.
    pub(super) fn read(
        name: Option<Cow<'_, str>>,
        value: Option<Cow<'_, str>>,
        value_from: bool,
    ) -> Option<EnvVar> {
        let value = match (value, value_from) {
            (_, true) => EnvValue::From,
            (Some(v), false) if v.len() <= MAX_ENV_VALUE_KEPT => EnvValue::Short(v.into_owned()),
            (Some(_), false) => EnvValue::Long,
            (None, false) => EnvValue::Unset,
        };
        Some(EnvVar { name: name?.into_owned(), value })
    }
}

/// How a variable gets its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvValue {
    /// `value`, if it is at most [`MAX_ENV_VALUE_KEPT`] bytes (a digest is 71).
    Short(String),
    /// A longer `value`: never a digest; not kept.
    Long,
    /// Neither `value` nor `valueFrom`: the empty string.
    Unset,
    /// `valueFrom`: someone else's to set.
    From,
}

/// At most this many `env` entries of a container are read: a hostile pod spec of millions
/// must cost memory for a few hundred. A container with more gets no image-env.
pub const MAX_ENV_READ: usize = 256;

/// Values up to this long are kept; a digest (`sha256:` and 64 hex) has 71 characters.
pub const MAX_ENV_VALUE_KEPT: usize = 128;

/// At most this many containers (and as many pull secrets) are kept by the
/// image pass: real pods run a handful, and a hostile review of millions
/// must cost memory for a few hundred.
pub const MAX_CONTAINERS_READ: usize = 256;

/// What the image pass reads of a pod spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodImages {
    /// Containers and pull secrets beyond [`MAX_CONTAINERS_READ`], counted only.
    pub unread: usize,
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
        match kind.pod_spec_path() {
            Some(path) => PodImages::at(object, path, path),
            None => Ok(PodImages::default()),
        }
    }

    /// Reads `spec`, the `spec` of an object of `kind` (the controller keeps
    /// only that of a watched workload).
    pub fn of_spec(kind: WorkloadKind, spec: &str) -> Result<PodImages, serde_json::Error> {
        // The pod spec path starts at `spec` (kinds.rs refuses any other).
        match kind.pod_spec_path() {
            Some(path) => PodImages::at(spec, path.get(1..).unwrap_or_default(), path),
            None => Ok(PodImages::default()),
        }
    }

    /// Reads the pod spec at `path` in `json`; `pointer` is its path in the object, the base of
    /// each container's image pointer.
    fn at(json: &str, path: &[&str], pointer: &[&str]) -> Result<PodImages, serde_json::Error> {
        let spec: Option<PodSpec> = read_at(json, path)?;
        let Some(spec) = spec else { return Ok(PodImages::default()) };
        Ok(PodImages::assemble(
            pointer,
            [spec.containers, spec.init_containers],
            spec.image_pull_secrets,
            spec.service_account_name,
        ))
    }

    /// The image pass's result from what it read of a pod spec at `pointer`: `containers`
    /// then `initContainers`, at most [`MAX_CONTAINERS_READ`] of them in all.
    pub(super) fn assemble(
        pointer: &[&str],
        lists: [Option<Indexed>; 2],
        pull_secrets: Option<Names>,
        service_account: Option<String>,
    ) -> PodImages {
        let base = format!("/{}", pointer.join("/"));
        let mut containers = Vec::new();
        let mut unread = 0;
        for (list, read) in ["containers", "initContainers"].into_iter().zip(lists) {
            let Some(read) = read else { continue };
            unread += read.unread;
            for (index, container) in read.kept {
                if containers.len() == MAX_CONTAINERS_READ {
                    unread += 1;
                    continue;
                }
                containers.push(ContainerImage {
                    name: container.name,
                    image: container.image,
                    pull_policy: container.image_pull_policy,
                    path: format!("{base}/{list}/{index}/image"),
                    env: container
                        .env
                        .map(|env| ContainerEnv { vars: env.kept, unread: env.unread }),
                });
            }
        }
        let (pull_secrets, unread_secrets) = pull_secrets.map_or((Vec::new(), 0), |s| {
            (s.kept.into_iter().map(|(_, name)| name).collect(), s.unread)
        });
        PodImages {
            unread: unread + unread_secrets,
            containers,
            pull_secrets,
            service_account: service_account.filter(|s| !s.is_empty()),
        }
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

/// A container the image pass keeps: it has a name and an image.
pub(super) struct Container {
    pub(super) name: String,
    pub(super) image: String,
    pub(super) image_pull_policy: Option<String>,
    pub(super) env: Option<Capped<EnvVar>>,
}

/// Borrowed while read: only the kept containers' strings are allocated.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MaybeContainer<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    image: Option<Cow<'a, str>>,
    #[serde(borrow)]
    image_pull_policy: Option<Cow<'a, str>>,
    env: Option<Capped<EnvVar>>,
}

/// Up to [`MAX_CONTAINERS_READ`] elements of a list that `keep` accepts, with
/// their index in the list, and how many more it would have accepted. The
/// rest are dropped as they are read.
pub(super) struct Capped<T> {
    kept: Vec<(usize, T)>,
    unread: usize,
}

impl<T> Capped<T> {
    pub(super) fn new() -> Self {
        Capped { kept: Vec::new(), unread: 0 }
    }

    /// Element `index` of the list, if it is one to keep: kept while fewer than `cap` are,
    /// counted after.
    pub(super) fn offer(&mut self, index: usize, element: Option<T>, cap: usize) {
        if let Some(kept) = element {
            if self.kept.len() < cap {
                self.kept.push((index, kept));
            } else {
                self.unread += 1;
            }
        }
    }

    fn read<'de, A, E>(
        mut seq: A,
        cap: usize,
        keep: impl Fn(E) -> Option<T>,
    ) -> Result<Self, A::Error>
    where
        A: SeqAccess<'de>,
        E: Deserialize<'de>,
    {
        let mut capped = Capped::new();
        let mut index = 0;
        while let Some(element) = seq.next_element::<E>()? {
            capped.offer(index, keep(element), cap);
            index += 1;
        }
        Ok(capped)
    }
}

/// The containers that have a name and an image.
pub(super) type Indexed = Capped<Container>;

impl<'de> Deserialize<'de> for Indexed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Indexed;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of containers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Indexed, A::Error> {
                Capped::read(seq, MAX_CONTAINERS_READ, |c: MaybeContainer<'de>| {
                    Some(Container {
                        name: c.name?.into_owned(),
                        image: c.image?.into_owned(),
                        image_pull_policy: c.image_pull_policy.map(Cow::into_owned),
                        env: c.env,
                    })
                })
            }
        }
        deserializer.deserialize_seq(List)
    }
}

/// `[{name: …}]`: the entries with a name.
pub(super) type Names = Capped<String>;

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
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Names, A::Error> {
                Capped::read(seq, MAX_CONTAINERS_READ, |named: Named| {
                    named.name.filter(|n| !n.is_empty())
                })
            }
        }
        deserializer.deserialize_seq(List)
    }
}

impl<'de> Deserialize<'de> for Capped<EnvVar> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Borrowed while read: only a kept variable's name and short value are allocated.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct MaybeVar<'a> {
            #[serde(borrow)]
            name: Option<Cow<'a, str>>,
            #[serde(borrow)]
            value: Option<Cow<'a, str>>,
            value_from: Option<serde::de::IgnoredAny>,
        }
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Capped<EnvVar>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of environment variables")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Capped::read(seq, MAX_ENV_READ, |var: MaybeVar<'de>| {
                    EnvVar::read(var.name, var.value, var.value_from.is_some())
                })
            }
        }
        deserializer.deserialize_seq(List)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
