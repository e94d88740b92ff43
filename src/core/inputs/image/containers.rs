//! What the image pass reads of a workload that tracks images: its containers' names, images
//! and pull policies (and `env`, for `<domain>/image-env`), its image pull secrets and its
//! ServiceAccount, capped against hostile pod specs. Workloads that track no image never pay
//! for it. The reading itself is the one reader of a pod spec's
//! (`crate::core::pod_spec_reader`); these are the types it fills.

use std::borrow::Cow;

use crate::core::model::pod_spec::field;

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
    pub(crate) fn read(
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
    /// The image pass's result from what it read of a pod spec at `pointer`: `containers`
    /// then `initContainers`, at most [`MAX_CONTAINERS_READ`] of them in all.
    pub(crate) fn assemble(
        pointer: &[&str],
        lists: [Option<Indexed>; 2],
        pull_secrets: Option<Names>,
        service_account: Option<String>,
    ) -> PodImages {
        let base = format!("/{}", pointer.join("/"));
        let mut containers = Vec::new();
        let mut unread = 0;
        for (list, read) in [field::CONTAINERS, field::INIT_CONTAINERS].into_iter().zip(lists) {
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
                    path: format!("{base}/{list}/{index}/{}", field::IMAGE),
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

/// A container the image pass keeps: it has a name and an image.
pub(crate) struct Container {
    pub(crate) name: String,
    pub(crate) image: String,
    pub(crate) image_pull_policy: Option<String>,
    pub(crate) env: Option<Capped<EnvVar>>,
}

/// Up to a cap of a list's elements worth keeping, with their index in the list, and how
/// many more there were. The rest are dropped as they are read.
pub(crate) struct Capped<T> {
    kept: Vec<(usize, T)>,
    unread: usize,
}

impl<T> Capped<T> {
    pub(crate) fn new() -> Self {
        Capped { kept: Vec::new(), unread: 0 }
    }

    /// Element `index` of the list, if it is one to keep: kept while fewer than `cap` are,
    /// counted after.
    pub(crate) fn offer(&mut self, index: usize, element: Option<T>, cap: usize) {
        if let Some(kept) = element {
            if self.kept.len() < cap {
                self.kept.push((index, kept));
            } else {
                self.unread += 1;
            }
        }
    }
}

/// The containers that have a name and an image.
pub(crate) type Indexed = Capped<Container>;

/// `[{name: …}]`: the entries with a name.
pub(crate) type Names = Capped<String>;
