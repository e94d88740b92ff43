//! The parts of a workload object configsum reads, as light serde views.
//!
//! Field names follow the Kubernetes API. Every other field is skipped
//! without being decoded, which makes reading a 20 KB Deployment several
//! times cheaper than decoding the full k8s-openapi type (env values, images,
//! probes and status are never allocated). The API server has decoded and
//! defaulted the object as its kind before calling the webhook; here only the
//! fields we read must have the right types.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `metadata` of the workload or of its pod template.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct OwnerReference {
    pub controller: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    pub containers: Option<Vec<Container>>,
    pub init_containers: Option<Vec<Container>>,
    pub volumes: Option<Vec<Volume>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub env: Option<Vec<EnvVar>>,
    pub env_from: Option<Vec<EnvFromSource>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    pub value_from: Option<EnvVarSource>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource {
    pub config_map_key_ref: Option<KeySelector>,
    pub secret_key_ref: Option<KeySelector>,
}

/// `configMapKeyRef` / `secretKeyRef`.
#[derive(Clone, Debug, Deserialize)]
pub struct KeySelector {
    pub name: Option<String>,
    pub key: Option<String>,
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvFromSource {
    pub config_map_ref: Option<NamedSource>,
    pub secret_ref: Option<NamedSource>,
}

/// `envFrom[].configMapRef` / `.secretRef`, and the projected sources.
#[derive(Clone, Debug, Deserialize)]
pub struct NamedSource {
    pub name: Option<String>,
    pub items: Option<Vec<KeyToPath>>,
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub config_map: Option<NamedSource>,
    pub secret: Option<SecretVolumeSource>,
    pub projected: Option<ProjectedVolumeSource>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretVolumeSource {
    pub secret_name: Option<String>,
    pub items: Option<Vec<KeyToPath>>,
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ProjectedVolumeSource {
    pub sources: Option<Vec<VolumeProjection>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeProjection {
    pub config_map: Option<NamedSource>,
    pub secret: Option<NamedSource>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct KeyToPath {
    pub key: Option<String>,
}
