//! The wire format: `admission.k8s.io/v1` AdmissionReview in and out.
//!
//! Our own types rather than kube-core's: kube-core serialises
//! `response.patch` as an array of numbers, while the API server wants a
//! base64 string. And reading a review costs one pass over the body: the
//! envelope and `request` are read together; when `request.kind`,
//! `subResource` and `operation` (which the API server sends first) say the
//! review is one configsum mutates, `object` is read as its kind in place
//! (the core's seed, with the image pass when its metadata names images) and
//! of `oldObject` only the map the digests are in. Any other `object` is kept
//! as borrowed text.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::core::field_path::{Key, OrNull};
use crate::core::model::operation::Operation;
use crate::core::workload::ObjectRead;
use crate::core::{
    Decision, OldObject, Plan, Request, Settings, WorkloadKind, plan_read_review, plan_review,
};

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// `request` of an AdmissionReview. Its strings are borrowed from the body unless they hold
/// an escape: each owned one was an allocation per review.
pub struct AdmissionRequest<'a> {
    pub uid: Cow<'a, str>,
    pub kind: GroupVersionKind<'a>,
    pub sub_resource: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub namespace: Option<Cow<'a, str>>,
    pub operation: Cow<'a, str>,
    pub object: Option<ObjectIn<'a>>,
    pub old_object: Option<OldObjectRead<'a>>,
    pub dry_run: Option<bool>,
}

/// `request.object` as the pass over the review left it.
pub enum ObjectIn<'a> {
    /// The review is one configsum mutates, of a kind read in one pass: read in place.
    Read(Box<ObjectRead>),
    /// Anything else: kept as text.
    Text(&'a RawValue),
}

/// `request.oldObject` as the pass over the review left it.
pub enum OldObjectRead<'a> {
    /// `request.kind` came first and names a workload kind: only the digests' map was read.
    Annotations(BTreeMap<String, String>),
    /// Anything else: kept as text, read by the core if the kind turns out to be a workload's.
    Text(&'a RawValue),
}

#[derive(Deserialize, Debug, Clone)]
pub struct GroupVersionKind<'a> {
    #[serde(default, borrow)]
    pub group: Cow<'a, str>,
    #[serde(borrow)]
    pub version: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
}

/// A string of the review, borrowed from the body unless it holds an escape.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

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
            object: match &self.object {
                Some(ObjectIn::Text(raw)) => Some(raw.get()).filter(|o| *o != "null"),
                Some(ObjectIn::Read(_)) | None => None,
            },
            old_object: self.old_object.as_ref().and_then(|old| match old {
                OldObjectRead::Annotations(map) => Some(OldObject::Annotations(map)),
                OldObjectRead::Text(raw) => {
                    Some(raw.get()).filter(|o| *o != "null").map(OldObject::Text)
                }
            }),
        }
    }

    /// The object read in the pass, if it was: [`plan`] decides on it.
    pub fn take_read(&mut self) -> Option<ObjectRead> {
        match self.object.take() {
            Some(ObjectIn::Read(read)) => Some(*read),
            other => {
                self.object = other;
                None
            }
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

/// Parses an AdmissionReview v1 body in one pass (see the module's documentation).
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<'_>, WireError> {
    // JSON is UTF-8, also in the fields skipped unread: checked once, at memory speed.
    let text = std::str::from_utf8(body).map_err(|e| {
        let (line, column) = position(body, e.valid_up_to());
        WireError::Json { line, column, category: "invalid UTF-8" }
    })?;
    // An object that does not read as its kind: read again keeping it as text, so that the
    // core says what is wrong with it, as a warning on an allowed review.
    let review = read_review(text, Objects::ReadInPlace)
        .or_else(|_| read_review(text, Objects::AsText))
        .map_err(|e| match wrong_type(text) {
            // A review of another version may fail as a v1 request: say which it is.
            Err(wrong) => wrong,
            Ok(()) => json_error(e),
        })?;
    check_type(review.api_version, review.kind)?;
    review.request.ok_or(WireError::NoRequest)
}

/// Line and column (from 1, in bytes) of `offset` in `body`, as serde_json counts them.
fn position(body: &[u8], offset: usize) -> (usize, usize) {
    let before = &body[..offset.min(body.len())];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let column = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
    (line, column)
}

fn read_review(body: &str, objects: Objects) -> Result<AdmissionReviewIn<'_>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(body);
    let review = ReviewSeed(objects).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(review)
}

/// The core's plan for a parsed review: from the object read in place when it was, else from
/// the object's text. The image pass is read in place too when the workload's metadata comes
/// before its `spec` (the API server's order) and names images; otherwise its text is found
/// again for it.
pub fn plan(
    request: &Request<'_>,
    read: Option<ObjectRead>,
    body: &[u8],
    settings: &Settings,
) -> Plan {
    match read {
        Some(read) => plan_read_review(request, settings, read, || object_text(body)),
        None => plan_review(request, settings),
    }
}

/// `request.object`'s text in a review body: a second pass, for a workload that tracks images
/// when the pass over the review did not read them (fields in another order).
fn object_text(body: &[u8]) -> Option<&str> {
    #[derive(Deserialize)]
    struct Review<'a> {
        #[serde(borrow)]
        request: Option<Object<'a>>,
    }
    #[derive(Deserialize)]
    struct Object<'a> {
        #[serde(borrow)]
        object: Option<&'a RawValue>,
    }
    let review: Review<'_> = serde_json::from_slice(body).ok()?;
    review.request?.object.map(RawValue::get)
}

/// The envelope alone, when the one pass failed: a wrong `apiVersion` or `kind` is reported
/// as such rather than as whatever in `request` did not parse.
fn wrong_type(body: &str) -> Result<(), WireError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Envelope {
        api_version: Option<String>,
        kind: Option<String>,
    }
    match serde_json::from_str::<Envelope>(body) {
        Ok(envelope) => {
            check_type(envelope.api_version.map(Cow::Owned), envelope.kind.map(Cow::Owned))
        }
        Err(_) => Ok(()),
    }
}

fn check_type(
    api_version: Option<Cow<'_, str>>,
    kind: Option<Cow<'_, str>>,
) -> Result<(), WireError> {
    let (api_version, kind) = (api_version.unwrap_or_default(), kind.unwrap_or_default());
    if api_version != API_VERSION || kind != KIND {
        let (api_version, kind) = (api_version.into_owned(), kind.into_owned());
        return Err(WireError::WrongType { api_version, kind });
    }
    Ok(())
}

/// How the pass reads `request.object`.
#[derive(Clone, Copy)]
enum Objects {
    ReadInPlace,
    AsText,
}

struct AdmissionReviewIn<'a> {
    api_version: Option<Cow<'a, str>>,
    kind: Option<Cow<'a, str>>,
    request: Option<AdmissionRequest<'a>>,
}

struct ReviewSeed(Objects);

impl<'de> DeserializeSeed<'de> for ReviewSeed {
    type Value = AdmissionReviewIn<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ReviewSeed {
    type Value = AdmissionReviewIn<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionReview")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut review = AdmissionReviewIn { api_version: None, kind: None, request: None };
        let (mut api_version, mut kind, mut request) = (false, false, false);
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "apiVersion" => {
                    once(&mut api_version, "apiVersion")?;
                    review.api_version = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0);
                }
                "kind" => {
                    once(&mut kind, "kind")?;
                    review.kind = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0);
                }
                "request" => {
                    once(&mut request, "request")?;
                    review.request = map.next_value_seed(OrNull(RequestVisitor(self.0)))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(review)
    }
}

/// A field seen a second time is an error, as serde's derived readers make it.
fn once<E: serde::de::Error>(seen: &mut bool, field: &'static str) -> Result<(), E> {
    if std::mem::replace(seen, true) { Err(E::duplicate_field(field)) } else { Ok(()) }
}

/// `request`, field by field, so that `object` and `oldObject` are read by what the fields
/// before them said.
struct RequestVisitor(Objects);

impl<'de> DeserializeSeed<'de> for RequestVisitor {
    type Value = AdmissionRequest<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = AdmissionRequest<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionReview request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut uid: Option<Cow<'de, str>> = None;
        let mut kind: Option<GroupVersionKind<'de>> = None;
        let mut operation: Option<Cow<'de, str>> = None;
        let (mut sub_resource, mut name, mut namespace) = (None, None, None);
        let (mut object, mut old_object, mut dry_run) = (None, None, None);
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let field = key.as_str();
            let fresh = |present: bool| {
                if present { Err(A::Error::duplicate_field(known(field))) } else { Ok(()) }
            };
            let workload_kind = || {
                let gvk = kind.as_ref()?;
                WorkloadKind::from_gvk(&gvk.group, &gvk.version, &gvk.kind)
            };
            match field {
                "uid" => {
                    fresh(uid.is_some())?;
                    uid = Some(map.next_value::<Text<'de>>()?.0);
                }
                "kind" => {
                    fresh(kind.is_some())?;
                    kind = Some(map.next_value()?);
                }
                "operation" => {
                    fresh(operation.is_some())?;
                    operation = Some(map.next_value::<Text<'de>>()?.0);
                }
                "subResource" => {
                    fresh(sub_resource.is_some())?;
                    sub_resource = Some(map.next_value::<Option<Text<'de>>>()?.map(|t| t.0));
                }
                "name" => {
                    fresh(name.is_some())?;
                    name = Some(map.next_value::<Option<Text<'de>>>()?.map(|t| t.0));
                }
                "namespace" => {
                    fresh(namespace.is_some())?;
                    namespace = Some(map.next_value::<Option<Text<'de>>>()?.map(|t| t.0));
                }
                "object" => {
                    fresh(object.is_some())?;
                    // Read in place only what the core would read: a review it mutates.
                    let mutated = workload_kind().filter(|workload| {
                        matches!(self.0, Objects::ReadInPlace)
                            && workload.reads_in_one_pass()
                            && sub_resource
                                .as_ref()
                                .is_none_or(|s| s.as_deref().is_none_or(str::is_empty))
                            && operation
                                .as_deref()
                                .and_then(Operation::parse)
                                .is_some_and(|op| workload.mutates(op))
                    });
                    object = Some(match mutated {
                        Some(workload) => Some(ObjectIn::Read(Box::new(
                            map.next_value_seed(workload.object_seed())?,
                        ))),
                        None => map.next_value::<Option<&'de RawValue>>()?.map(ObjectIn::Text),
                    });
                }
                "oldObject" => {
                    fresh(old_object.is_some())?;
                    old_object = Some(match workload_kind() {
                        // `null` is no old object; a present one always has a map, maybe
                        // empty: anything there that is not a map of strings reads as none.
                        Some(workload) => map
                            .next_value_seed(OrNull(workload.old_annotations()))?
                            .map(|found| OldObjectRead::Annotations(found.unwrap_or_default())),
                        None => map.next_value::<Option<&'de RawValue>>()?.map(OldObjectRead::Text),
                    });
                }
                "dryRun" => {
                    fresh(dry_run.is_some())?;
                    dry_run = Some(map.next_value::<Option<bool>>()?);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(AdmissionRequest {
            uid: uid.ok_or_else(|| A::Error::missing_field("uid"))?,
            kind: kind.ok_or_else(|| A::Error::missing_field("kind"))?,
            operation: operation.ok_or_else(|| A::Error::missing_field("operation"))?,
            sub_resource: sub_resource.flatten(),
            name: name.flatten(),
            namespace: namespace.flatten(),
            object: object.flatten(),
            old_object: old_object.flatten(),
            dry_run: dry_run.flatten(),
        })
    }
}

/// serde wants a `'static` field name for its duplicate-field error.
fn known(field: &str) -> &'static str {
    const FIELDS: [&str; 9] = [
        "uid",
        "kind",
        "operation",
        "subResource",
        "name",
        "namespace",
        "object",
        "oldObject",
        "dryRun",
    ];
    FIELDS.into_iter().find(|f| *f == field).unwrap_or("field")
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

/// The AdmissionReview answer for `uid`: the patch as base64 JSON Patch when
/// there is one, no `patch`/`patchType` otherwise. Written straight into one buffer, field by
/// field in the order a derived `Serialize` wrote them (the bytes are the same, tested): the
/// derived writing cost a buffer for the patch, another for its base64, and one per changed
/// object's name.
pub fn encode_response(uid: &str, decision: &Decision) -> Vec<u8> {
    let patch = (!decision.patch.is_empty()).then(|| {
        let mut json = Vec::with_capacity(160 * decision.patch.len());
        // Serialising JSON Patch operations (strings and maps of strings) cannot fail.
        serde_json::to_writer(&mut json, &decision.patch).unwrap_or_default();
        json
    });
    let patch_len = patch.as_ref().map_or(0, |json| json.len().div_ceil(3) * 4);
    let warnings_len: usize = decision.warnings.iter().map(|w| w.len() + 3).sum();
    let mut out = Vec::with_capacity(160 + uid.len() + patch_len + warnings_len);
    out.extend_from_slice(br#"{"apiVersion":""#);
    out.extend_from_slice(API_VERSION.as_bytes());
    out.extend_from_slice(br#"","kind":""#);
    out.extend_from_slice(KIND.as_bytes());
    out.extend_from_slice(br#"","response":{"uid":"#);
    json_string(&mut out, uid);
    out.extend_from_slice(match decision.denied {
        None => br#","allowed":true"#.as_slice(),
        Some(_) => br#","allowed":false"#.as_slice(),
    });
    if let Some(message) = &decision.denied {
        out.extend_from_slice(br#","status":{"code":503,"message":"#);
        json_string(&mut out, message);
        out.push(b'}');
    }
    if let Some(json) = patch {
        out.extend_from_slice(br#","patch":""#);
        let start = out.len();
        out.resize(start + patch_len, 0);
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(&json, &mut out[start..])
            .unwrap_or_default();
        out.truncate(start + written);
        out.extend_from_slice(br#"","patchType":"JSONPatch""#);
    }
    if !decision.warnings.is_empty() {
        out.extend_from_slice(br#","warnings":["#);
        for (i, warning) in decision.warnings.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json_string(&mut out, warning);
        }
        out.push(b']');
    }
    if let Some(changed) = changed(decision) {
        out.extend_from_slice(br#","auditAnnotations":{"changed":"#);
        json_string(&mut out, &changed);
        out.push(b'}');
    }
    out.extend_from_slice(b"}}");
    out
}

/// `changed` of the answer's `auditAnnotations`: every object, workload, class, image and
/// image-env variable whose digest changed value, in that order; `None` when none did.
fn changed(decision: &Decision) -> Option<String> {
    use std::fmt::Write as _;
    let mut changed = String::new();
    let next = |changed: &mut String| {
        if !changed.is_empty() {
            changed.push_str(", ");
        }
    };
    for object in &decision.changed {
        next(&mut changed);
        // Writing into a String cannot fail.
        write!(changed, "{object}").unwrap_or_default();
    }
    for name in decision.changed_workloads.iter().chain(&decision.changed_classes) {
        next(&mut changed);
        changed.push_str(name);
    }
    for container in &decision.changed_images {
        next(&mut changed);
        changed.push_str("image/");
        changed.push_str(container);
    }
    for variable in &decision.changed_env {
        next(&mut changed);
        changed.push_str("image-env/");
        changed.push_str(variable);
    }
    (!changed.is_empty()).then_some(changed)
}

/// `text` as a JSON string, escaped as serde_json escapes it.
fn json_string(out: &mut Vec<u8>, text: &str) {
    // Writing a string into a Vec cannot fail.
    serde_json::to_writer(&mut *out, text).unwrap_or_default();
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
        assert!(core.old_object.is_none());
        assert_eq!(request.dry_run, Some(true));
    }

    /// A review with its fields in the order the API server writes them.
    fn in_api_server_order(
        kind: Value,
        sub_resource: &str,
        operation: &str,
        object: impl fmt::Display,
    ) -> Vec<u8> {
        format!(
            r#"{{"kind": "{KIND}", "apiVersion": "{API_VERSION}", "request": {{"uid": "u", "kind": {kind},
                "resource": {{"group": "apps", "version": "v1", "resource": "deployments"}},
                "subResource": "{sub_resource}", "name": "web", "namespace": "shop", "operation": "{operation}",
                "userInfo": {{"username": "admin", "groups": ["system:masters"]}},
                "object": {object}, "oldObject": null, "dryRun": false, "options": {{}}}}}}"#
        )
        .into_bytes()
    }

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "annotations": {"configsum.dev/images": "c"}},
            "spec": {"template": {"metadata": {"annotations": {"a": "b"}}, "spec": spec}}})
    }

    /// The plan from the object read in place, and the plan from its text.
    fn both_plans(body: &[u8]) -> (bool, String, String) {
        let settings = Settings::default();
        let mut request = parse_review(body).expect("review");
        let read = request.take_read();
        let in_place = read.is_some();
        let planned = format!("{:?}", plan(&request.as_core(), read, body, &settings));
        let text = object_text(body);
        let from_text =
            format!("{:?}", plan_review(&Request { object: text, ..request.as_core() }, &settings));
        (in_place, planned, from_text)
    }

    #[test]
    fn a_review_configsum_mutates_has_its_object_read_in_place() {
        let gvk = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        let spec = json!({"containers": [{"name": "c", "image": "app:1",
            "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "c"}}]});
        let body = in_api_server_order(gvk.clone(), "", "CREATE", deployment(spec.clone()));
        let (in_place, planned, from_text) = both_plans(&body);
        assert!(in_place, "read in the pass over the review");
        assert_eq!(planned, from_text);
        assert!(
            planned.contains("Mutate") && planned.contains("app:1"),
            "images read again: {planned}"
        );

        // Not mutated, or not readable as its kind: kept as text, planned as before. An object
        // of another kind reads in place and is refused as the text would be.
        for (sub_resource, operation, object, read_in_place) in [
            ("status", "UPDATE", deployment(spec.clone()), false),
            ("", "DELETE", deployment(spec.clone()), false),
            ("", "CREATE", deployment(json!({"containers": "not a list"})), false),
            ("", "CREATE", json!({"apiVersion": "v1", "kind": "Pod"}), true),
        ] {
            let body = in_api_server_order(gvk.clone(), sub_resource, operation, &object);
            let (in_place, planned, from_text) = both_plans(&body);
            assert_eq!(in_place, read_in_place, "{operation} {sub_resource} {object}");
            assert_eq!(planned, from_text);
        }
        let wrong_type =
            in_api_server_order(gvk, "", "CREATE", deployment(json!({"containers": 5})));
        let (_, planned, _) = both_plans(&wrong_type);
        assert!(planned.contains("does not parse (line 1, column"), "{planned}");
    }

    #[test]
    fn the_image_pass_rides_in_the_pass_over_the_review_when_metadata_comes_first() {
        let gvk = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        let containers = r#"[{"name": "c", "image": "app:1", "imagePullPolicy": "Always", "env": [
            {"name": "DIGEST", "value": "old"}, {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]"#;
        let pod_spec = format!(
            r#"{{"serviceAccountName": "web", "imagePullSecrets": [{{"name": "reg"}}], "containers": {containers}}}"#
        );
        let template = |annotations: &str| {
            format!(r#"{{"metadata": {{"annotations": {annotations}}}, "spec": {pod_spec}}}"#)
        };
        let plain = template("{}");
        let metadata =
            |annotations: &str| format!(r#"{{"name": "web", "annotations": {annotations}}}"#);
        let first = |annotations: &str, template: &str| {
            format!(
                r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}, "spec": {{"template": {template}}}}}"#,
                metadata(annotations)
            )
        };
        let images = r#"{"configsum.dev/images": "c"}"#;
        let image_env = r#"{"configsum.dev/image-env": "c/DIGEST=app:1"}"#;
        // (object, whether its text is read again for the image pass)
        let cases = [
            (first(images, &plain), false),
            (first(image_env, &plain), false),
            (first("{}", &plain), false),
            // `spec` before `metadata`: nothing said to read the images in the pass.
            (
                format!(
                    r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "spec": {{"template": {plain}}}, "metadata": {}}}"#,
                    metadata(images)
                ),
                true,
            ),
            // Digests left by an earlier tracking, on the template only.
            (first("{}", &template(r#"{"image.configsum.dev/c": "sha256:1"}"#)), true),
        ];
        let settings = Settings::default();
        for (object, read_again) in cases {
            let body = in_api_server_order(gvk.clone(), "", "CREATE", &object);
            let mut request = parse_review(&body).expect("review");
            let read = request.take_read().expect("read in place");
            let again = std::cell::Cell::new(false);
            let planned =
                crate::core::plan_read_review(&request.as_core(), &settings, read, || {
                    again.set(true);
                    object_text(&body)
                });
            let planned = format!("{planned:?}");
            assert_eq!(again.get(), read_again, "{object}");
            let from_text = object_text(&body);
            let from_text =
                plan_review(&Request { object: from_text, ..request.as_core() }, &settings);
            assert_eq!(planned, format!("{from_text:?}"), "{object}");
        }
    }

    fn old_annotations(request: &AdmissionRequest<'_>) -> Option<BTreeMap<String, String>> {
        match request.as_core().old_object? {
            OldObject::Annotations(map) => Some(map.clone()),
            OldObject::Text(text) => {
                let kind = WorkloadKind::from_gvk("apps", "v1", "Deployment")?;
                Some(kind.annotations_of(text))
            }
        }
    }

    #[test]
    fn reads_only_the_digests_map_of_the_old_object_in_the_same_pass() {
        let old = json!({"metadata": {"annotations": {"outer": "x"}}, "spec": {"template": {
            "metadata": {"annotations": {"deployment.configsum.dev/db": "sha256:1"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let gvk = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        let expected = BTreeMap::from([("deployment.configsum.dev/db".into(), "sha256:1".into())]);
        // The API server sends `kind` before `oldObject`: only the map is read and kept.
        let b = format!(
            r#"{{"apiVersion": "{API_VERSION}", "kind": "{KIND}", "request": {{"uid": "u", "kind": {gvk},
                "operation": "UPDATE", "object": {{}}, "oldObject": {old}}}}}"#
        );
        let request = parse_review(b.as_bytes()).expect("review");
        assert!(matches!(request.old_object, Some(OldObjectRead::Annotations(_))));
        assert_eq!(old_annotations(&request), Some(expected.clone()));
        // In another order the text is kept, and the core reads the same map from it.
        let b = format!(
            r#"{{"request": {{"oldObject": {old}, "uid": "u", "operation": "UPDATE", "kind": {gvk}}},
                "kind": "{KIND}", "apiVersion": "{API_VERSION}"}}"#
        );
        let request = parse_review(b.as_bytes()).expect("review");
        assert!(matches!(request.old_object, Some(OldObjectRead::Text(_))));
        assert_eq!(old_annotations(&request), Some(expected));
    }

    #[test]
    fn an_old_object_of_any_shape_parses_and_has_no_annotations() {
        let shapes = [
            json!({"spec": {"template": {"metadata": {"annotations": 5}}}}),
            json!({"spec": {"template": {"metadata": {"annotations": {"a": "b", "c": 1}}}}}),
            json!({"spec": {"template": {"metadata": ["x", {"annotations": {"a": "b"}}]}}}),
            json!({"spec": "template"}),
            json!([1, 2, {"spec": {}}]),
            json!({"spec": {"template": {"metadata": {"annotations": {"a": "x".repeat(300 * 1024)}}}}}),
        ];
        for old in shapes {
            let b = body(json!({"apiVersion": API_VERSION, "kind": KIND, "request": {
                "uid": "u", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "operation": "UPDATE", "object": {}, "oldObject": old}}));
            let request = parse_review(&b).unwrap_or_else(|e| panic!("{old}: {e}"));
            assert_eq!(old_annotations(&request), Some(BTreeMap::new()), "{old}");
        }
        let null = body(json!({"apiVersion": API_VERSION, "kind": KIND, "request": {
            "uid": "u", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "operation": "UPDATE", "oldObject": null}}));
        assert!(parse_review(&null).expect("review").as_core().old_object.is_none());
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
        let twice = format!(
            r#"{{"apiVersion": "{API_VERSION}", "kind": "{KIND}", "request": {{"uid": "a", "uid": "b",
                "kind": {{"version": "v1", "kind": "Pod"}}, "operation": "CREATE"}}}}"#
        );
        assert!(matches!(parse_review(twice.as_bytes()), Err(WireError::Json { .. })));
        // A byte that is not UTF-8 is refused wherever it is, also in a field never read.
        let mut not_utf8 = format!(
            "{{\"apiVersion\": \"{API_VERSION}\", \"kind\": \"{KIND}\",\n \"request\": {{\"uid\": \"u\", \"userInfo\": {{\"username\": \"ab\"}},
                \"kind\": {{\"version\": \"v1\", \"kind\": \"Pod\"}}, \"operation\": \"CREATE\"}}}}"
        )
        .into_bytes();
        let at = not_utf8.windows(2).position(|w| w == b"ab").expect("ab");
        not_utf8[at] = 0xf8;
        let error = parse_review(&not_utf8).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("line 2, column") && error.contains("invalid UTF-8"), "{error}");
        // The request is read with the envelope: one of another version that does not parse
        // as v1 is still reported as the wrong version.
        let old_version = format!(
            r#"{{"request": {{"uid": 7}}, "apiVersion": "admission.k8s.io/v1beta1", "kind": "{KIND}"}}"#
        );
        assert!(matches!(
            parse_review(old_version.as_bytes()),
            Err(WireError::WrongType { api_version, .. }) if api_version == "admission.k8s.io/v1beta1"
        ));
    }

    #[test]
    fn errors_never_quote_the_body() {
        let b = br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7, "x": "hunter2"}}"#;
        let message = parse_review(b).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(!message.contains("hunter2") && !message.contains('7'), "{message}");
    }

    /// The derived encoder the answer was written with before: the reference for its bytes.
    mod derived {
        use super::super::{API_VERSION, KIND};
        use crate::core::Decision;
        use base64::Engine as _;
        use serde::Serialize;
        use std::collections::BTreeMap;

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
                || !decision.changed_classes.is_empty()
                || !decision.changed_images.is_empty()
                || !decision.changed_env.is_empty()
            {
                let objects = decision.changed.iter().map(ToString::to_string);
                let objects = objects.chain(decision.changed_workloads.iter().cloned());
                let objects = objects.chain(decision.changed_classes.iter().cloned());
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
    }

    #[test]
    fn the_answer_is_written_byte_for_byte_as_the_derived_encoder_wrote_it() {
        let patch: Vec<json_patch::PatchOperation> = serde_json::from_value(json!([
            {"op": "add", "path": "/spec/template/metadata/annotations", "value": {}},
            {"op": "add", "path": "/spec/template/metadata/annotations/configmap.configsum.dev~1a", "value": "sha256:1"},
            {"op": "remove", "path": "/spec/template/metadata/annotations/secret.configsum.dev~1b"},
            {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "app@sha256:2"}]))
        .expect("patch");
        let full = Decision {
            patch: patch.clone(),
            warnings: vec!["w \"quoted\" \u{1}\n".into(), "é ünïcode".into()],
            changed: vec![
                crate::core::ObjectRef::config_map("a"),
                crate::core::ObjectRef::secret("b"),
            ],
            changed_images: vec!["app".into()],
            changed_env: vec!["api/INGESTOR_IMAGE_DIGEST".into()],
            changed_workloads: vec!["deployment/db".into()],
            changed_classes: vec!["secretproviderclass/vault".into()],
            ..Decision::default()
        };
        let decisions = [
            Decision::default(),
            full,
            Decision { denied: Some("no \"way\"".into()), ..Decision::default() },
            Decision { warnings: vec!["only".into()], ..Decision::default() },
            Decision { changed_images: vec!["x".into()], ..Decision::default() },
            Decision { patch: patch[..1].to_vec(), ..Decision::default() },
            Decision { patch: patch[..2].to_vec(), ..Decision::default() },
        ];
        for uid in ["u", "705ab4f5-6393-11e8-b7cc-42010a800002", "\"\\\u{7f}"] {
            for decision in &decisions {
                let ours = encode_response(uid, decision);
                let theirs = derived::encode_response(uid, decision);
                assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&theirs));
            }
        }
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
            changed_classes: Vec::new(),
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
