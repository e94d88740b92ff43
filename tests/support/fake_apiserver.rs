//! A fake Kubernetes API server for tests and benchmarks: plain HTTP on
//! loopback, in process, holding objects in memory.
//!
//! A fake is only as good as its fidelity. This one once put `kind` on list
//! items, which the real API server never does, and that hid a controller
//! that ignored every pre-existing workload. It now aims to be at least as
//! strict as the real kube-apiserver: where it deviates, it refuses or omits
//! rather than accepts or adds. Each behaviour below names its upstream
//! reference; `tests/fake_apiserver.rs` has one test per behaviour, and
//! `tests/control_plane/differential.rs` sends one script of requests to this
//! fake and to a real kube-apiserver v1.37.2 and fails where they answer
//! differently: behaviours marked **[compared]** are checked there (what a
//! real server cannot show on demand is marked *not compared*).
//!
//! # Real behaviours reproduced
//!
//! - **LIST items carry no `apiVersion`/`kind`**; the list itself is
//!   `<Kind>List` with the group/version (`SecretList`, `v1`;
//!   `DeploymentList`, `apps/v1`) and `metadata.resourceVersion`
//!   **[compared]**. GET answers and watch events carry them **[compared]**.
//!   kubernetes/kubernetes#3030, #63676, #98925 and the list examples in
//!   <https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>.
//!   A custom resource's last list page has `continue: ""` (its list is
//!   unstructured) **[compared]**. Stored objects lose what Go's `omitempty`
//!   drops: empty or null metadata fields (`labels: {}`) and a ConfigMap's or
//!   Secret's empty `data` **[compared]**.
//! - **Metadata-only answers** for `Accept:
//!   application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`:
//!   GET and WATCH objects are `PartialObjectMetadata` (`meta.k8s.io/v1`),
//!   LIST is a `PartialObjectMetadataList` **[compared]**; asking for the list
//!   form on a built-in object (or the single form on a list) is 406
//!   NotAcceptable naming the Go type (`(*core.ConfigMapList)`) **[compared]**,
//!   as in `asPartialObjectMetadata[List]` in
//!   kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/response.go`.
//!   Other alternatives (protobuf, YAML, CBOR, `as=Table`) are skipped; if
//!   none is left the answer is 406 with the real message **[compared]**.
//! - **Chunked lists**: `limit` + `continue`; every page is served from the
//!   snapshot of the first page (the `resourceVersion` is the same on every
//!   page, and writes made in between are not seen), `metadata.continue` on
//!   all but the last page **[compared]**; `resourceVersion` together with
//!   `continue` is 400 **[compared]**; a token whose snapshot has left the
//!   retained history answers 410 Expired (*not compared*: it needs an etcd
//!   compaction). The token is the real format **[compared]**: base64 of
//!   `{"v":"meta.k8s.io/v1","rv":N,"start":"/<name>\u0000"}`, the start key
//!   relative to the listed prefix (`/<namespace>/<name>\u0000` across all
//!   namespaces; `storage.EncodeContinue`).
//!   <https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks>.
//!   `resourceVersionMatch=Exact` lists at an older resourceVersion
//!   **[compared]**; `resourceVersion=N` newer than the server waits 3 s and
//!   then answers 504 "Timeout: Too large resource version" **[compared]**.
//!   Invalid list options (`resourceVersionMatch` without `resourceVersion`,
//!   an unsupported one, `Exact` at 0, `sendInitialEvents` on a LIST) are 422
//!   `ListOptions.meta.k8s.io "" is invalid` with causes **[compared]**
//!   (`ValidateListOptions` in `staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation`).
//! - **Selectors**: label selectors `k=v`, `k==v`, `k!=v`, `k`, `!k`,
//!   `k in (a,b)`, `k notin (a,b)`, several terms **[compared]** (a malformed
//!   one is 400 **[compared]**, its message not reproduced); field selectors
//!   `metadata.name` and `metadata.namespace` (`=`, `==`, `!=`)
//!   **[compared]**; any other field is 400 `"f" is not a known field
//!   selector: only "metadata.name", "metadata.namespace"` **[compared]**,
//!   also for kinds that have more field labels (stricter).
//! - **WATCH** (`watch=true` or `watch=1` on a collection; on an object's path
//!   it is a plain GET, as on the real server **[compared]**): from
//!   `resourceVersion=N`, every change after N in order, each with the object
//!   as it was right after that change, with `apiVersion`/`kind`; a change
//!   made between a LIST and the WATCH from its resourceVersion is delivered
//!   **[compared]**. `resourceVersion` unset or `0` is a watch-list (the
//!   WatchList feature, on by default in 1.37, defaults `sendInitialEvents`):
//!   synthetic ADDED events for the current objects, then changes
//!   **[compared]**. An object that stops matching the selector leaves as
//!   DELETED (its previous state at the new resourceVersion), one that starts
//!   matching arrives as ADDED (`cacheWatcher.convertToWatchEvent` in
//!   `staging/src/k8s.io/apiserver/pkg/storage/cacher`) **[compared]**. A
//!   watch from a resourceVersion the server has not reached waits for it, no
//!   error **[compared]**. History is bounded (`set_history_limit`, default
//!   10,000 changes; `compact()` drops it all): a watch from an older
//!   resourceVersion answers HTTP 200 and one `{"type":"ERROR","object":<Status
//!   410 Expired "too old resource version: N (M)">}` and ends **[compared]**
//!   (`newErrWatcher` in `cacher.go`: "once we have passed
//!   authn/authz/admission ... errors must fail with a watch event of type
//!   ERROR"; the message is `watch_cache.go`'s). A watcher that falls behind
//!   the window gets the same. `expire_watches(plural)` ends open watches that
//!   way (as after etcd compaction). `allowWatchBookmarks=true`: BOOKMARK
//!   events whose object has the watched kind and only
//!   `metadata.resourceVersion` **[compared]**, never ahead of an event not
//!   yet sent
//!   (<https://kubernetes.io/docs/reference/using-api/api-concepts/#watch-bookmarks>).
//!   `sendInitialEvents=true` (streaming lists, and the watch-list default
//!   above) with `resourceVersionMatch=NotOlderThan`: the initial ADDED
//!   events, then, if bookmarks are allowed, a BOOKMARK annotated
//!   `k8s.io/initial-events-end: "true"` **[compared]**; without
//!   `resourceVersionMatch=NotOlderThan` it is 422, and so is
//!   `resourceVersionMatch` without `sendInitialEvents` **[compared]**.
//!   `timeoutSeconds` ends the stream cleanly (default 1,800 s) **[compared]**.
//! - **Writes**: POST (201 **[compared]**; 409 AlreadyExists **[compared]**;
//!   `generateName` with the real alphabet **[compared]**; a body
//!   `resourceVersion` is the real server's reason-less 500 **[compared]**;
//!   uid and creationTimestamp are the server's **[compared]**; no name is 422
//!   `ConfigMap "" is invalid: metadata.name: Required value` **[compared]**),
//!   PUT and PATCH with a stale `metadata.resourceVersion` answer 409 Conflict
//!   **[compared]**; PATCH takes `application/merge-patch+json`,
//!   `application/json-patch+json` (RFC 6902, json-patch crate; a failing
//!   operation is the real server's bare 422 "the server rejected our request
//!   due to an error in our request") and
//!   `application/strategic-merge-patch+json` (applied as a merge patch:
//!   lists are replaced, not merged by key) **[compared]**; for the custom
//!   resource `rollouts`, as for every CRD, strategic merge and other types
//!   are 415 listing the accepted types **[compared]**; for built-in kinds
//!   other types are go-restful's 415 "415: Unsupported Media Type"
//!   **[compared]**. POST and PUT bodies must be JSON (or have no
//!   Content-Type), else 415 with the real message **[compared]**. DELETE
//!   with optional `preconditions` (the UID checked first, then the
//!   resourceVersion; the Conflict names the kind, `ConfigMap "two"`), answered
//!   with a `Success` Status **[compared]**. A write that changes nothing does
//!   not bump the resourceVersion and sends no watch event **[compared]**
//!   (`GuaranteedUpdate` short-circuits when the encoded object is unchanged,
//!   `staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go`). The object
//!   name and namespace in a body must match the URL (400) **[compared]**.
//! - **Errors** are `Status` bodies with the real messages, reasons and
//!   details **[compared]**: `secrets "db" not found`, `Operation cannot be
//!   fulfilled on deployments.apps "web": the object has been modified; please
//!   apply your changes to the latest version and try again`, `... already
//!   exists`, Forbidden, Expired, Timeout, UnsupportedMediaType,
//!   NotAcceptable, MethodNotAllowed, BadRequest, Invalid; injected ones name
//!   the fault (*not compared*). 429 carries `Retry-After: 1` (*not
//!   compared*).
//! - **Authentication**: a request without `Authorization: Bearer <token>`
//!   (none, another scheme, an empty token) is `system:anonymous`, as with the
//!   real server's default `--anonymous-auth`: `/version` answers 200, every
//!   other path 403 Forbidden with RBAC's message (`secrets is forbidden: User
//!   "system:anonymous" cannot list resource "secrets" in API group "" at the
//!   cluster scope`; `forbidden: User "system:anonymous" cannot get path
//!   "/api"`) **[compared]**.
//! - **Discovery**: `/api`, `/apis`, `/api/v1` and `/apis/<group>/<version>`
//!   list what is served, a subset of the real server's with the same names,
//!   kinds, scopes and no verb it lacks; `/api/v1` has no `apiVersion`
//!   **[compared]**. An unserved resource of a served group is a 404 Status
//!   ("the server could not find the requested resource"); an unserved group
//!   or version, and everything under it, is Go's plain-text "404 page not
//!   found" **[compared]**. Custom resources — `argoproj.io/v1alpha1`
//!   `rollouts`, an OpenKruise-shaped `apps.kruise.io/v1alpha1` `clonesets`, a
//!   harbor-operator-shaped `goharbor.io/v1beta1` `harborclusters`, a
//!   cluster-scoped `example.com/v1` `widgets` — exist only
//!   after `serve_crd()` (`serve_rollouts()`), as when their CRD is installed,
//!   in discovery as in paths **[compared]**; their list items carry no `kind`
//!   (stricter than the real server, which keeps it on custom resources'), and
//!   their `metadata.generation` starts at 1 and moves on `spec` changes only,
//!   never on metadata ones **[compared]**.
//! - **`metadata.generation` of built-in kinds** with a `spec` that has one
//!   (Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs,
//!   Pods): 1 at creation, one more for each write that changes `spec` — and
//!   for a Deployment, its annotations too — never for labels or `status`;
//!   the one a client sends is ignored (`PrepareForCreate`/`PrepareForUpdate`
//!   of each `pkg/registry/<group>/<kind>/strategy.go`, `rest.BeforeUpdate`).
//!   Namespaces, ConfigMaps, Secrets, ServiceAccounts, Events and Leases have
//!   none. A Deployment's is **[compared]**; the others' *not compared*. An
//!   in-process `put` keeps a generation the object brings (a test staging
//!   history), as no client can.
//!
//! # Deliberately not reproduced
//!
//! No admission (webhooks, NamespaceLifecycle: objects may be created in a
//! namespace that does not exist), no defaulting, no validation of fields
//! beyond name/namespace/type, no `managedFields`, no
//! server-side apply (`application/apply-patch+yaml` is 415 with a message of
//! this fake's own), no strategic-merge list semantics, no finalizers or
//! graceful deletion, no subresources (`/status`, `/scale`: 404), no
//! `/apis/<group>` documents, no legacy `/api/v1/watch/...` paths, no health
//! paths (`/healthz`, `/livez`, `/readyz`: 404, and 403 without a token, where
//! the real server answers 200 `ok`), JSON only (YAML and protobuf bodies are
//! 415, those `Accept`s 406), no `remainingItemCount`, no `kubectl`-style
//! Table output, unconditional PUT allowed for every kind.
//!
//! No authentication or authorization of tokens: any non-empty bearer token
//! is a user who may do anything, where the real server answers 401
//! `Unauthorized` on every path, `/version` included, for a token it cannot
//! verify (tests inject 401 and 403 per token with `fault_for`).
//!
//! Stricter than the real server, checked by the differential test: a
//! `resourceVersion=0` LIST honours `limit` (v1.37.2 still serves it whole
//! from the watch cache, without a continue token). Metadata-only list items
//! carry no `apiVersion`/`kind` here, where the real server sets
//! `meta.k8s.io/v1 PartialObjectMetadata` on each (response.go above), and
//! custom resources' list items carry theirs on a real server, never here. A
//! watch asking for the `PartialObjectMetadataList` form is 406 here; the
//! real server answers 200 and sends nothing. A custom resource's GET in the
//! list form is 406 here, the real server's 500 "content is not a list".
//! Messages that quote Go's parsers are not reproduced, only their status
//! and reason: a body of another kind or version, a malformed label selector,
//! an unparsable `limit` or `resourceVersion`, a garbage continue token, a
//! JSON patch that is not a list.
//!
//! Bookmarks come every second (`set_bookmark_interval`); the real server's
//! about once a minute, and two seconds before a watch's timeout once the
//! watched resource has moved on (the differential test compares their shape,
//! not their timing). Where a real component could run instead (a kind cluster
//! in `make e2e`, the control plane of `tests/control_plane/`), it is the
//! reference; this fake is what runs for faults.
//!
//! # Test controls
//!
//! Objects are changed in process (`put*`, `set_labels`, `delete*`); faults
//! (latency, status codes, dropped connections, hangs) apply per path and
//! optionally per bearer token and method; `interleave_write` makes a
//! concurrent writer; requests are counted and logged.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use serde::ser::SerializeMap as _;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch};

type Body = BoxBody<Bytes, std::io::Error>;

/// How long a `Fault::Hang` holds a request before giving up itself.
const HANG_CAP: Duration = Duration::from_secs(600);
/// How long a request for a resourceVersion newer than the server's waits.
const TOO_LARGE_WAIT: Duration = Duration::from_secs(3);
/// Watch length when the client sets no `timeoutSeconds`.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer normally after this long.
    Delay(Duration),
    /// Answer at once from the objects as they are, but deliver the answer only after
    /// this long: a read the API server served before a later write, still on its way.
    Late(Duration),
    /// Answer with this status and a `Status` body.
    Status(u16),
    /// Close the connection without an answer.
    Drop,
    /// Accept the request and never answer (until the client gives up; at
    /// most 10 minutes, then 504).
    Hang,
}

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    /// When it arrived.
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// The raw query string (percent-encoded), empty if none.
    pub query: String,
    /// The bearer token, empty if none.
    pub token: String,
    /// The `Content-Type` sent, empty if none (which patch a PATCH is).
    pub content_type: String,
    /// The status sent (for watches, the one at the start); 0 while a
    /// request hangs and for dropped connections.
    pub status: u16,
}

/// A served resource type.
#[derive(Debug)]
struct Resource {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    /// Served through a CustomResourceDefinition: only after `serve_crd`.
    custom: bool,
}

impl Resource {
    fn prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `secrets`, `deployments.apps`: how errors name the resource.
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    fn details(&self, name: &str) -> Value {
        let mut details = json!({"name": name, "kind": self.plural});
        if !self.group.is_empty() {
            details["group"] = json!(self.group);
        }
        details
    }

    /// `ConfigMap`, `Deployment.apps`: how Invalid errors and failed delete preconditions name
    /// the type (a GroupKind where other errors have a GroupResource).
    fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_owned()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// The details of an error that names the type by kind: `name` left out when empty.
    fn kind_details(&self, name: &str) -> Value {
        let mut details = json!({"kind": self.kind});
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        if !self.group.is_empty() {
            details["group"] = json!(self.group);
        }
        details
    }

    /// The Go type the real server names in a 406 for the wrong metadata-only form:
    /// `*core.ConfigMapList`, `*apps.Deployment`, `*unstructured.UnstructuredList`.
    fn go_type(&self, list: bool) -> String {
        let suffix = if list { "List" } else { "" };
        if self.custom {
            return format!("*unstructured.Unstructured{suffix}");
        }
        // events.k8s.io is served from the core Event storage.
        let package = match self.group {
            "" | "events.k8s.io" => "core",
            "coordination.k8s.io" => "coordination",
            group => group,
        };
        format!("*{package}.{}{suffix}", self.kind)
    }
}

const fn resource(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Resource {
    Resource { group, version, plural, singular, kind, namespaced, custom: false }
}

/// Everything this fake serves (index = collection id).
const RESOURCES: &[Resource] = &[
    resource("", "v1", "namespaces", "namespace", "Namespace", false),
    resource("", "v1", "configmaps", "configmap", "ConfigMap", true),
    resource("", "v1", "secrets", "secret", "Secret", true),
    resource("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true),
    resource("", "v1", "events", "event", "Event", true),
    resource("", "v1", "pods", "pod", "Pod", true),
    resource("apps", "v1", "deployments", "deployment", "Deployment", true),
    resource("apps", "v1", "statefulsets", "statefulset", "StatefulSet", true),
    resource("apps", "v1", "daemonsets", "daemonset", "DaemonSet", true),
    resource("apps", "v1", "replicasets", "replicaset", "ReplicaSet", true),
    resource("batch", "v1", "jobs", "job", "Job", true),
    resource("batch", "v1", "cronjobs", "cronjob", "CronJob", true),
    resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", true),
    resource("events.k8s.io", "v1", "events", "event", "Event", true),
    custom_resource("argoproj.io", "v1alpha1", "rollouts", "rollout", "Rollout"),
    custom_resource("apps.kruise.io", "v1alpha1", "clonesets", "cloneset", "CloneSet"),
    custom_resource("goharbor.io", "v1beta1", "harborclusters", "harborcluster", "HarborCluster"),
    // Cluster-scoped: a kind configsum must refuse when it is declared.
    Resource {
        group: "example.com",
        version: "v1",
        plural: "widgets",
        singular: "widget",
        kind: "Widget",
        namespaced: false,
        custom: true,
    },
];

const fn custom_resource(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
) -> Resource {
    Resource { group, version, plural, singular, kind, namespaced: true, custom: true }
}

/// Whether an update moves an object's `metadata.generation` on, `(stored, new)`.
type GenerationRule = fn(&Value, &Value) -> bool;

/// The kinds whose `metadata.generation` the server keeps, and what moves it on: each
/// registry strategy's `PrepareForUpdate` in kubernetes/kubernetes `pkg/registry/...`. A
/// Deployment's annotations count too ("annotations are copied from deployments to their
/// replica sets"); status and other metadata never. Pods have one since v1.33
/// (`PodObservedGenerationTracking`). Namespaces, ConfigMaps, Secrets, ServiceAccounts,
/// Events and Leases have none.
fn generation_rule(resource: &Resource) -> Option<GenerationRule> {
    fn spec(prev: &Value, new: &Value) -> bool {
        prev.get("spec") != new.get("spec")
    }
    fn spec_or_annotations(prev: &Value, new: &Value) -> bool {
        spec(prev, new) || prev["metadata"].get("annotations") != new["metadata"].get("annotations")
    }
    match (resource.group, resource.plural) {
        _ if resource.custom => Some(spec),
        ("apps", "deployments") => Some(spec_or_annotations),
        ("apps", "statefulsets" | "daemonsets" | "replicasets")
        | ("batch", "jobs" | "cronjobs")
        | ("", "pods") => Some(spec),
        _ => None,
    }
}

fn find_resource(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES.iter().position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// A resource path: which collection, the namespace (for namespaced
/// collections and their objects) and the name (objects only).
#[derive(Debug)]
struct Target {
    res: usize,
    namespace: Option<String>,
    name: Option<String>,
}

impl Target {
    fn resource(&self) -> &'static Resource {
        &RESOURCES[self.res]
    }

    fn key(&self) -> ObjKey {
        (self.namespace.clone().unwrap_or_default(), self.name.clone().unwrap_or_default())
    }
}

/// `(group, version, rest)` of an API path.
fn split_api_path(path: &str) -> Option<(&str, &str, Vec<&str>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["api", version, rest @ ..] => Some(("", version, rest.to_vec())),
        ["apis", group, version, rest @ ..] => Some((group, version, rest.to_vec())),
        _ => None,
    }
}

fn parse_target(path: &str) -> Option<Target> {
    let (group, version, rest) = split_api_path(path)?;
    let (plural, namespace, name, namespaced_form) = match rest.as_slice() {
        ["namespaces", ns, plural] => (*plural, Some(ns.to_string()), None, true),
        ["namespaces", ns, plural, name] => {
            (*plural, Some(ns.to_string()), Some(name.to_string()), true)
        }
        [plural] => (*plural, None, None, false),
        [plural, name] => (*plural, None, Some(name.to_string()), false),
        _ => return None,
    };
    let res = find_resource(group, version, plural)?;
    let namespaced = RESOURCES[res].namespaced;
    // `/namespaces/<ns>/<plural>` only for namespaced kinds; a namespaced
    // object always needs its namespace.
    if (namespaced_form && !namespaced) || (namespaced && !namespaced_form && name.is_some()) {
        return None;
    }
    if namespace.as_deref().is_some_and(str::is_empty) || name.as_deref().is_some_and(str::is_empty)
    {
        return None;
    }
    Some(Target { res, namespace, name })
}

/// What the real server's `RequestInfoFactory.NewRequestInfo`
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`) makes of a request, as
/// far as authorization messages need it.
#[derive(Debug)]
struct RequestInfo {
    path: String,
    verb: String,
    /// `(group, resource)`; `None` for a non-resource request (`/version`, `/api`, `/apis/apps`).
    resource: Option<ResourceInfo>,
    subresource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

#[derive(Debug)]
struct ResourceInfo {
    group: String,
    name: String,
}

fn request_info(method: &str, path: &str, query: &HashMap<String, String>) -> RequestInfo {
    let mut info = RequestInfo {
        path: path.to_owned(),
        verb: method.to_ascii_lowercase(),
        resource: None,
        subresource: None,
        namespace: None,
        name: None,
    };
    let trimmed = path.trim_matches('/');
    let parts: Vec<&str> =
        if trimmed.is_empty() { Vec::new() } else { trimmed.split('/').collect() };
    let (group, rest) = match parts.as_slice() {
        ["api", rest @ ..] if rest.len() >= 2 => ("", rest),
        ["apis", group, rest @ ..] if rest.len() >= 2 => (*group, rest),
        _ => return info,
    };
    // rest[0] is the version.
    let mut rest = &rest[1..];
    if let [verb @ ("watch" | "proxy"), more @ ..] = rest {
        if more.is_empty() {
            return info;
        }
        info.verb = (*verb).to_owned();
        rest = more;
    } else {
        info.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_owned();
    }
    if let ["namespaces", namespace, more @ ..] = rest {
        info.namespace = Some((*namespace).to_owned());
        if !more.is_empty() && !matches!(more[0], "status" | "finalize") {
            rest = more;
        }
    }
    if rest.len() >= 3 && info.verb != "proxy" {
        info.subresource = Some(rest[2].to_owned());
    }
    if rest.len() >= 2 {
        info.name = Some(rest[1].to_owned());
    }
    info.resource = Some(ResourceInfo { group: group.to_owned(), name: rest[0].to_owned() });
    if info.name.is_none() && info.verb == "get" {
        let watching = query.get("watch").is_some_and(|w| !matches!(w.as_str(), "false" | "0"));
        info.verb = if watching { "watch" } else { "list" }.to_owned();
        // A list or watch of one object by name is authorized as for that object.
        let exact = query.get("fieldSelector").and_then(|selector| {
            selector.split(',').find_map(|term| {
                let (field, value) = term.split_once("==").or_else(|| term.split_once('='))?;
                (field.trim() == "metadata.name").then(|| value.trim())
            })
        });
        if let Some(name) =
            exact.filter(|n| !matches!(*n, "" | "." | "..") && !n.contains(['/', '%']))
        {
            info.name = Some(name.to_owned());
        }
    }
    if info.name.is_none() && info.verb == "delete" {
        info.verb = "deletecollection".to_owned();
    }
    info
}

/// `(namespace or "", name)`.
type ObjKey = (String, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One change in the history: the object right after it (for a deletion,
/// its last state at the deletion's resourceVersion) and right before it.
#[derive(Debug)]
struct Change {
    rv: u64,
    res: usize,
    key: ObjKey,
    kind: ChangeKind,
    object: Arc<Stored>,
    prev: Option<Arc<Stored>>,
}

/// An object as stored: its compact JSON, from which every answer is cut, and where its
/// `metadata` lies in it. As `Value` trees a million Helm-managed Secrets took several GB;
/// their text is a fraction of that, and a metadata-only list page copies each item's
/// `metadata` without reading (or building a tree of) the rest, however large its data.
#[derive(Debug)]
struct Stored {
    text: Box<str>,
    metadata: std::ops::Range<usize>,
}

impl Stored {
    /// `object`'s text, as `serde_json` writes it (a map's keys sorted).
    fn new(object: &Value) -> Arc<Stored> {
        let mut text = Vec::new();
        let mut metadata = 0..0;
        match object.as_object() {
            Some(fields) => {
                text.push(b'{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        text.push(b',');
                    }
                    let _ = serde_json::to_writer(&mut text, key);
                    text.push(b':');
                    let start = text.len();
                    let _ = serde_json::to_writer(&mut text, value);
                    if key == "metadata" {
                        metadata = start..text.len();
                    }
                }
                text.push(b'}');
            }
            None => {
                let _ = serde_json::to_writer(&mut text, object);
            }
        }
        let text = String::from_utf8(text).unwrap_or_default().into_boxed_str();
        Arc::new(Stored { text, metadata })
    }

    /// The object as a tree, to read or change.
    fn tree(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_default()
    }

    /// The whole object, as stored.
    fn raw(&self) -> Option<&RawValue> {
        serde_json::from_str(&self.text).ok()
    }

    /// Its top-level fields, in the order they were stored (a `Value`'s map is sorted).
    fn fields(&self) -> BTreeMap<String, &RawValue> {
        serde_json::from_str(&self.text).unwrap_or_default()
    }

    /// Its `metadata`, as stored.
    fn metadata(&self) -> Option<&RawValue> {
        serde_json::from_str(self.text.get(self.metadata.clone())?).ok()
    }
}

#[derive(Clone, Debug)]
struct FaultRule {
    token: Option<String>,
    method: Option<String>,
    path: String,
    fault: Fault,
}

impl FaultRule {
    fn specificity(&self) -> usize {
        usize::from(self.token.is_some()) + usize::from(self.method.is_some())
    }
}

struct State {
    /// Objects by collection (index into RESOURCES), then (namespace, name).
    objects: Vec<BTreeMap<ObjKey, Arc<Stored>>>,
    resource_version: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Watches and continue tokens from a resourceVersion below this are expired.
    floor: u64,
    /// The current resourceVersion, for watches to wait on.
    notify: watch::Sender<u64>,
    faults: Vec<FaultRule>,
    counts: HashMap<String, usize>,
    /// Method + path counts, e.g. "PATCH /apis/apps/v1/namespaces/ns/deployments/web".
    calls: HashMap<String, usize>,
    /// Merge patches applied just before the next PATCH of a path (a concurrent writer).
    interleaved: HashMap<String, Value>,
    log: Vec<Logged>,
    /// Entries dropped by `clear_log`, so that in-flight requests find theirs.
    log_base: usize,
    /// The custom resources served, by plural (their CRD is "installed").
    crds: BTreeSet<&'static str>,
    bookmark_every: Duration,
    serial: u64,
    seed: u64,
}

impl State {
    fn is_served(&self, resource: &Resource) -> bool {
        !resource.custom || self.crds.contains(resource.plural)
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    fn uid(&mut self) -> String {
        let n = self.next_serial();
        format!("{:08x}-0000-4000-8000-{:012x}", self.seed & 0xffff_ffff, n)
    }

    /// Creates or replaces the object at `key`, as the API server stores it:
    /// type, name and namespace from the path; uid and creationTimestamp kept
    /// (or made); a new resourceVersion, unless nothing changed.
    ///
    /// `staged`: an in-process [`FakeApiServer::put`], whose `metadata.generation`, if it has
    /// one, is kept (a test's shortcut for history the server would have counted).
    fn store(
        &mut self,
        res: usize,
        key: ObjKey,
        mut object: Value,
        staged: bool,
    ) -> (Arc<Stored>, bool) {
        let resource = &RESOURCES[res];
        if !object.is_object() {
            object = json!({});
        }
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind);
        if !object["metadata"].is_object() {
            object["metadata"] = json!({});
        }
        omit_empty(&mut object, resource);
        let previous_stored = self.objects[res].get(&key).cloned();
        let previous = previous_stored.as_ref().map(|p| p.tree());
        let uid = match &previous {
            Some(prev) => prev["metadata"]["uid"].clone(),
            None if object["metadata"]["uid"].is_string() => object["metadata"]["uid"].clone(),
            None => json!(self.uid()),
        };
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.insert("name".into(), json!(key.1));
            if resource.namespaced {
                meta.insert("namespace".into(), json!(key.0));
            } else {
                meta.remove("namespace");
            }
            meta.insert("uid".into(), uid);
            match &previous {
                Some(prev) => {
                    meta.insert(
                        "creationTimestamp".into(),
                        prev["metadata"]["creationTimestamp"].clone(),
                    );
                    meta.insert(
                        "resourceVersion".into(),
                        prev["metadata"]["resourceVersion"].clone(),
                    );
                }
                None => {
                    if !meta.get("creationTimestamp").is_some_and(Value::is_string) {
                        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
                    }
                    meta.remove("resourceVersion");
                }
            }
        }
        if let Some(moves_on) = generation_rule(resource) {
            // 1 at creation, one more for each change `moves_on` counts; what a client sends
            // is not taken (`rest.BeforeUpdate` restores the stored one), but a test staging
            // an object in process may give it the history it pretends.
            let staged = object["metadata"]["generation"].as_i64().filter(|_| staged);
            let generation = match (&previous, staged) {
                (_, Some(staged)) => staged,
                (None, None) => 1,
                (Some(prev), None) => {
                    let was = prev["metadata"]["generation"].as_i64().unwrap_or(1);
                    if moves_on(prev, &object) { was + 1 } else { was }
                }
            };
            object["metadata"]["generation"] = json!(generation);
        }
        if let (Some(prev), Some(stored)) = (&previous, &previous_stored) {
            if *prev == object {
                return (stored.clone(), false);
            }
        }
        self.resource_version += 1;
        let rv = self.resource_version;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let object = Stored::new(&object);
        self.objects[res].insert(key.clone(), object.clone());
        let kind = if previous.is_some() { ChangeKind::Modified } else { ChangeKind::Added };
        self.record(Change { rv, res, key, kind, object: object.clone(), prev: previous_stored });
        (object, true)
    }

    /// Deletes the object at `key`; the deleted object at the deletion's resourceVersion.
    fn remove(&mut self, res: usize, key: &ObjKey) -> Option<Arc<Stored>> {
        let prev = self.objects[res].remove(key)?;
        self.resource_version += 1;
        let rv = self.resource_version;
        let mut last = prev.tree();
        last["metadata"]["resourceVersion"] = json!(rv.to_string());
        let last = Stored::new(&last);
        self.record(Change {
            rv,
            res,
            key: key.clone(),
            kind: ChangeKind::Deleted,
            object: last.clone(),
            prev: Some(prev),
        });
        Some(last)
    }

    fn record(&mut self, change: Change) {
        let rv = change.rv;
        self.history.push_back(Arc::new(change));
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.floor = self.floor.max(dropped.rv);
            }
        }
        self.notify.send_replace(rv);
    }

    /// Changes of collection `res` after `rv`, oldest first.
    fn changes_after(&self, rv: u64, res: usize) -> Vec<Arc<Change>> {
        let start = self.history.partition_point(|c| c.rv <= rv);
        self.history.range(start..).filter(|c| c.res == res).cloned().collect()
    }

    fn fault_for_request(&self, token: &str, method: &str, path: &str) -> Option<Fault> {
        self.faults
            .iter()
            .enumerate()
            .filter(|(_, r)| r.path == path)
            .filter(|(_, r)| r.token.as_deref().is_none_or(|t| t == token))
            .filter(|(_, r)| r.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method)))
            .max_by_key(|(i, r)| (r.specificity(), *i))
            .map(|(_, r)| r.fault.clone())
    }

    /// One page of collection `res` as it was at `snapshot`: up to `limit`
    /// objects (0: all) after `after` that pass `keep`, and whether more follow.
    fn page(
        &self,
        res: usize,
        namespace: Option<&str>,
        after: Option<&ObjKey>,
        snapshot: u64,
        limit: usize,
        keep: &dyn Fn(&Stored) -> bool,
    ) -> (Vec<Arc<Stored>>, bool) {
        let in_namespace = |k: &ObjKey| namespace.is_none_or(|ns| k.0 == ns);
        let beyond = |k: &ObjKey| after.is_none_or(|a| k > a);
        // Undo every change made after the snapshot: the first change of a
        // key after it holds the key's state at the snapshot.
        let mut undo: BTreeMap<&ObjKey, Option<&Arc<Stored>>> = BTreeMap::new();
        if snapshot < self.resource_version {
            let start = self.history.partition_point(|c| c.rv <= snapshot);
            for change in self.history.range(start..) {
                if change.res == res && in_namespace(&change.key) && beyond(&change.key) {
                    undo.entry(&change.key).or_insert(change.prev.as_ref());
                }
            }
        }
        let lower = match (after, namespace) {
            (Some(after), _) => Bound::Excluded(after.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_owned(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut current = self.objects[res]
            .range((lower, Bound::Unbounded))
            .take_while(|(k, _)| in_namespace(k))
            .filter(|(k, _)| !undo.contains_key(k))
            .peekable();
        let mut restored = undo.iter().filter_map(|(k, v)| v.map(|v| (*k, v))).peekable();
        let mut items = Vec::new();
        loop {
            let next = match (current.peek(), restored.peek()) {
                (None, None) => break,
                (Some(_), None) => current.next(),
                (None, Some(_)) => restored.next(),
                (Some((a, _)), Some((b, _))) => {
                    if a < b {
                        current.next()
                    } else {
                        restored.next()
                    }
                }
            };
            let Some((_, object)) = next else { break };
            if limit > 0 && items.len() == limit {
                return (items, true);
            }
            if keep(object) {
                items.push(object.clone());
            }
        }
        (items, false)
    }
}

struct Shared {
    state: Mutex<State>,
    /// Plurals whose open watches must end with 410 Gone.
    gone: broadcast::Sender<String>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Clone)]
pub struct FakeApiServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeApiServer {
    pub async fn start() -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake API server");
        let addr = listener.local_addr().expect("addr");
        let state = State {
            objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
            resource_version: 0,
            history: VecDeque::new(),
            history_limit: 10_000,
            floor: 0,
            notify: watch::channel(0).0,
            faults: Vec::new(),
            counts: HashMap::new(),
            calls: HashMap::new(),
            interleaved: HashMap::new(),
            log: Vec::new(),
            log_base: 0,
            crds: BTreeSet::new(),
            bookmark_every: Duration::from_secs(1),
            serial: 0,
            seed: u64::from(addr.port()) << 16 ^ u64::from(std::process::id() & 0xffff),
        };
        let server = FakeApiServer {
            addr,
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                gone: broadcast::channel(64).0,
                in_flight: AtomicUsize::new(0),
                most_in_flight: AtomicUsize::new(0),
            }),
        };
        let handle = server.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let handle = handle.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let handle = handle.clone();
                        async move { handle.answer(request).await }
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                });
            }
        });
        server
    }

    /// A kubeconfig for this server (token `fake-token`), written into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        self.write_kubeconfig(&dir.join("kubeconfig"), "fake-token")
    }

    /// A kubeconfig whose bearer token is `user`, written to `dir/kubeconfig-<user>`,
    /// so that tests can tell clients apart in `log()` and target faults.
    pub fn kubeconfig_for(&self, dir: &Path, user: &str) -> PathBuf {
        self.write_kubeconfig(&dir.join(format!("kubeconfig-{user}")), user)
    }

    fn write_kubeconfig(&self, path: &Path, token: &str) -> PathBuf {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             users:\n- name: fake\n  user:\n    token: {token}\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.addr
        );
        std::fs::write(path, text).expect("write kubeconfig");
        path.to_owned()
    }

    pub fn put_config_map(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let data: serde_json::Map<String, Value> =
            data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        self.put_body(&Self::config_map_path(namespace, name), json!({"data": data}));
    }

    pub fn put_secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let data: serde_json::Map<String, Value> =
            data.iter().map(|(k, v)| (k.to_string(), json!(b64.encode(v)))).collect();
        self.put_body(&Self::secret_path(namespace, name), json!({"type": "Opaque", "data": data}));
    }

    pub fn put_secret_bytes(&self, namespace: &str, name: &str, key: &str, value: &[u8]) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let body = json!({"type": "Opaque", "data": {key: b64.encode(value)}});
        self.put_body(&Self::secret_path(namespace, name), body);
    }

    /// A Secret whose one key holds `encoded` (already base64): cheap for many large Secrets.
    pub fn put_secret_encoded(&self, namespace: &str, name: &str, key: &str, encoded: &str) {
        let body = json!({"type": "Opaque", "data": {key: encoded}});
        self.put_body(&Self::secret_path(namespace, name), body);
    }

    /// A Namespace with these labels (and `kubernetes.io/metadata.name`, as the server adds).
    pub fn put_namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let mut labels: serde_json::Map<String, Value> =
            labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        self.put(
            &format!("/api/v1/namespaces/{name}"),
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        );
    }

    /// Replaces the content of the object at `path`, keeping its metadata.
    fn put_body(&self, path: &str, body: Value) {
        let mut object = body;
        if let Some(old) = self.object(path) {
            object["metadata"] = old["metadata"].clone();
        }
        self.put(path, object);
    }

    /// Stores `object` at `path` (creating or replacing it) and tells
    /// watchers, unless nothing changed. Panics on a path this fake does not serve.
    pub fn put(&self, path: &str, object: Value) {
        let target = parse_target(path)
            .filter(|t| t.name.is_some())
            .unwrap_or_else(|| panic!("{path} is not an object path the fake API server serves"));
        self.shared.state().store(target.res, target.key(), object, true);
    }

    /// Changes only the labels of an object (a metadata-only change).
    pub fn set_labels(&self, path: &str, labels: Value) {
        let mut object = self.object(path).expect("object exists");
        object["metadata"]["labels"] = labels;
        self.put(path, object);
    }

    /// Deletes `namespace/name` of `plural` (the core group's, else the first group serving it).
    pub fn delete(&self, plural: &str, namespace: &str, name: &str) {
        let Some(resource) = RESOURCES.iter().find(|r| r.plural == plural) else { return };
        self.delete_path(&format!("{}/namespaces/{namespace}/{plural}/{name}", resource.prefix()));
    }

    pub fn delete_path(&self, path: &str) {
        let Some(target) = parse_target(path).filter(|t| t.name.is_some()) else { return };
        self.shared.state().remove(target.res, &target.key());
    }

    /// Sets (or clears) the fault for every request to `path`.
    pub fn fault(&self, path: &str, fault: Option<Fault>) {
        self.fault_for(None, None, path, fault);
    }

    /// Sets (or clears) a fault for requests to `path` (a collection path
    /// covers its LIST and WATCH) with this bearer token and method (`None`:
    /// any). The most specific matching rule applies.
    pub fn fault_for(
        &self,
        token: Option<&str>,
        method: Option<&str>,
        path: &str,
        fault: Option<Fault>,
    ) {
        let mut state = self.shared.state();
        let (token, method) = (token.map(str::to_owned), method.map(str::to_ascii_uppercase));
        state.faults.retain(|r| !(r.path == path && r.token == token && r.method == method));
        if let Some(fault) = fault {
            state.faults.push(FaultRule { token, method, path: path.to_owned(), fault });
        }
    }

    pub fn clear_faults(&self) {
        self.shared.state().faults.clear();
    }

    /// Ends every open watch of `plural` with a 410 Gone, as after etcd compaction.
    pub fn expire_watches(&self, plural: &str) {
        let _ = self.shared.gone.send(plural.to_owned());
    }

    /// Drops the whole change history: watches and continue tokens from any
    /// earlier resourceVersion now get 410 Expired.
    pub fn compact(&self) {
        let mut state = self.shared.state();
        state.history.clear();
        state.floor = state.resource_version;
    }

    /// How many changes the history keeps (default 10,000).
    pub fn set_history_limit(&self, changes: usize) {
        let mut state = self.shared.state();
        state.history_limit = changes.max(1);
        while state.history.len() > state.history_limit {
            if let Some(dropped) = state.history.pop_front() {
                state.floor = state.floor.max(dropped.rv);
            }
        }
    }

    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK (default 1 s).
    pub fn set_bookmark_interval(&self, every: Duration) {
        self.shared.state().bookmark_every = every.max(Duration::from_millis(10));
    }

    /// Serves `argoproj.io/v1alpha1` `rollouts`, as when the Argo Rollouts CRD is installed.
    pub fn serve_rollouts(&self) {
        self.serve_crd("rollouts");
    }

    /// Serves the custom resource `plural` (one of this fake's), as when its CRD is installed.
    pub fn serve_crd(&self, plural: &'static str) {
        assert!(RESOURCES.iter().any(|r| r.custom && r.plural == plural), "no CRD {plural}");
        self.shared.state().crds.insert(plural);
    }

    /// The server's current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state().resource_version
    }

    /// Applies `merge_patch` to the object at `path` right before the next
    /// PATCH of it arrives: a concurrent writer, so that PATCH conflicts.
    pub fn interleave_write(&self, path: &str, merge_patch: Value) {
        self.shared.state().interleaved.insert(path.to_owned(), merge_patch);
    }

    pub fn secret_path(namespace: &str, name: &str) -> String {
        format!("/api/v1/namespaces/{namespace}/secrets/{name}")
    }

    pub fn config_map_path(namespace: &str, name: &str) -> String {
        format!("/api/v1/namespaces/{namespace}/configmaps/{name}")
    }

    pub fn deployment_path(namespace: &str, name: &str) -> String {
        format!("/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
    }

    /// Requests seen for `path` (any method, with or without a query).
    pub fn requests(&self, path: &str) -> usize {
        self.shared.state().counts.get(path).copied().unwrap_or(0)
    }

    /// Requests seen for `method path`, e.g. `calls("PATCH", path)`.
    pub fn calls(&self, method: &str, path: &str) -> usize {
        self.shared.state().calls.get(&format!("{method} {path}")).copied().unwrap_or(0)
    }

    pub fn total_requests(&self) -> usize {
        self.shared.state().counts.values().sum()
    }

    pub fn most_in_flight(&self) -> usize {
        self.shared.most_in_flight.load(Ordering::SeqCst)
    }

    /// Every request since the start (or the last `clear_log`), in arrival order.
    pub fn log(&self) -> Vec<Logged> {
        self.shared.state().log.clone()
    }

    pub fn clear_log(&self) {
        let mut state = self.shared.state();
        state.log_base += state.log.len();
        state.log.clear();
    }

    /// The stored object at `path` (with `apiVersion` and `kind`), if any.
    pub fn object(&self, path: &str) -> Option<Value> {
        let target = parse_target(path).filter(|t| t.name.is_some())?;
        self.shared.state().objects[target.res].get(&target.key()).map(|o| o.tree())
    }

    /// Every stored object of a collection path (e.g. `/api/v1/namespaces/ns/events`).
    pub fn list(&self, collection: &str) -> Vec<Value> {
        let Some(target) = parse_target(collection).filter(|t| t.name.is_none()) else {
            return Vec::new();
        };
        let state = self.shared.state();
        state.objects[target.res]
            .iter()
            .filter(|(k, _)| target.namespace.as_ref().is_none_or(|ns| &k.0 == ns))
            .map(|(_, v)| v.tree())
            .collect()
    }

    async fn answer(&self, request: Request<Incoming>) -> Result<Response<Body>, std::io::Error> {
        let method = request.method().as_str().to_owned();
        let path = request.uri().path().to_owned();
        let raw_query = request.uri().query().unwrap_or("").to_owned();
        let token = bearer(request.headers());
        let content_type = request.headers().get("content-type").and_then(|v| v.to_str().ok());
        let content_type = content_type.unwrap_or("").to_owned();
        let (index, fault) = {
            let mut state = self.shared.state();
            *state.counts.entry(path.clone()).or_default() += 1;
            *state.calls.entry(format!("{method} {path}")).or_default() += 1;
            let index = state.log_base + state.log.len();
            state.log.push(Logged {
                at: Instant::now(),
                method: method.clone(),
                path: path.clone(),
                query: raw_query.clone(),
                token: token.clone().unwrap_or_default(),
                content_type,
                status: 0,
            });
            let fault = token.as_deref().and_then(|t| state.fault_for_request(t, &method, &path));
            (index, fault)
        };
        let now = self.shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.shared.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let _guard = Decrement(self.shared.clone());
        let response = match (&token, fault) {
            (None, _) => Ok(self.anonymous(&method, &path, &raw_query)),
            (Some(_), Some(Fault::Status(code))) => Ok(ApiError::injected(code).response()),
            // An error from the service makes hyper close the connection unanswered.
            (Some(_), Some(Fault::Drop)) => Err(std::io::Error::other("injected connection drop")),
            (Some(_), Some(Fault::Hang)) => {
                tokio::time::sleep(HANG_CAP).await;
                Ok(ApiError::new(504, "Timeout", "the fake API server hung up after 10 minutes")
                    .response())
            }
            (Some(_), Some(Fault::Late(late))) => {
                let query = parse_query(&raw_query);
                let answer = self.route(request, &path, &query).await;
                tokio::time::sleep(late).await;
                Ok(answer.unwrap_or_else(|e| e.response()))
            }
            (Some(_), fault) => {
                if let Some(Fault::Delay(delay)) = fault {
                    tokio::time::sleep(delay).await;
                }
                let query = parse_query(&raw_query);
                Ok(self.route(request, &path, &query).await.unwrap_or_else(|e| e.response()))
            }
        };
        if let Ok(response) = &response {
            let mut state = self.shared.state();
            let base = state.log_base;
            if let Some(entry) = index.checked_sub(base).and_then(|i| state.log.get_mut(i)) {
                entry.status = response.status().as_u16();
            }
        }
        response
    }

    /// A request without a bearer token: the real server's default `--anonymous-auth` makes it
    /// `system:anonymous`, whom RBAC's `system:public-info-viewer` lets read `/version` (and the
    /// health paths, which this fake does not serve) and nothing else.
    fn anonymous(&self, method: &str, path: &str, raw_query: &str) -> Response<Body> {
        if matches!(method, "GET" | "HEAD") && matches!(path, "/version" | "/version/") {
            if let Some(Ok(version)) = self.discovery("/version") {
                return version;
            }
        }
        ApiError::forbidden(&request_info(method, path, &parse_query(raw_query))).response()
    }

    async fn route(
        &self,
        request: Request<Incoming>,
        path: &str,
        query: &HashMap<String, String>,
    ) -> Result<Response<Body>, ApiError> {
        let method = request.method().clone();
        if let Some(discovery) = self.discovery(path) {
            return if method == Method::GET { discovery } else { Err(ApiError::method()) };
        }
        let Some(target) = parse_target(path) else {
            return Err(self.not_served(path));
        };
        let resource = target.resource();
        if !self.shared.state().is_served(resource) {
            return Err(ApiError::page_not_found());
        }
        // `watch` on an object's path is a plain GET on the real server (1.37): single objects
        // are watched with a `metadata.name` field selector on their collection.
        let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
        match (method, &target.name) {
            (Method::GET, None) if watching => {
                let shape = negotiate(request.headers(), resource)?.single(resource)?;
                self.watch(&target, query, shape).await
            }
            (Method::GET, Some(_)) => {
                let shape = negotiate(request.headers(), resource)?.single(resource)?;
                self.get(&target, shape)
            }
            (Method::GET, None) => {
                let shape = negotiate(request.headers(), resource)?.list(resource)?;
                self.list_collection(&target, query, shape).await
            }
            (Method::POST, None) if target.namespace.is_some() || !resource.namespaced => {
                json_body_type(request.headers())?;
                let body = read_body(request).await?;
                self.create(&target, &body)
            }
            (Method::PUT, Some(_)) => {
                json_body_type(request.headers())?;
                let body = read_body(request).await?;
                self.replace(&target, &body)
            }
            (Method::PATCH, Some(_)) => {
                let content_type = request
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let body = read_body(request).await?;
                self.patch(&target, path, &content_type, &body)
            }
            (Method::DELETE, Some(_)) => {
                let body = read_body(request).await?;
                self.remove(&target, &body)
            }
            _ => Err(ApiError::method()),
        }
    }

    /// The 404 for a path that names no served resource: Go's plain-text one when the group or
    /// version is not served at all (no handler is registered for it), a Status otherwise.
    fn not_served(&self, path: &str) -> ApiError {
        match split_api_path(path) {
            Some((group, version, _)) if !group.is_empty() && !self.serves(group, version) => {
                ApiError::page_not_found()
            }
            _ => ApiError::no_resource(),
        }
    }

    fn serves(&self, group: &str, version: &str) -> bool {
        let state = self.shared.state();
        RESOURCES.iter().any(|r| r.group == group && r.version == version && state.is_served(r))
    }

    /// `/version` and the discovery documents, or `None` for other paths.
    fn discovery(&self, path: &str) -> Option<Result<Response<Body>, ApiError>> {
        let crds = self.shared.state().crds.clone();
        let served = move || RESOURCES.iter().filter(move |r| !r.custom || crds.contains(r.plural));
        let path = path.trim_end_matches('/');
        Some(Ok(match path {
            "/version" => json_response(
                StatusCode::OK,
                &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0",
                    "goVersion": "go1.24.0", "platform": "linux/amd64"}),
            ),
            "/api" => json_response(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs":
                    [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.addr.to_string()}]}),
            ),
            "/apis" => {
                let mut groups: Vec<(&str, &str)> = served()
                    .filter(|r| !r.group.is_empty())
                    .map(|r| (r.group, r.version))
                    .collect();
                groups.dedup();
                let groups: Vec<Value> = groups
                    .iter()
                    .map(|(g, v)| {
                        let version = json!({"groupVersion": format!("{g}/{v}"), "version": v});
                        json!({"name": g, "versions": [version.clone()], "preferredVersion": version})
                    })
                    .collect();
                json_response(
                    StatusCode::OK,
                    &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
                )
            }
            _ => {
                let (group, version, rest) = split_api_path(path)?;
                if !rest.is_empty() {
                    return None;
                }
                let resources: Vec<Value> = served()
                    .filter(|r| r.group == group && r.version == version)
                    .map(|r| {
                        json!({"name": r.plural, "singularName": r.singular,
                            "namespaced": r.namespaced, "kind": r.kind, "verbs":
                            ["create", "delete", "get", "list", "patch", "update", "watch"]})
                    })
                    .collect();
                if resources.is_empty() {
                    return Some(Err(self.not_served(path)));
                }
                // The core group's list has no apiVersion; the named groups' lists do.
                let body = if group.is_empty() {
                    json!({"kind": "APIResourceList", "groupVersion": version,
                        "resources": resources})
                } else {
                    json!({"kind": "APIResourceList", "apiVersion": "v1",
                        "groupVersion": format!("{group}/{version}"), "resources": resources})
                };
                json_response(StatusCode::OK, &body)
            }
        }))
    }

    fn get(&self, target: &Target, shape: Shape) -> Result<Response<Body>, ApiError> {
        let name = target.name.clone().unwrap_or_default();
        let object = self.shared.state().objects[target.res]
            .get(&target.key())
            .cloned()
            .ok_or_else(|| ApiError::not_found(target.resource(), &name))?;
        Ok(bytes_response(StatusCode::OK, to_json(&Item::single(&object, &shape))))
    }

    async fn list_collection(
        &self,
        target: &Target,
        query: &HashMap<String, String>,
        shape: Shape,
    ) -> Result<Response<Body>, ApiError> {
        let resource = target.resource();
        let selector = Selector::parse(
            query.get("labelSelector").map(String::as_str),
            query.get("fieldSelector").map(String::as_str),
        )?;
        let limit: usize = match query.get("limit").filter(|l| !l.is_empty()) {
            Some(limit) => limit
                .parse()
                .map_err(|_| ApiError::bad_request(&format!("invalid limit {limit:?}")))?,
            None => 0,
        };
        let options = ListOptions::parse(query, false)?;
        let rv = options.resource_version.as_deref();
        let continued = match &options.continue_token {
            Some(token) => {
                if rv.is_some() {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                Some(decode_continue(token, target)?)
            }
            None => None,
        };
        let requested = match rv {
            Some(rv) => Some(parse_rv(rv)?),
            None => None,
        };
        if let Some(wanted) = requested.filter(|n| *n > 0) {
            if !self.wait_for_rv(wanted).await {
                return Err(ApiError::too_large(wanted, self.resource_version()));
            }
        }
        let exact = options.resource_version_match.as_deref() == Some("Exact");
        let (items, more, snapshot) = {
            let state = self.shared.state();
            let snapshot = match (&continued, exact, requested) {
                (Some((snapshot, _)), _, _) => {
                    if *snapshot < state.floor {
                        return Err(ApiError::expired(
                            "The provided continue parameter is too old to display a consistent list result. \
                             You can start a new list without the continue parameter.",
                        ));
                    }
                    *snapshot
                }
                (None, true, Some(n)) => {
                    if n < state.floor {
                        return Err(ApiError::expired(&format!(
                            "too old resource version: {n} ({})",
                            state.floor
                        )));
                    }
                    n
                }
                _ => state.resource_version,
            };
            let after = continued.as_ref().map(|(_, key)| key);
            let keep = |object: &Stored| selector.matches_stored(object);
            let (items, more) =
                state.page(target.res, target.namespace.as_deref(), after, snapshot, limit, &keep);
            (items, more, snapshot)
        };
        let mut metadata = json!({"resourceVersion": snapshot.to_string()});
        if more {
            if let Some(last) = items.last() {
                metadata["continue"] = json!(encode_continue(snapshot, &last.tree(), target));
            }
        } else if resource.custom {
            // A custom resource's list is unstructured on the real server: its last page
            // carries an empty continue rather than none.
            metadata["continue"] = json!("");
        }
        let (kind, api_version) = match &shape {
            Shape::MetaList(version) => {
                ("PartialObjectMetadataList".to_owned(), format!("meta.k8s.io/{version}"))
            }
            _ => (format!("{}List", resource.kind), resource.api_version()),
        };
        let item_shape =
            if matches!(shape, Shape::Full) { ItemShape::Bare } else { ItemShape::MetaBare };
        let body = ListBody {
            kind: &kind,
            api_version: &api_version,
            metadata,
            items: items.iter().map(|o| Item { object: o, shape: item_shape.clone() }).collect(),
        };
        Ok(bytes_response(StatusCode::OK, to_json(&body)))
    }

    /// Waits (up to 3 s) until the server reaches `rv`.
    async fn wait_for_rv(&self, rv: u64) -> bool {
        let mut changes = self.shared.state().notify.subscribe();
        let deadline = tokio::time::Instant::now() + TOO_LARGE_WAIT;
        loop {
            if *changes.borrow_and_update() >= rv {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }

    async fn watch(
        &self,
        target: &Target,
        query: &HashMap<String, String>,
        shape: Shape,
    ) -> Result<Response<Body>, ApiError> {
        let selector = Selector::parse(
            query.get("labelSelector").map(String::as_str),
            query.get("fieldSelector").map(String::as_str),
        )?;
        let options = ListOptions::parse(query, true)?;
        let bookmarks = flag(query, "allowWatchBookmarks")?.unwrap_or(false);
        let initial_events = options.send_initial_events == Some(true);
        let from = match options.resource_version.as_deref() {
            Some(rv) => parse_rv(rv)?,
            None => 0,
        };
        let start = match (options.send_initial_events, from) {
            // The initial events of the objects as they are now (for `NotOlderThan` N, N or
            // later): watch-list, the default for a watch from "" or "0".
            (Some(true), _) => Start::Current,
            // sendInitialEvents=false: no initial events, changes after N (or after now).
            (Some(false), 0) => Start::Now,
            (_, n) => Start::From(n),
        };
        let timeout = match query.get("timeoutSeconds").filter(|v| !v.is_empty()) {
            Some(t) => Duration::from_secs(t.parse().map_err(|e: std::num::ParseIntError| {
                ApiError::bad_request(&format!("strconv.ParseInt: parsing {t:?}: {e}"))
            })?),
            None => DEFAULT_WATCH_TIMEOUT,
        };
        let spec = WatchSpec {
            res: target.res,
            namespace: target.namespace.clone(),
            selector,
            shape,
            start,
            bookmarks,
            initial_events,
            timeout,
        };
        let (tx, rx) = mpsc::channel::<Bytes>(256);
        let shared = self.shared.clone();
        tokio::spawn(run_watch(shared, spec, tx));
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (Ok::<_, std::io::Error>(Frame::data(chunk)), rx))
        });
        let mut response = Response::new(StreamBody::new(stream).boxed());
        response.headers_mut().insert("content-type", "application/json".parse().expect("header"));
        Ok(response)
    }

    fn create(&self, target: &Target, body: &[u8]) -> Result<Response<Body>, ApiError> {
        let resource = target.resource();
        let mut object = parse_object(body, resource)?;
        let namespace = target.namespace.clone().unwrap_or_default();
        let meta = &object["metadata"];
        if resource.namespaced {
            if let Some(sent) = meta["namespace"].as_str().filter(|ns| !ns.is_empty()) {
                if sent != namespace {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
        }
        if meta["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()) {
            // The real server's storage error, passed through as a reason-less 500.
            return Err(ApiError::new(
                500,
                "",
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = meta["name"].as_str().filter(|n| !n.is_empty()).map(str::to_owned);
        let generate = meta["generateName"].as_str().filter(|n| !n.is_empty()).map(str::to_owned);
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("uid");
            meta.remove("creationTimestamp");
        }
        let mut state = self.shared.state();
        let name = match (name, generate) {
            (Some(name), _) => name,
            (None, Some(prefix)) => loop {
                let candidate =
                    format!("{prefix}{}", random_suffix(state.next_serial() ^ state.seed));
                if !state.objects[target.res].contains_key(&(namespace.clone(), candidate.clone()))
                {
                    break candidate;
                }
            },
            (None, None) => {
                return Err(ApiError::required_field(
                    resource,
                    "",
                    "metadata.name",
                    "name or generateName is required",
                ));
            }
        };
        let key = (namespace, name.clone());
        if state.objects[target.res].contains_key(&key) {
            return Err(ApiError::already_exists(resource, &name));
        }
        let (stored, _) = state.store(target.res, key, object, false);
        drop(state);
        Ok(bytes_response(StatusCode::CREATED, Bytes::from(stored.text.to_string())))
    }

    fn replace(&self, target: &Target, body: &[u8]) -> Result<Response<Body>, ApiError> {
        let resource = target.resource();
        let object = parse_object(body, resource)?;
        let name = target.name.clone().unwrap_or_default();
        check_name(&object, target)?;
        let mut state = self.shared.state();
        let current = state.objects[target.res]
            .get(&target.key())
            .map(|o| o.tree())
            .ok_or_else(|| ApiError::not_found(resource, &name))?;
        let sent = object["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty());
        if sent.is_some_and(|rv| Some(rv) != current["metadata"]["resourceVersion"].as_str()) {
            return Err(ApiError::conflict(resource, &name));
        }
        let (stored, _) = state.store(target.res, target.key(), object, false);
        drop(state);
        Ok(bytes_response(StatusCode::OK, Bytes::from(stored.text.to_string())))
    }

    fn patch(
        &self,
        target: &Target,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<Response<Body>, ApiError> {
        let resource = target.resource();
        let name = target.name.clone().unwrap_or_default();
        let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        enum Kind {
            Merge(Value),
            Json(json_patch::Patch),
        }
        let patch = match media.as_str() {
            "application/merge-patch+json" => Kind::Merge(parse_json(body)?),
            "application/strategic-merge-patch+json" if !resource.custom => {
                Kind::Merge(parse_json(body)?)
            }
            "application/json-patch+json" => Kind::Json(
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(&e.to_string()))?,
            ),
            "application/apply-patch+yaml" if !resource.custom => {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    "server-side apply (application/apply-patch+yaml) is not implemented by the fake API server",
                ));
            }
            _ => return Err(ApiError::unsupported_patch(resource)),
        };
        let mut state = self.shared.state();
        if let Some(concurrent) = state.interleaved.remove(path) {
            if let Some(current) = state.objects[target.res].get(&target.key()).cloned() {
                let mut changed = current.tree();
                json_patch::merge(&mut changed, &concurrent);
                state.store(target.res, target.key(), changed, false);
            }
        }
        let current = state.objects[target.res]
            .get(&target.key())
            .map(|o| o.tree())
            .ok_or_else(|| ApiError::not_found(resource, &name))?;
        let mut patched = current.clone();
        match &patch {
            Kind::Merge(patch) => json_patch::merge(&mut patched, patch),
            // The real server says no more than this about a failing operation.
            Kind::Json(patch) => json_patch::patch(&mut patched, patch).map_err(|_| {
                ApiError::new(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                )
                .with_details(json!({}))
            })?,
        }
        check_name(&patched, target)?;
        let sent = patched["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty());
        if sent.is_some_and(|rv| Some(rv) != current["metadata"]["resourceVersion"].as_str()) {
            return Err(ApiError::conflict(resource, &name));
        }
        let (stored, _) = state.store(target.res, target.key(), patched, false);
        drop(state);
        Ok(bytes_response(StatusCode::OK, Bytes::from(stored.text.to_string())))
    }

    fn remove(&self, target: &Target, body: &[u8]) -> Result<Response<Body>, ApiError> {
        let resource = target.resource();
        let name = target.name.clone().unwrap_or_default();
        let options: Value =
            if body.iter().all(u8::is_ascii_whitespace) { json!({}) } else { parse_json(body)? };
        let mut state = self.shared.state();
        let current = state.objects[target.res]
            .get(&target.key())
            .map(|o| o.tree())
            .ok_or_else(|| ApiError::not_found(resource, &name))?;
        // `BeforeDelete` (`staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`): the UID
        // first, then the resourceVersion; the Conflict names the kind.
        for (field, label, consequence) in [
            ("uid", "UID", "deleted and then recreated"),
            ("resourceVersion", "ResourceVersion", "modified"),
        ] {
            if let Some(wanted) = options["preconditions"][field].as_str() {
                let actual = current["metadata"][field].as_str().unwrap_or("");
                if wanted != actual {
                    return Err(ApiError::new(
                        409,
                        "Conflict",
                        &format!(
                            "Operation cannot be fulfilled on {} \"{name}\": the {label} in the \
                             precondition ({wanted}) does not match the {label} in record ({actual}). \
                             The object might have been {consequence}",
                            resource.qualified_kind()
                        ),
                    )
                    .with_details(resource.kind_details(&name)));
                }
            }
        }
        state.remove(target.res, &target.key());
        drop(state);
        let mut details = resource.details(&name);
        details["uid"] = current["metadata"]["uid"].clone();
        Ok(json_response(
            StatusCode::OK,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": details}),
        ))
    }
}

#[derive(Debug)]
enum Start {
    /// Synthetic ADDED events for the current objects, then changes.
    Current,
    /// Changes from now on.
    Now,
    /// Every change after this resourceVersion (waiting for it if the server is not there yet).
    From(u64),
}

/// The list and watch options that `SetListOptionsDefaults` and `ValidateListOptions` see
/// (`staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/`), with the WatchList
/// feature on, as it is by default in 1.37: a watch from `resourceVersion` "" or "0" without
/// `sendInitialEvents` or `resourceVersionMatch` is a watch-list (`sendInitialEvents=true`,
/// `resourceVersionMatch=NotOlderThan`).
#[derive(Debug)]
struct ListOptions {
    resource_version: Option<String>,
    resource_version_match: Option<String>,
    send_initial_events: Option<bool>,
    continue_token: Option<String>,
}

impl ListOptions {
    fn parse(query: &HashMap<String, String>, watch: bool) -> Result<ListOptions, ApiError> {
        let text = |name: &str| query.get(name).filter(|v| !v.is_empty()).cloned();
        let mut options = ListOptions {
            resource_version: text("resourceVersion"),
            resource_version_match: text("resourceVersionMatch"),
            send_initial_events: flag(query, "sendInitialEvents")?,
            continue_token: text("continue"),
        };
        let legacy = options.resource_version.as_deref().is_none_or(|rv| rv == "0");
        if watch
            && legacy
            && options.send_initial_events.is_none()
            && options.resource_version_match.is_none()
        {
            options.send_initial_events = Some(true);
            options.resource_version_match = Some("NotOlderThan".to_owned());
        }
        let forbidden = |field: &'static str, detail: &str| {
            (field, "FieldValueForbidden", format!("Forbidden: {detail}"))
        };
        let not_supported = |value: &str, supported: &str| {
            let body = format!("Unsupported value: {value:?}: supported values: {supported}");
            ("resourceVersionMatch", "FieldValueNotSupported", body)
        };
        let mut errors = Vec::new();
        let matching = options.resource_version_match.as_deref();
        if watch {
            if options.send_initial_events.is_some() && matching != Some("NotOlderThan") {
                errors.push(forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if let Some(m) = matching {
                if options.send_initial_events.is_none() {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != "NotOlderThan" {
                    errors.push(not_supported(m, "\"NotOlderThan\""));
                }
                if options.continue_token.is_some() {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
        } else {
            if let Some(m) = matching {
                if options.resource_version.is_none() {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if options.continue_token.is_some() {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                if m != "Exact" && m != "NotOlderThan" {
                    errors.push(not_supported(m, "\"Exact\", \"NotOlderThan\", \"\""));
                }
                if m == "Exact" && options.resource_version.as_deref() == Some("0") {
                    errors.push(forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
            }
            if options.send_initial_events.is_some() {
                errors.push(forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                ));
            }
        }
        if errors.is_empty() { Ok(options) } else { Err(ApiError::invalid_list_options(&errors)) }
    }
}

/// A boolean query parameter as Go's `strconv.ParseBool` reads it; `None` if absent.
fn flag(query: &HashMap<String, String>, name: &str) -> Result<Option<bool>, ApiError> {
    match query.get(name).map(String::as_str) {
        None | Some("") => Ok(None),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(Some(true)),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(Some(false)),
        Some(other) => Err(ApiError::bad_request(&format!(
            "strconv.ParseBool: parsing {other:?}: invalid syntax"
        ))),
    }
}

struct WatchSpec {
    res: usize,
    namespace: Option<String>,
    selector: Selector,
    shape: Shape,
    start: Start,
    bookmarks: bool,
    initial_events: bool,
    timeout: Duration,
}

impl WatchSpec {
    fn in_scope(&self, key: &ObjKey) -> bool {
        self.namespace.as_ref().is_none_or(|ns| &key.0 == ns)
    }

    fn line(&self, kind: &str, object: &Stored) -> Bytes {
        line(&EventLine { kind, object: Item::single(object, &self.shape) })
    }

    /// A change as this watch sees it, if it concerns it.
    fn render(&self, change: &Change) -> Option<Bytes> {
        if change.res != self.res || !self.in_scope(&change.key) {
            return None;
        }
        let now =
            change.kind != ChangeKind::Deleted && self.selector.matches_stored(&change.object);
        let before = change.prev.as_ref().is_some_and(|p| self.selector.matches_stored(p));
        match (change.kind, now, before) {
            (ChangeKind::Deleted, _, true) => Some(self.line("DELETED", &change.object)),
            (_, true, true) => Some(self.line("MODIFIED", &change.object)),
            (_, true, false) => Some(self.line("ADDED", &change.object)),
            (_, false, true) => {
                // Stopped matching: its previous state, at this change's resourceVersion.
                let mut last = change.prev.as_deref().map(Stored::tree).unwrap_or_default();
                last["metadata"]["resourceVersion"] = json!(change.rv.to_string());
                Some(self.line("DELETED", &Stored::new(&last)))
            }
            _ => None,
        }
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let resource = &RESOURCES[self.res];
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = match &self.shape {
            Shape::Full => json!({"kind": resource.kind, "apiVersion": resource.api_version(),
                "metadata": metadata}),
            Shape::Meta(version) | Shape::MetaList(version) => json!({
                "kind": "PartialObjectMetadata", "apiVersion": format!("meta.k8s.io/{version}"),
                "metadata": metadata}),
        };
        line(&json!({"type": "BOOKMARK", "object": object}))
    }
}

/// Streams one watch into `tx` until its timeout, an error, or the client leaves.
async fn run_watch(shared: Arc<Shared>, spec: WatchSpec, tx: mpsc::Sender<Bytes>) {
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let (mut changes, bookmark_every) = {
        let state = shared.state();
        (state.notify.subscribe(), state.bookmark_every)
    };
    let mut gone = shared.gone.subscribe();
    let plural = RESOURCES[spec.res].plural;
    let error = |status: &ApiError| line(&json!({"type": "ERROR", "object": status.body()}));
    let mut cursor = match spec.start {
        Start::Current => {
            changes.borrow_and_update();
            let (objects, rv) = {
                let state = shared.state();
                let lower = match &spec.namespace {
                    Some(ns) => Bound::Included((ns.clone(), String::new())),
                    None => Bound::Unbounded,
                };
                let objects: Vec<Arc<Stored>> = state.objects[spec.res]
                    .range((lower, Bound::Unbounded))
                    .take_while(|(k, _)| spec.in_scope(k))
                    .map(|(_, v)| v.clone())
                    .collect();
                (objects, state.resource_version)
            };
            for object in objects.iter().filter(|o| spec.selector.matches_stored(o)) {
                if tx.send(spec.line("ADDED", object)).await.is_err() {
                    return;
                }
            }
            // The end of the initial events is marked only for a client that takes bookmarks.
            if spec.initial_events
                && spec.bookmarks
                && tx.send(spec.bookmark(rv, true)).await.is_err()
            {
                return;
            }
            rv
        }
        Start::Now => {
            changes.borrow_and_update();
            shared.state().resource_version
        }
        // From a resourceVersion the server has not reached: no error (1.37's watch cache
        // registers the watcher and sends what comes after it).
        Start::From(n) => n,
    };
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + bookmark_every, bookmark_every);
    let mut bookmark_due = false;
    loop {
        changes.borrow_and_update();
        let batch = {
            let state = shared.state();
            if cursor < state.floor {
                Err(state.floor)
            } else {
                Ok((state.changes_after(cursor, spec.res), state.resource_version))
            }
        };
        match batch {
            Err(floor) => {
                let expired =
                    ApiError::expired(&format!("too old resource version: {cursor} ({floor})"));
                let _ = tx.send(error(&expired)).await;
                return;
            }
            Ok((batch, rv)) => {
                for change in &batch {
                    if let Some(line) = spec.render(change) {
                        if tx.send(line).await.is_err() {
                            return;
                        }
                    }
                }
                cursor = cursor.max(rv);
            }
        }
        if bookmark_due {
            bookmark_due = false;
            if tx.send(spec.bookmark(cursor, false)).await.is_err() {
                return;
            }
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = ticker.tick(), if spec.bookmarks => bookmark_due = true,
            expired = gone.recv() => match expired {
                Ok(p) if p == plural => {
                    let floor = shared.state().resource_version;
                    let expired = ApiError::expired(&format!("too old resource version: {cursor} ({floor})"));
                    let _ = tx.send(error(&expired)).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
                _ => {}
            },
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tx.closed() => return,
        }
    }
}

/// What the client's `Accept` asks for.
#[derive(Clone, Debug)]
enum Shape {
    Full,
    /// `as=PartialObjectMetadata`, with its meta.k8s.io version.
    Meta(&'static str),
    /// `as=PartialObjectMetadataList`.
    MetaList(&'static str),
}

impl Shape {
    /// For a single object (GET, WATCH). The real server answers a custom resource's GET in
    /// the list form with 500 "content is not a list"; this fake answers 406 for every kind.
    fn single(self, resource: &Resource) -> Result<Shape, ApiError> {
        match self {
            Shape::MetaList(_) => Err(ApiError::not_acceptable(&format!(
                "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
                resource.go_type(false)
            ))),
            shape => Ok(shape),
        }
    }

    /// For a LIST.
    fn list(self, resource: &Resource) -> Result<Shape, ApiError> {
        match self {
            Shape::Meta(_) => Err(ApiError::not_acceptable(&format!(
                "you requested PartialObjectMetadata, but the requested object is a list ({})",
                resource.go_type(true)
            ))),
            shape => Ok(shape),
        }
    }
}

/// POST and PUT bodies: JSON, or no Content-Type (which the real server takes as its first
/// serializer, JSON).
fn json_body_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get("content-type") else { return Ok(()) };
    let media =
        value.to_str().unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if media.is_empty() || media == "application/json" {
        Ok(())
    } else {
        Err(ApiError::unsupported_body())
    }
}

fn negotiate(headers: &HeaderMap, resource: &Resource) -> Result<Shape, ApiError> {
    let Some(accept) = headers.get("accept").and_then(|v| v.to_str().ok()) else {
        return Ok(Shape::Full);
    };
    if accept.trim().is_empty() {
        return Ok(Shape::Full);
    }
    for alternative in accept.split(',') {
        let mut parts = alternative.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        if !matches!(media.as_str(), "application/json" | "*/*" | "application/*") {
            continue;
        }
        let params: HashMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
        let Some(conversion) = params.get("as") else { return Ok(Shape::Full) };
        if params.get("g") != Some(&"meta.k8s.io") {
            continue;
        }
        let version = match params.get("v") {
            Some(&"v1") => "v1",
            Some(&"v1beta1") => "v1beta1",
            _ => continue,
        };
        match *conversion {
            "PartialObjectMetadata" => return Ok(Shape::Meta(version)),
            "PartialObjectMetadataList" => return Ok(Shape::MetaList(version)),
            _ => continue,
        }
    }
    // The real messages: go-restful's for built-in kinds, the CRD handler's for custom ones
    // (both name YAML and protobuf, which this fake does not serve).
    Err(if resource.custom {
        ApiError::not_acceptable(
            "only the following media types are accepted: application/json, application/yaml, \
             application/vnd.kubernetes.protobuf",
        )
    } else {
        ApiError::not_acceptable(
            "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, \
             application/vnd.kubernetes.protobuf",
        )
        .with_details(json!({}))
    })
}

#[derive(Clone, Debug)]
enum LabelReq {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Clone, Copy, Debug)]
enum Field {
    Name,
    Namespace,
}

#[derive(Clone, Debug)]
struct FieldReq {
    field: Field,
    value: String,
    equal: bool,
}

#[derive(Clone, Debug, Default)]
struct Selector {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

/// Splits at commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

fn label_key(key: &str) -> Result<String, ApiError> {
    let valid = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_owned())
    } else {
        Err(ApiError::bad_request(&format!(
            "unable to parse requirement: invalid label key {key:?}"
        )))
    }
}

fn label_value(value: &str) -> Result<String, ApiError> {
    let value = value.trim();
    if value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        Ok(value.to_owned())
    } else {
        Err(ApiError::bad_request(&format!(
            "unable to parse requirement: invalid label value {value:?}"
        )))
    }
}

fn label_requirement(term: &str) -> Result<LabelReq, ApiError> {
    let term = term.trim();
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelReq::NotExists(label_key(key.trim())?));
    }
    if let Some(open) = term.find('(') {
        let inner = term[open + 1..]
            .strip_suffix(')')
            .ok_or_else(|| ApiError::bad_request("unable to parse requirement: missing ')'"))?;
        let head = term[..open].trim();
        let (key, op) = head
            .rsplit_once(char::is_whitespace)
            .ok_or_else(|| ApiError::bad_request("unable to parse requirement: no operator"))?;
        let values = inner.split(',').map(label_value).collect::<Result<Vec<_>, _>>()?;
        let key = label_key(key.trim())?;
        return match op {
            "in" => Ok(LabelReq::In(key, values)),
            "notin" => Ok(LabelReq::NotIn(key, values)),
            _ => Err(ApiError::bad_request(&format!(
                "unable to parse requirement: unknown operator {op:?}"
            ))),
        };
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(LabelReq::NotEquals(label_key(k.trim())?, label_value(v)?));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelReq::Equals(label_key(k.trim())?, label_value(v)?));
    }
    Ok(LabelReq::Exists(label_key(term)?))
}

fn field_requirement(term: &str) -> Result<FieldReq, ApiError> {
    let term = term.trim();
    let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
        (f, v, false)
    } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        (f, v, true)
    } else {
        return Err(ApiError::bad_request(&format!(
            "invalid selector: '{term}'; can't understand '{term}'"
        )));
    };
    let field = match field.trim() {
        "metadata.name" => Field::Name,
        "metadata.namespace" => Field::Namespace,
        other => {
            return Err(ApiError::bad_request(&format!(
                "{other:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )));
        }
    };
    Ok(FieldReq { field, value: value.trim().to_owned(), equal })
}

impl Selector {
    fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Selector, ApiError> {
        let mut selector = Selector::default();
        if let Some(labels) = labels.filter(|s| !s.trim().is_empty()) {
            for term in split_terms(labels) {
                selector.labels.push(label_requirement(term)?);
            }
        }
        if let Some(fields) = fields.filter(|s| !s.trim().is_empty()) {
            for term in fields.split(',') {
                selector.fields.push(field_requirement(term)?);
            }
        }
        Ok(selector)
    }

    /// A stored object matches: its tree is built only when there is something to match.
    fn matches_stored(&self, object: &Stored) -> bool {
        (self.labels.is_empty() && self.fields.is_empty()) || self.matches(&object.tree())
    }

    fn matches(&self, object: &Value) -> bool {
        let label = |k: &str| object["metadata"]["labels"][k].as_str();
        let labels_match = self.labels.iter().all(|req| match req {
            LabelReq::Equals(k, v) => label(k) == Some(v),
            LabelReq::NotEquals(k, v) => label(k) != Some(v),
            LabelReq::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            LabelReq::Exists(k) => label(k).is_some(),
            LabelReq::NotExists(k) => label(k).is_none(),
        });
        labels_match
            && self.fields.iter().all(|req| {
                let actual = match req.field {
                    Field::Name => object["metadata"]["name"].as_str(),
                    Field::Namespace => object["metadata"]["namespace"].as_str(),
                }
                .unwrap_or("");
                (actual == req.value) == req.equal
            })
    }
}

/// The real continue token: base64 of the snapshot and the key after the last item, relative
/// to the listed prefix (`storage.EncodeContinue`): `/<name>\u0000` in one namespace or for a
/// cluster-scoped kind, `/<namespace>/<name>\u0000` across all namespaces.
fn encode_continue(snapshot: u64, last: &Value, target: &Target) -> String {
    let name = last["metadata"]["name"].as_str().unwrap_or("");
    let start = if target.resource().namespaced && target.namespace.is_none() {
        format!("/{}/{name}\u{0}", last["metadata"]["namespace"].as_str().unwrap_or(""))
    } else {
        format!("/{name}\u{0}")
    };
    let token = json!({"v": "meta.k8s.io/v1", "rv": snapshot, "start": start});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode_continue(token: &str, target: &Target) -> Result<(u64, ObjKey), ApiError> {
    let invalid = |why: &str| {
        ApiError::bad_request(&format!("invalid continue token: continue key is not valid: {why}"))
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|e| invalid(&e.to_string()))?;
    let token: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(&e.to_string()))?;
    if token["v"] != "meta.k8s.io/v1" {
        return Err(invalid("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"));
    }
    let rv = token["rv"].as_u64().ok_or_else(|| invalid("no resourceVersion"))?;
    let start = token["start"].as_str().ok_or_else(|| invalid("no start key"))?;
    let start = start.trim_end_matches('\u{0}');
    let start = start.strip_prefix('/').ok_or_else(|| invalid("the start key is not a path"))?;
    let key = match &target.namespace {
        Some(ns) => (ns.clone(), start.to_owned()),
        None if target.resource().namespaced => {
            let (ns, name) = start.split_once('/').ok_or_else(|| invalid("no namespace"))?;
            (ns.to_owned(), name.to_owned())
        }
        None => (String::new(), start.to_owned()),
    };
    Ok((rv, key))
}

fn parse_rv(rv: &str) -> Result<u64, ApiError> {
    rv.parse().map_err(|_| ApiError::bad_request(&format!("invalid resource version: {rv:?}")))
}

fn parse_query(raw: &str) -> HashMap<String, String> {
    raw.split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect()
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

async fn read_body(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| ApiError::bad_request(&format!("cannot read the request body: {e}")))
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(&e.to_string()))
}

/// A POST or PUT body: a JSON object of this resource's type (or untyped).
fn parse_object(body: &[u8], resource: &Resource) -> Result<Value, ApiError> {
    let object = parse_json(body)?;
    if !object.is_object() {
        return Err(ApiError::bad_request("the request body is not a JSON object"));
    }
    if let Some(api_version) = object["apiVersion"].as_str() {
        if api_version != resource.api_version() {
            return Err(ApiError::bad_request(&format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                resource.api_version()
            )));
        }
    }
    if let Some(kind) = object["kind"].as_str() {
        if kind != resource.kind {
            return Err(ApiError::bad_request(&format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                resource.kind
            )));
        }
    }
    Ok(object)
}

/// The body's name and namespace, if set, must be the URL's.
fn check_name(object: &Value, target: &Target) -> Result<(), ApiError> {
    let name = target.name.as_deref().unwrap_or("");
    if let Some(sent) = object["metadata"]["name"].as_str() {
        if sent != name {
            return Err(ApiError::bad_request(&format!(
                "the name of the object ({sent}) does not match the name on the URL ({name})"
            )));
        }
    }
    if let (Some(sent), Some(ns)) = (object["metadata"]["namespace"].as_str(), &target.namespace) {
        if sent != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    Ok(())
}

/// What Go's `omitempty` leaves out when the real server stores and serves an object: empty or
/// null metadata fields (`labels: {}`, `annotations: null`, `generateName: ""`, ...), and the
/// empty `data`/`binaryData` of a ConfigMap or Secret.
fn omit_empty(object: &mut Value, resource: &Resource) {
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    };
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.retain(|_, v| !empty(v));
    }
    if resource.group.is_empty() && matches!(resource.kind, "ConfigMap" | "Secret") {
        if let Some(fields) = object.as_object_mut() {
            fields.retain(|k, v| !(matches!(k.as_str(), "data" | "binaryData") && empty(v)));
        }
    }
}

/// Five characters from the API server's `generateName` alphabet.
fn random_suffix(seed: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (0..5)
        .map(|i| {
            let index = usize::try_from((x >> (i * 8)) & 0xff).unwrap_or(0) % ALPHABET.len();
            char::from(ALPHABET[index])
        })
        .collect()
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let hex = |b: u8| char::from(b).to_digit(16);
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Decrement(Arc<Shared>);

impl Drop for Decrement {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How a stored object appears in an answer.
#[derive(Clone, Debug)]
enum ItemShape {
    /// As stored, with apiVersion and kind (GET, watch events).
    Full,
    /// Without apiVersion and kind (list items).
    Bare,
    /// `PartialObjectMetadata` with its apiVersion and kind.
    Meta(&'static str),
    /// Only `metadata` (metadata-only list items).
    MetaBare,
}

struct Item<'a> {
    object: &'a Stored,
    shape: ItemShape,
}

impl<'a> Item<'a> {
    fn single(object: &'a Stored, shape: &Shape) -> Item<'a> {
        let shape = match shape {
            Shape::Full => ItemShape::Full,
            Shape::Meta(v) | Shape::MetaList(v) => ItemShape::Meta(v),
        };
        Item { object, shape }
    }
}

impl Serialize for Item<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Every stored object is a JSON object with `metadata` (`State::store`).
        match &self.shape {
            ItemShape::Full => self.object.raw().serialize(serializer),
            ItemShape::Bare => {
                let fields = self.object.fields();
                let mut map = serializer.serialize_map(None)?;
                for (k, v) in fields.iter().filter(|(k, _)| *k != "apiVersion" && *k != "kind") {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            ItemShape::Meta(version) => {
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("kind", "PartialObjectMetadata")?;
                map.serialize_entry("apiVersion", &format!("meta.k8s.io/{version}"))?;
                map.serialize_entry("metadata", &self.object.metadata())?;
                map.end()
            }
            ItemShape::MetaBare => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("metadata", &self.object.metadata())?;
                map.end()
            }
        }
    }
}

#[derive(Serialize)]
struct ListBody<'a> {
    kind: &'a str,
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    metadata: Value,
    items: Vec<Item<'a>>,
}

#[derive(Serialize)]
struct EventLine<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: Item<'a>,
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

fn line<T: Serialize + ?Sized>(value: &T) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn bytes_response(code: StatusCode, body: Bytes) -> Response<Body> {
    let full = Full::new(body).map_err(|never| match never {});
    let mut response = Response::new(full.boxed());
    *response.status_mut() = code;
    response.headers_mut().insert("content-type", "application/json".parse().expect("header"));
    response
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    bytes_response(code, to_json(body))
}

/// An error answered as a `Status` body (or, for `page_not_found`, as Go's plain-text 404).
#[derive(Debug)]
struct ApiError {
    code: u16,
    /// Empty: the Status has no `reason` (as for the real server's "resourceVersion should not
    /// be set" 500).
    reason: &'static str,
    message: String,
    details: Option<Value>,
    /// Answered as `text/plain` "404 page not found", not as a Status.
    plain: bool,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: &str) -> ApiError {
        ApiError { code, reason, message: message.to_owned(), details: None, plain: false }
    }

    fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// The real server's answer to `system:anonymous` (a request without a bearer token) for
    /// anything but the public paths: RBAC's denial, worded by `forbiddenMessage` and
    /// `NewForbidden` (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go`).
    fn forbidden(request: &RequestInfo) -> ApiError {
        let user = "system:anonymous";
        let Some(resource) = &request.resource else {
            return ApiError::new(
                403,
                "Forbidden",
                &format!(
                    "forbidden: User \"{user}\" cannot {} path \"{}\"",
                    request.verb, request.path
                ),
            )
            .with_details(json!({}));
        };
        let full = match &request.subresource {
            Some(sub) => format!("{}/{sub}", resource.name),
            None => resource.name.clone(),
        };
        let scope = match &request.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_owned(),
        };
        let why = format!(
            "User \"{user}\" cannot {} resource \"{full}\" in API group \"{}\" {scope}",
            request.verb, resource.group
        );
        let qualified = if resource.group.is_empty() {
            resource.name.clone()
        } else {
            format!("{}.{}", resource.name, resource.group)
        };
        let mut details = json!({"kind": resource.name});
        if !resource.group.is_empty() {
            details["group"] = json!(resource.group);
        }
        let message = match &request.name {
            Some(name) => {
                details["name"] = json!(name);
                format!("{qualified} \"{name}\" is forbidden: {why}")
            }
            None => format!("{qualified} is forbidden: {why}"),
        };
        ApiError::new(403, "Forbidden", &message).with_details(details)
    }

    /// What Go's `http.NotFound` answers: the real server's answer for a group or version it
    /// does not serve (no Status).
    fn page_not_found() -> ApiError {
        ApiError { plain: true, ..ApiError::new(404, "NotFound", "404 page not found") }
    }

    /// 422 for query parameters that `ValidateListOptions` refuses: `(field, error)` pairs,
    /// each error already worded as `field.Error.ErrorBody()` ("Forbidden: ...").
    fn invalid_list_options(errors: &[(&str, &str, String)]) -> ApiError {
        let bodies: Vec<String> =
            errors.iter().map(|(field, _, body)| format!("{field}: {body}")).collect();
        let joined =
            if bodies.len() == 1 { bodies[0].clone() } else { format!("[{}]", bodies.join(", ")) };
        let causes: Vec<Value> = errors
            .iter()
            .map(|(field, reason, body)| json!({"reason": reason, "message": body, "field": field}))
            .collect();
        ApiError::new(422, "Invalid", &format!("ListOptions.meta.k8s.io \"\" is invalid: {joined}"))
            .with_details(json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes}))
    }

    fn no_resource() -> ApiError {
        ApiError::new(404, "NotFound", "the server could not find the requested resource")
            .with_details(json!({}))
    }

    fn method() -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    fn not_found(resource: &Resource, name: &str) -> ApiError {
        ApiError::new(404, "NotFound", &format!("{} \"{name}\" not found", resource.qualified()))
            .with_details(resource.details(name))
    }

    fn already_exists(resource: &Resource, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            &format!("{} \"{name}\" already exists", resource.qualified()),
        )
        .with_details(resource.details(name))
    }

    fn conflict(resource: &Resource, name: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                resource.qualified()
            ),
        )
        .with_details(resource.details(name))
    }

    fn bad_request(message: &str) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// A field the object must have: `ConfigMap "" is invalid: metadata.name: Required value:
    /// ...` (`NewInvalid` names the kind, not the resource).
    fn required_field(resource: &Resource, name: &str, field: &str, detail: &str) -> ApiError {
        let body = format!("Required value: {detail}");
        let mut details = resource.kind_details(name);
        details["causes"] =
            json!([{"reason": "FieldValueRequired", "message": body, "field": field}]);
        ApiError::new(
            422,
            "Invalid",
            &format!("{} \"{name}\" is invalid: {field}: {body}", resource.qualified_kind()),
        )
        .with_details(details)
    }

    fn expired(message: &str) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    fn too_large(wanted: u64, current: u64) -> ApiError {
        ApiError::new(
            504,
            "Timeout",
            &format!("Timeout: Too large resource version: {wanted}, current: {current}"),
        )
        .with_details(json!({"causes": [{"reason": "ResourceVersionTooLarge",
            "message": "Too large resource version"}], "retryAfterSeconds": 1}))
    }

    fn not_acceptable(message: &str) -> ApiError {
        ApiError::new(406, "NotAcceptable", message)
    }

    /// A PATCH whose content type is not a patch type of this resource. Built-in kinds are
    /// served by go-restful, which refuses a type outside the route's `Consumes` itself
    /// ("415: Unsupported Media Type"); custom resources reach the patch handler, which lists
    /// the types (server-side apply among them).
    fn unsupported_patch(resource: &Resource) -> ApiError {
        if resource.custom {
            ApiError::new(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            )
        } else {
            ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type")
                .with_details(json!({}))
        }
    }

    /// A POST or PUT body in a format other than JSON (the real server also takes YAML and
    /// protobuf; this fake refuses them).
    fn unsupported_body() -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )
    }

    /// A fault injected by a test.
    fn injected(code: u16) -> ApiError {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            406 => "NotAcceptable",
            409 => "Conflict",
            410 => "Expired",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        ApiError::new(code, reason, &format!("injected failure (HTTP {code})"))
    }

    fn body(&self) -> Value {
        let mut body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "code": self.code});
        if !self.reason.is_empty() {
            body["reason"] = json!(self.reason);
        }
        if let Some(details) = &self.details {
            body["details"] = details.clone();
        }
        body
    }

    fn response(&self) -> Response<Body> {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if self.plain {
            let full = Full::new(Bytes::from(format!("{}\n", self.message)))
                .map_err(|never| match never {});
            let mut response = Response::new(full.boxed());
            *response.status_mut() = code;
            let headers = response.headers_mut();
            headers.insert("content-type", "text/plain; charset=utf-8".parse().expect("header"));
            headers.insert("x-content-type-options", "nosniff".parse().expect("header"));
            return response;
        }
        let mut response = json_response(code, &self.body());
        if self.code == 429 {
            response.headers_mut().insert("retry-after", "1".parse().expect("header"));
        }
        response
    }
}
