//! A Secret: its data is base64 (`data`; `stringData` only in hand-written
//! files, folded over it as the API server does on write), its digest is
//! keyed when a digest key is configured, and a pod reads it through
//! `secretKeyRef`, `envFrom[].secretRef`, a `secret` volume (`secretName`) and
//! a projected `secret`. Image pull secrets are not read by the application
//! and are not references.

use super::row::{DataField, Encoding, ObjectInput, ReferenceSites, Site, SiteKeys};
use crate::core::model::digest_mode::DigestMode;
use crate::core::model::object_ref::ObjectKind;

pub(super) const SECRET: ObjectInput = ObjectInput {
    kind: ObjectKind::Secret,
    api_kind: "Secret",
    word: "secret",
    group: "",
    version: "v1",
    resource: "secrets",
    data: &[
        DataField { field: "data", encoding: Encoding::Base64 },
        DataField { field: "stringData", encoding: Encoding::Text },
    ],
    digest: DigestMode::Keyed,
    sites: ReferenceSites {
        env: |from| from.secret_key_ref.as_ref().map(Site::key),
        env_from: |from| from.secret_ref.as_ref().map(Site::every_key),
        volume: |volume| {
            volume.secret.as_ref().map(|secret| Site {
                name: secret.secret_name.as_ref().map(|name| name.as_str()),
                keys: SiteKeys::Items(secret.items.as_ref()),
                optional: secret.optional,
            })
        },
        projection: |source| source.secret.as_ref().map(Site::items),
    },
};
