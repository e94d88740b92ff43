//! A ConfigMap: its data is text (`data`) and base64 (`binaryData`), its
//! digest is plain, and a pod reads it through `configMapKeyRef`,
//! `envFrom[].configMapRef`, a `configMap` volume and a projected `configMap`.

use super::row::{DataField, Encoding, ObjectInput, ReferenceSites, Site};
use crate::core::model::digest_mode::DigestMode;
use crate::core::model::object_ref::ObjectKind;

pub(super) const CONFIG_MAP: ObjectInput = ObjectInput {
    kind: ObjectKind::ConfigMap,
    api_kind: "ConfigMap",
    word: "configmap",
    group: "",
    version: "v1",
    resource: "configmaps",
    data: &[
        DataField { field: "data", encoding: Encoding::Text },
        DataField { field: "binaryData", encoding: Encoding::Base64 },
    ],
    digest: DigestMode::Plain,
    sites: ReferenceSites {
        env: |from| from.config_map_key_ref.as_ref().map(Site::key),
        env_from: |from| from.config_map_ref.as_ref().map(Site::every_key),
        volume: |volume| volume.config_map.as_ref().map(Site::items),
        projection: |source| source.config_map.as_ref().map(Site::items),
    },
};
