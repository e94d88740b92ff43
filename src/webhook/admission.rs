//! The wire format: `admission.k8s.io/v1` AdmissionReview in and out.
//!
//! Our own types rather than kube-core's: kube-core serialises
//! `response.patch` as an array of numbers, while the API server wants a
//! base64 string; and keeping `object` raw lets the core parse it exactly
//! once, as its kind.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::core::Decision;
use crate::core::Request;

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionReviewIn<'a> {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(borrow)]
    request: Option<&'a RawValue>,
}

/// `request` of an AdmissionReview; `object` and `oldObject` stay raw JSON.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest<'a> {
    pub uid: String,
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: String,
    #[serde(default, borrow)]
    pub object: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub old_object: Option<&'a RawValue>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl AdmissionRequest<'_> {
    /// The view the core decides on.
    pub fn as_core(&self) -> Request<'_> {
        Request {
            group: &self.kind.group,
            version: &self.kind.version,
            kind: &self.kind.kind,
            sub_resource: self.sub_resource.as_deref(),
            operation: &self.operation,
            namespace: self.namespace.as_deref(),
            object: self.object.map(RawValue::get).filter(|o| *o != "null"),
            old_object: self.old_object.map(RawValue::get).filter(|o| *o != "null"),
        }
    }

    /// `namespace/name` for logs; a Pod being created may have only `generateName`.
    pub fn display_name(&self) -> String {
        format!(
            "{}/{}",
            self.namespace.as_deref().unwrap_or(""),
            self.name.as_deref().unwrap_or("")
        )
    }
}

/// Why a body is not an AdmissionReview v1 we can answer.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    // Only the position: serde's message may quote object values.
    #[error("body is not valid AdmissionReview JSON (line {line}, column {column}: {category})")]
    Json { line: usize, column: usize, category: &'static str },
    #[error("expected apiVersion {API_VERSION} and kind {KIND}, got {api_version:?} {kind:?}")]
    WrongType { api_version: String, kind: String },
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// Parses an AdmissionReview v1 body, borrowing `object` and `oldObject`.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<'_>, WireError> {
    // The envelope first, so a wrong apiVersion is reported as such.
    let review: AdmissionReviewIn<'_> = serde_json::from_slice(body).map_err(json_error)?;
    let api_version = review.api_version.unwrap_or_default();
    let kind = review.kind.unwrap_or_default();
    if api_version != API_VERSION || kind != KIND {
        return Err(WireError::WrongType { api_version, kind });
    }
    let request = review.request.filter(|r| r.get() != "null").ok_or(WireError::NoRequest)?;
    serde_json::from_str(request.get()).map_err(json_error)
}

fn json_error(e: serde_json::Error) -> WireError {
    use serde_json::error::Category;
    let category = match e.classify() {
        Category::Io => "read error",
        Category::Syntax => "syntax error",
        Category::Data => "a field is missing or of the wrong type",
        Category::Eof => "unexpected end of input",
    };
    WireError::Json { line: e.line(), column: e.column(), category }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: AdmissionResponse<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: BTreeMap<&'static str, String>,
}

#[derive(Serialize)]
struct Status<'a> {
    code: u16,
    message: &'a str,
}

/// The AdmissionReview answer for `uid`: the patch as base64 JSON Patch when
/// there is one, no `patch`/`patchType` otherwise.
pub fn encode_response(uid: &str, decision: &Decision) -> Vec<u8> {
    let patch = (!decision.patch.is_empty()).then(|| {
        let json = serde_json::to_vec(&decision.patch).unwrap_or_default();
        base64::engine::general_purpose::STANDARD.encode(json)
    });
    let mut audit_annotations = BTreeMap::new();
    if !decision.changed.is_empty()
        || !decision.changed_workloads.is_empty()
        || !decision.changed_images.is_empty()
        || !decision.changed_env.is_empty()
    {
        let objects = decision.changed.iter().map(ToString::to_string);
        let objects = objects.chain(decision.changed_workloads.iter().cloned());
        let images = decision.changed_images.iter().map(|c| format!("image/{c}"));
        let env = decision.changed_env.iter().map(|v| format!("image-env/{v}"));
        let changed: Vec<String> = objects.chain(images).chain(env).collect();
        audit_annotations.insert("changed", changed.join(", "));
    }
    let response = AdmissionResponse {
        uid,
        allowed: decision.denied.is_none(),
        status: decision.denied.as_deref().map(|message| Status { code: 503, message }),
        patch_type: patch.as_ref().map(|_| "JSONPatch"),
        patch,
        warnings: &decision.warnings,
        audit_annotations,
    };
    let review = AdmissionReviewOut { api_version: API_VERSION, kind: KIND, response };
    // Serialising plain strings, bools and maps of strings cannot fail.
    serde_json::to_vec(&review).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).expect("json")
    }

    #[test]
    fn parses_a_review_and_keeps_objects_raw() {
        let b = body(json!({"apiVersion": API_VERSION, "kind": KIND, "request": {
            "uid": "u1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "operation": "UPDATE", "namespace": "ns", "name": "d",
            "object": {"a": 1}, "oldObject": null, "dryRun": true}}));
        let request = parse_review(&b).expect("review");
        let core = request.as_core();
        assert_eq!(
            (core.group, core.version, core.kind, core.operation),
            ("apps", "v1", "Deployment", "UPDATE")
        );
        assert_eq!(core.object, Some(r#"{"a":1}"#));
        assert_eq!(core.old_object, None);
        assert_eq!(request.dry_run, Some(true));
    }

    #[test]
    fn rejects_what_is_not_a_v1_review() {
        let wrong =
            body(json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": KIND, "request": {}}));
        assert!(matches!(parse_review(&wrong), Err(WireError::WrongType { .. })));
        let no_request = body(json!({"apiVersion": API_VERSION, "kind": KIND}));
        assert!(matches!(parse_review(&no_request), Err(WireError::NoRequest)));
        assert!(matches!(parse_review(b"{not json"), Err(WireError::Json { .. })));
        let missing_uid = body(json!({"apiVersion": API_VERSION, "kind": KIND,
            "request": {"kind": {"version": "v1", "kind": "Pod"}, "operation": "CREATE"}}));
        assert!(matches!(parse_review(&missing_uid), Err(WireError::Json { .. })));
    }

    #[test]
    fn errors_never_quote_the_body() {
        let b = br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7, "x": "hunter2"}}"#;
        let message = parse_review(b).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(!message.contains("hunter2") && !message.contains('7'), "{message}");
    }

    #[test]
    fn no_patch_fields_when_nothing_changes() {
        let out: Value =
            serde_json::from_slice(&encode_response("u", &Decision::default())).expect("json");
        assert_eq!(
            out,
            json!({"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": "u", "allowed": true}})
        );
    }

    #[test]
    fn patch_is_a_base64_string_the_api_server_can_decode() {
        let patch: Vec<json_patch::PatchOperation> = serde_json::from_value(
            json!([{"op": "add", "path": "/metadata/annotations/x", "value": "y"}]),
        )
        .expect("patch");
        let decision = Decision {
            patch,
            warnings: vec!["w".into()],
            changed: vec![
                crate::core::ObjectRef::config_map("a"),
                crate::core::ObjectRef::secret("b"),
            ],
            changed_images: vec!["app".into()],
            changed_env: vec!["api/INGESTOR_IMAGE_DIGEST".into()],
            changed_workloads: vec!["deployment/db".into()],
            unobserved_workloads: Vec::new(),
            unreadable: Vec::new(),
            denied: None,
        };
        let out: Value = serde_json::from_slice(&encode_response("u", &decision)).expect("json");
        let response = &out["response"];
        assert_eq!(response["patchType"], "JSONPatch");
        let encoded = response["patch"].as_str().expect("patch is a string");
        let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64");
        let ops: Value = serde_json::from_slice(&decoded).expect("json patch");
        assert_eq!(ops, json!([{"op": "add", "path": "/metadata/annotations/x", "value": "y"}]));
        assert_eq!(response["warnings"], json!(["w"]));
        assert_eq!(
            response["auditAnnotations"],
            json!({"changed": "configmap/a, secret/b, deployment/db, image/app, image-env/api/INGESTOR_IMAGE_DIGEST"})
        );
    }

    #[test]
    fn denial_carries_a_status() {
        let decision = Decision { denied: Some("no".into()), ..Decision::default() };
        let out: Value = serde_json::from_slice(&encode_response("u", &decision)).expect("json");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"], json!({"code": 503, "message": "no"}));
        assert!(out["response"].get("patch").is_none());
    }
}
