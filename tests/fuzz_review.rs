//! A fuzzing campaign on stable Rust: generated hostile AdmissionReviews sent
//! through the whole HTTP application in-process (`router` with body limit,
//! parsing, planning, lookups against an in-memory source, digests, encoding).
//!
//! Every answer must come without a panic, with status 200, 400 or 413 (413
//! exactly when the body is over 8 MiB, 200 whenever the body is a
//! well-formed review), as a valid AdmissionReview for the same uid whose
//! patch applies to the object, within a CPU-time bound linear in the body,
//! and allocating at most a fixed multiple of the body (measured by a
//! counting global allocator, so the cases run one at a time).
//!
//! `PROPTEST_CASES` sets the number of cases (default 150, ~10 s in a debug
//! build); `make fuzz` runs a long campaign in release. Add `-- --nocapture`
//! to see the summary: cases, answers by status, the slowest case and the
//! largest allocation relative to the body.

#[path = "support/hostile.rs"]
mod hostile;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::io::Read as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use base64::Engine as _;
use configsum::core::Request as CoreRequest;
use configsum::core::{
    AnnotationDomain, DigestKeys, Digester, LookupErrorPolicy, ObjectContent, ObjectRef, Settings,
    WorkloadKind, plan_review,
};
use configsum::lookup::{LookupError, ObjectSource};
use configsum::process::Readiness;
use configsum::webhook::WebhookMetrics;
use configsum::webhook::admission::{parse_review, plan};
use configsum::webhook::api::{AppState, MAX_BODY_BYTES, router};
use hostile::{Built, Case, J, obj, s};
use http_body_util::BodyExt as _;
use json_patch::PatchOperation;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestError, TestRunner};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tower::ServiceExt as _;

// ---------------------------------------------------------------- allocation

/// `System`, counting the bytes currently allocated and the most since the last reset.
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    CURRENT.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Starts a measurement: the peak becomes the current total, which is returned.
fn reset_peak() -> usize {
    let now = CURRENT.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// CPU time of this thread, from `/proc/thread-self/schedstat` (nanoseconds
/// on CPU); `None` where that file does not exist. Reads into the stack:
/// no allocation disturbs the count.
fn thread_cpu() -> Option<Duration> {
    let mut file = std::fs::File::open("/proc/thread-self/schedstat").ok()?;
    let mut buf = [0u8; 96];
    let n = file.read(&mut buf).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let nanos = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

// ------------------------------------------------------------------- bounds

const MIB: usize = 1 << 20;

/// Allocation during one review may reach factor × body + `MEMORY_CONSTANT`.
/// Well-formed reviews measured at most 15× (thousands of distinct owned
/// annotations: the map, its sorted copy and a `remove` per key in the patch).
/// Hostile ones reach 91×: a `volumes` list of `{}` makes a 136-byte struct
/// from 3 bytes of body, in a `Vec` up to half empty after doubling (see
/// `the_costliest_known_shapes_stay_within_bounds`). The bounds leave room
/// above those; growth faster than linear, or a costlier shape, fails them.
const WELL_FORMED_FACTOR: usize = 16;
const HOSTILE_FACTOR: usize = 16;
const MEMORY_CONSTANT: usize = 2 * MIB;

/// CPU time per review. Loose on purpose, so the bound never flakes: the
/// costliest shape measured (distinct `track` tokens: four B-tree inserts and
/// three allocations each) takes 130 ms per MiB in release, 550 ms in debug.
const TIME_BASE: Duration =
    if cfg!(debug_assertions) { Duration::from_secs(2) } else { Duration::from_millis(100) };
const TIME_PER_MIB: Duration =
    if cfg!(debug_assertions) { Duration::from_secs(2) } else { Duration::from_millis(250) };

fn time_bound(len: usize) -> Duration {
    TIME_BASE + TIME_PER_MIB.mul_f64(len as f64 / MIB as f64)
}

fn memory_bound(len: usize, well_formed: bool) -> usize {
    let factor = if well_formed { WELL_FORMED_FACTOR } else { HOSTILE_FACTOR };
    factor * len + MEMORY_CONSTANT
}

/// Planted in odd containers' images: no answer may quote it back.
const MARKER: &str = "hunter2-marker";

// ------------------------------------------------------------------- harness

/// ConfigMaps and Secrets from nowhere: whether a name exists, is missing or
/// fails to read follows from a hash of it, so every outcome is exercised.
struct Synthetic;

impl ObjectSource for Synthetic {
    async fn fetch(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
        let hash =
            namespace.bytes().chain(object.name.bytes()).fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        match hash % 10 {
            0..=5 => {
                let entries = (0..4)
                    .map(|i| (format!("k{i}"), format!("{}-{hash}-{i}", object.name).into_bytes()))
                    .collect();
                Ok(Some(Arc::new(ObjectContent::from_entries(entries))))
            }
            6 | 7 => Ok(None),
            8 => Err(LookupError::Status(503)),
            _ => Err(LookupError::Timeout),
        }
    }

    /// Tracked workloads: found (a small template), missing or unreadable by their name.
    async fn fetch_template(
        &self,
        _namespace: &str,
        _kind: WorkloadKind,
        name: &str,
    ) -> Result<Option<Value>, LookupError> {
        match name.len() % 3 {
            0 => Ok(Some(serde_json::json!({"metadata": {"annotations": {
                "deployment.configsum.dev/w": "sha256:0"}}, "spec": {"containers": [{"name": name}]}}))),
            1 => Ok(None),
            _ => Err(LookupError::Status(503)),
        }
    }
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    allow: Arc<AppState<Synthetic>>,
    deny: Arc<AppState<Synthetic>>,
}

/// One answer and what it cost.
struct Answer {
    status: StatusCode,
    body: Bytes,
    cpu: Duration,
    wall: Duration,
    /// Most bytes allocated at once during the review, above what was allocated before it.
    peak: usize,
}

impl Harness {
    fn new() -> Self {
        let state = |on_lookup_error| {
            let settings = Settings { on_lookup_error, ..Settings::default() };
            let keys = DigestKeys::parse(b"0123456789abcdef0123456789abcdef").expect("key");
            Arc::new(AppState::new(
                Synthetic,
                Digester::new(keys),
                settings,
                Duration::from_secs(2),
                WebhookMetrics::default(),
                Readiness::new(true),
            ))
        };
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
        Harness {
            runtime,
            allow: state(LookupErrorPolicy::Allow),
            deny: state(LookupErrorPolicy::Deny),
        }
    }

    /// Sends `body` through the router on this thread, measuring the review alone:
    /// the request is built before and the answer inspected after.
    fn send(&self, deny: bool, uri: &str, body: Vec<u8>) -> Answer {
        let state = if deny { &self.deny } else { &self.allow };
        let app = router(state.clone());
        let request = Request::post(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .expect("a request");
        let before = reset_peak();
        let (cpu_before, started) = (thread_cpu(), Instant::now());
        let (status, body) = self.runtime.block_on(async move {
            let response = app.oneshot(request).await.expect("the router is infallible");
            let status = response.status();
            let body = response.into_body().collect().await.expect("an answer body").to_bytes();
            (status, body)
        });
        let wall = started.elapsed();
        let cpu = match (cpu_before, thread_cpu()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => wall,
        };
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        Answer { status, body, cpu, wall, peak }
    }
}

/// The tests share the allocation counters: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// -------------------------------------------------------------------- checks

/// How a review was answered, for the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Rejected(u16),
    Allowed { patch: bool, warnings: bool },
    Denied,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    request: &'a RawValue,
}

/// The request's fields a 200 answer is checked against, read no more
/// strictly than the webhook reads them.
#[derive(Deserialize)]
struct Sent<'a> {
    uid: String,
    #[serde(borrow)]
    kind: &'a RawValue,
    #[serde(default, borrow)]
    object: Option<&'a RawValue>,
}

fn sent(body: &[u8]) -> Result<Sent<'_>, String> {
    let envelope: Envelope<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    serde_json::from_str(envelope.request.get()).map_err(|e| e.to_string())
}

fn is_pod(kind: &RawValue) -> bool {
    let kind: Value = serde_json::from_str(kind.get()).unwrap_or_default();
    kind["group"].as_str().unwrap_or("").is_empty()
        && kind["version"] == "v1"
        && kind["kind"] == "Pod"
}

/// Each operation adds or removes a configsum-owned annotation, or creates an
/// annotations map (or its metadata) that did not exist.
fn check_patch_paths(object: &Value, pod: bool, patch: &[PatchOperation]) -> Result<(), String> {
    let annotations =
        if pod { "/metadata/annotations" } else { "/spec/template/metadata/annotations" };
    let metadata = annotations.trim_end_matches("/annotations");
    let domain = AnnotationDomain::default();
    for op in patch {
        let (path, value) = match op {
            PatchOperation::Add(add) => (add.path.to_string(), Some(&add.value)),
            PatchOperation::Remove(remove) => (remove.path.to_string(), None),
            other => return Err(format!("unexpected operation {other:?}")),
        };
        if path == annotations || path == metadata {
            if object.pointer(&path).is_some_and(|v| !v.is_null()) {
                return Err(format!("{path} exists and would be replaced"));
            }
            continue;
        }
        let key = path
            .strip_prefix(annotations)
            .and_then(|k| k.strip_prefix('/'))
            .ok_or_else(|| format!("{path} is outside the annotations"))?;
        let key = key.replace("~1", "/").replace("~0", "~");
        if !domain.owns(&key) {
            return Err(format!("{key:?} is not a configsum annotation"));
        }
        if value.is_some_and(|v| !v.is_string()) {
            return Err(format!("{path} gets a value that is not a string"));
        }
    }
    Ok(())
}

/// The worst value seen, with the body size and the case that produced it.
struct Worst<T> {
    value: T,
    len: usize,
    case: String,
}

impl<T: PartialOrd + Copy> Worst<T> {
    fn offer(slot: &mut Option<Self>, value: T, len: usize, case: &dyn Fn() -> String) {
        if slot.as_ref().is_none_or(|w| value > w.value) {
            *slot = Some(Worst { value, len, case: case() });
        }
    }
}

/// Tallies of a campaign.
#[derive(Default)]
struct Stats {
    cases: usize,
    outcomes: BTreeMap<Outcome, usize>,
    patches_applied: usize,
    /// Patches not applied because the object holds what `serde_json::Value`
    /// refuses: a lone surrogate or nesting past 128 levels in a field configsum skips.
    patches_unchecked: usize,
    largest_body: usize,
    total_bytes: usize,
    max_wall: Duration,
    max_cpu: Option<Worst<Duration>>,
    /// CPU time per MiB, among bodies of 1 MiB or more.
    max_cpu_per_mib: Option<Worst<Duration>>,
    max_peak: Option<Worst<usize>>,
    /// Allocated / body, among bodies of 256 KiB or more: well-formed, then hostile.
    max_ratio: [Option<Worst<f64>>; 2],
}

impl Stats {
    fn record(
        &mut self,
        len: usize,
        answer: &Answer,
        outcome: Outcome,
        well_formed: bool,
        case: &dyn Fn() -> String,
    ) {
        self.cases += 1;
        *self.outcomes.entry(outcome).or_default() += 1;
        self.largest_body = self.largest_body.max(len);
        self.total_bytes += len;
        self.max_wall = self.max_wall.max(answer.wall);
        Worst::offer(&mut self.max_cpu, answer.cpu, len, case);
        if len >= MIB {
            let per_mib = answer.cpu.div_f64(len as f64 / MIB as f64);
            Worst::offer(&mut self.max_cpu_per_mib, per_mib, len, case);
        }
        Worst::offer(&mut self.max_peak, answer.peak, len, case);
        if len >= 256 * 1024 {
            let ratio = answer.peak as f64 / len as f64;
            Worst::offer(&mut self.max_ratio[usize::from(!well_formed)], ratio, len, case);
        }
    }

    fn print(&self, title: &str) {
        let mib = |n: usize| n as f64 / MIB as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let build = if cfg!(debug_assertions) { "debug" } else { "release" };
        eprintln!("{title} ({build} build)");
        eprintln!(
            "  cases: {}, {:.1} MiB sent, largest body {:.2} MiB",
            self.cases,
            mib(self.total_bytes),
            mib(self.largest_body)
        );
        for (outcome, n) in &self.outcomes {
            eprintln!("  {outcome:?}: {n}");
        }
        eprintln!(
            "  patches applied to their object: {}; not checked (object not a serde_json::Value): {}",
            self.patches_applied, self.patches_unchecked
        );
        eprintln!("  max wall time per case: {:.1} ms", ms(self.max_wall));
        if let Some(w) = &self.max_cpu {
            eprintln!(
                "  max CPU per case: {:.1} ms, body {:.2} MiB: {}",
                ms(w.value),
                mib(w.len),
                w.case
            );
        }
        if let Some(w) = &self.max_cpu_per_mib {
            eprintln!(
                "  max CPU per MiB (bodies >= 1 MiB): {:.1} ms, body {:.2} MiB: {}",
                ms(w.value),
                mib(w.len),
                w.case
            );
        }
        if let Some(w) = &self.max_peak {
            eprintln!(
                "  max allocated during a review: {:.2} MiB, body {:.2} MiB: {}",
                mib(w.value),
                mib(w.len),
                w.case
            );
        }
        for (class, worst, factor) in [
            ("well-formed", &self.max_ratio[0], WELL_FORMED_FACTOR),
            ("hostile", &self.max_ratio[1], HOSTILE_FACTOR),
        ] {
            if let Some(w) = worst {
                eprintln!(
                    "  max allocated / body, {class} bodies >= 256 KiB: {:.2}x (bound {factor}x + {} MiB), body {:.2} MiB: {}",
                    w.value,
                    MEMORY_CONSTANT / MIB,
                    mib(w.len),
                    w.case
                );
            }
        }
    }
}

/// Everything an answer must be, whatever the body was.
fn check(built: &Built, deny: bool, answer: &Answer, stats: &mut Stats) -> Result<Outcome, String> {
    let len = built.body.len();
    let mib = len as f64 / MIB as f64;
    if answer.cpu > time_bound(len) {
        return Err(format!(
            "{:?} of CPU for a {mib:.2} MiB body (bound {:?})",
            answer.cpu,
            time_bound(len)
        ));
    }
    if answer.peak > memory_bound(len, built.well_formed) {
        return Err(format!(
            "{} bytes allocated for a {len}-byte body ({:.1}x; bound {} bytes)",
            answer.peak,
            answer.peak as f64 / len.max(1) as f64,
            memory_bound(len, built.well_formed)
        ));
    }
    let status = answer.status;
    if ![StatusCode::OK, StatusCode::BAD_REQUEST, StatusCode::PAYLOAD_TOO_LARGE].contains(&status) {
        return Err(format!("status {status}"));
    }
    if (status == StatusCode::PAYLOAD_TOO_LARGE) != (len > MAX_BODY_BYTES) {
        return Err(format!("status {status} for a body of {len} bytes (limit {MAX_BODY_BYTES})"));
    }
    if built.well_formed && len <= MAX_BODY_BYTES && status != StatusCode::OK {
        let text = String::from_utf8_lossy(&answer.body);
        return Err(format!("a well-formed review got {status}: {text}"));
    }
    if answer.body.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()) {
        return Err("the answer quotes the body".into());
    }
    let answer_json: Value =
        serde_json::from_slice(&answer.body).map_err(|e| format!("the answer is not JSON: {e}"))?;
    if status != StatusCode::OK {
        if answer_json["error"].as_str().is_none_or(str::is_empty) {
            return Err(format!("a {status} without an error message: {answer_json}"));
        }
        return Ok(Outcome::Rejected(status.as_u16()));
    }

    if answer.body.len() > 4 * len + 64 * 1024 {
        return Err(format!("a {}-byte answer to a {len}-byte body", answer.body.len()));
    }
    if answer_json["apiVersion"] != "admission.k8s.io/v1"
        || answer_json["kind"] != "AdmissionReview"
    {
        return Err(format!("not an AdmissionReview v1: {answer_json:.200}"));
    }
    let response = &answer_json["response"];
    let sent = sent(&built.body)
        .map_err(|e| format!("answered 200 to a body whose request does not parse: {e}"))?;
    if response["uid"].as_str() != Some(sent.uid.as_str()) {
        return Err("the answer's uid is not the request's".into());
    }
    same_plan_in_place_and_from_text(&built.body, &sent)?;
    let warnings = match response.get("warnings") {
        None => Vec::new(),
        Some(Value::Array(warnings)) => warnings.clone(),
        Some(other) => return Err(format!("warnings is not an array: {other:.200}")),
    };
    if warnings.len() > 11 {
        return Err(format!("{} warnings", warnings.len()));
    }
    for warning in &warnings {
        let warning = warning.as_str().ok_or("a warning that is not a string")?;
        if warning.chars().count() >= 120 {
            return Err(format!("a warning of {} characters", warning.chars().count()));
        }
    }
    if warnings.len() == 11 && !warnings[10].as_str().is_some_and(|w| w.starts_with("and ")) {
        return Err("an eleventh warning that is not the count".into());
    }
    let allowed = response["allowed"].as_bool().ok_or("no allowed flag")?;
    if !allowed {
        let message = response["status"]["message"].as_str().unwrap_or("");
        if !deny || response["status"]["code"] != 503 || !message.contains("could not read") {
            return Err(format!("denied without cause: {response:.300}"));
        }
        if response.get("patch").is_some() {
            return Err("a denial with a patch".into());
        }
        return Ok(Outcome::Denied);
    }
    let Some(patch) = response.get("patch") else {
        if response.get("patchType").is_some() {
            return Err("patchType without a patch".into());
        }
        return Ok(Outcome::Allowed { patch: false, warnings: !warnings.is_empty() });
    };
    if response["patchType"] != "JSONPatch" {
        return Err("a patch that is not a JSONPatch".into());
    }
    let encoded = patch.as_str().ok_or("the patch is not a string")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("the patch is not base64: {e}"))?;
    let ops: Vec<PatchOperation> = serde_json::from_slice(&decoded)
        .map_err(|e| format!("the patch is not a JSON Patch: {e}"))?;
    if ops.is_empty() {
        return Err("an empty patch was sent".into());
    }
    let object = sent.object.ok_or("a patch for a request without an object")?;
    match serde_json::from_str::<Value>(object.get()) {
        Ok(object) => {
            check_patch_paths(&object, is_pod(sent.kind), &ops)?;
            let mut patched = object;
            json_patch::patch(&mut patched, &ops)
                .map_err(|e| format!("the patch does not apply to the object: {e}"))?;
            stats.patches_applied += 1;
        }
        Err(_) => stats.patches_unchecked += 1,
    }
    Ok(Outcome::Allowed { patch: true, warnings: !warnings.is_empty() })
}

/// The webhook reads the object of a review it mutates in place, in its pass over the body;
/// render, explain and the fallback read it from its text. Both must plan the same.
fn same_plan_in_place_and_from_text(body: &[u8], sent: &Sent<'_>) -> Result<(), String> {
    let settings = Settings::default();
    let mut request = parse_review(body).map_err(|e| format!("answered 200, but: {e}"))?;
    let read = request.take_read();
    let in_place = format!("{:?}", plan(&request.as_core(), read, body, &settings));
    let object = sent.object.map(RawValue::get).filter(|o| *o != "null");
    let from_text =
        format!("{:?}", plan_review(&CoreRequest { object, ..request.as_core() }, &settings));
    if in_place != from_text {
        return Err(format!("read in place: {in_place:.400}\nfrom text: {from_text:.400}"));
    }
    Ok(())
}

/// Where a failing body is written, so it can be replayed with curl.
fn keep_failing_body(body: &[u8]) -> String {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz_review-failure.json");
    match std::fs::write(&path, body) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(not written: {e})"),
    }
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok()?.parse().ok()
}

// --------------------------------------------------------------------- tests

#[test]
fn hostile_reviews_are_answered_within_bounds() {
    let _serial = serial();
    let config = Config {
        cases: env_number("PROPTEST_CASES").unwrap_or(150),
        // Bodies reach megabytes: cap shrinking rather than the campaign.
        max_shrink_time: env_number("PROPTEST_MAX_SHRINK_TIME").unwrap_or(120_000),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        source_file: Some(file!()),
        ..Config::default()
    };
    let harness = Harness::new();
    let stats = std::cell::RefCell::new(Stats::default());
    let mut runner = TestRunner::new(config);
    let result = runner.run(&hostile::case(), |case: Case| {
        let built = case.build(MAX_BODY_BYTES);
        let answer = harness.send(case.deny, &built.uri, built.body.clone());
        let mut stats = stats.borrow_mut();
        match check(&built, case.deny, &answer, &mut stats) {
            Ok(outcome) => {
                let describe = || case.summary();
                stats.record(built.body.len(), &answer, outcome, built.well_formed, &describe);
                Ok(())
            }
            Err(why) => {
                let kept = keep_failing_body(&built.body);
                Err(TestCaseError::fail(format!("{why} (body in {kept})")))
            }
        }
    });
    stats.borrow().print("fuzz_review: hostile AdmissionReviews");
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, case)) => panic!("{why}\nminimal case: {case:#?}"),
        Err(e) => panic!("{e}"),
    }
}

/// A minimal valid Deployment review; `place` names where `inner` goes:
/// `x` is a pod spec field configsum skips, `containers` one it reads.
fn review_with(place: &str, inner: J) -> Vec<u8> {
    let env_from = J::Arr(vec![obj([("configMapRef", obj([("name", s("cm-0"))]))])]);
    let mut containers = J::Arr(vec![obj([("name", s("c")), ("envFrom", env_from)])]);
    let mut x = J::Null;
    let mut kind = obj([("group", s("apps")), ("version", s("v1")), ("kind", s("Deployment"))]);
    let mut old = J::Null;
    match place {
        "x" => x = inner,
        "containers" => containers = inner,
        "kind" => kind = inner,
        "oldObject" => old = inner,
        _ => unreachable!("{place}"),
    }
    let object = obj([
        ("apiVersion", s("apps/v1")),
        ("kind", s("Deployment")),
        ("metadata", obj([("name", s("w"))])),
        ("spec", obj([("template", obj([("spec", obj([("containers", containers), ("x", x)]))]))])),
    ]);
    let request = obj([
        ("uid", s("u")),
        ("kind", kind),
        ("operation", s("UPDATE")),
        ("namespace", s("shop")),
        ("object", object),
        ("oldObject", old),
    ]);
    obj([
        ("apiVersion", s("admission.k8s.io/v1")),
        ("kind", s("AdmissionReview")),
        ("request", request),
    ])
    .to_bytes()
}

/// serde_json's recursion limit (128) guards what is parsed into types, and
/// configsum's types are shallow: a value nested deeper than that where a type
/// is expected is refused at its first level. Fields configsum skips, and the
/// raw `object`, are skipped iteratively by serde_json with no limit (one
/// byte per level, in a stack kept on the heap): any depth is answered as if
/// the nesting were not there, with no recursion to overflow the thread's stack.
#[test]
fn deep_nesting_is_skipped_or_refused_never_recursed() {
    let _serial = serial();
    let harness = Harness::new();
    let mut stats = Stats::default();
    let send = |stats: &mut Stats, place: &str, depth: usize, object: bool| {
        let nest = J::Nest { depth, object, inner: Box::new(J::Null) };
        let built =
            Built { body: review_with(place, nest), uri: "/mutate".into(), well_formed: false };
        let answer = harness.send(false, &built.uri, built.body.clone());
        let outcome = check(&built, false, &answer, stats)
            .unwrap_or_else(|why| panic!("{place} at depth {depth}: {why}"));
        stats.record(built.body.len(), &answer, outcome, false, &|| {
            format!("{place} at depth {depth}")
        });
        let json: Value = serde_json::from_slice(&answer.body).expect("JSON");
        (answer.status, json["response"].clone())
    };
    let (status, flat) = send(&mut stats, "x", 0, false);
    assert_eq!(status, StatusCode::OK);
    assert!(flat["patch"].is_string() || flat["warnings"].is_array(), "{flat}");
    for (depth, object) in [127, 128, 129, 100_000]
        .into_iter()
        .flat_map(|depth| [(depth, false), (depth, true)])
        .chain([(1_000_000, false)])
    {
        for place in ["x", "oldObject"] {
            let (status, response) = send(&mut stats, place, depth, object);
            assert_eq!(status, StatusCode::OK, "{place} at depth {depth}");
            assert_eq!(response, flat, "{place} at depth {depth} changed the answer");
        }
        let (status, response) = send(&mut stats, "containers", depth, object);
        assert_eq!(status, StatusCode::OK, "containers at depth {depth}");
        let warning = response["warnings"][0].as_str().unwrap_or_default();
        assert!(warning.contains("does not parse"), "containers at depth {depth}: {response}");
        assert!(response.get("patch").is_none());
        let (status, _) = send(&mut stats, "kind", depth, object);
        assert_eq!(status, StatusCode::BAD_REQUEST, "request.kind at depth {depth}");
    }
    // The whole body nested: refused at its first level, or after skipping it all.
    for (depth, object) in [(4_000_000, false), (1_000_000, true)] {
        let body = J::Nest { depth, object, inner: Box::new(J::Null) }.to_bytes();
        let answer = harness.send(false, "/mutate", body);
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "depth {depth}");
    }
    stats.print("deep nesting");
}

#[test]
fn bodies_at_the_size_limit() {
    let _serial = serial();
    let harness = Harness::new();
    let mut stats = Stats::default();
    let review = review_with("x", J::Null);
    for (len, status) in [
        (MAX_BODY_BYTES - 1, StatusCode::OK),
        (MAX_BODY_BYTES, StatusCode::OK),
        (MAX_BODY_BYTES + 1, StatusCode::PAYLOAD_TOO_LARGE),
        (3 * MAX_BODY_BYTES, StatusCode::PAYLOAD_TOO_LARGE),
    ] {
        // Whitespace after the opening brace: the same review, `len` bytes long.
        let mut body = review.clone();
        body.splice(1..1, std::iter::repeat_n(b' ', len - review.len())).for_each(drop);
        let built = Built { body, uri: "/mutate".into(), well_formed: true };
        let answer = harness.send(false, &built.uri, built.body.clone());
        assert_eq!(answer.status, status, "{len} bytes");
        let outcome =
            check(&built, false, &answer, &mut stats).unwrap_or_else(|why| panic!("{len}: {why}"));
        stats.record(len, &answer, outcome, true, &|| format!("{len} bytes"));
    }
    stats.print("size limit");
}

/// A Deployment review with this pod spec, workload annotations, template
/// annotations and owner references.
fn shaped_review(pod_spec: J, annotations: J, template_annotations: J, owners: J) -> Vec<u8> {
    let metadata =
        obj([("name", s("w")), ("annotations", annotations), ("ownerReferences", owners)]);
    let template =
        obj([("metadata", obj([("annotations", template_annotations)])), ("spec", pod_spec)]);
    let object = obj([
        ("apiVersion", s("apps/v1")),
        ("kind", s("Deployment")),
        ("metadata", metadata),
        ("spec", obj([("template", template)])),
    ]);
    let request = obj([
        ("uid", s("u")),
        ("kind", obj([("group", s("apps")), ("version", s("v1")), ("kind", s("Deployment"))])),
        ("operation", s("CREATE")),
        ("namespace", s("shop")),
        ("object", object),
    ]);
    obj([
        ("apiVersion", s("admission.k8s.io/v1")),
        ("kind", s("AdmissionReview")),
        ("request", request),
    ])
    .to_bytes()
}

/// The shapes that cost the most memory and time per byte, each sized just
/// past a power of two (where a growing `Vec` holds the most unused
/// capacity), so the bounds are met on every run, not only when the random
/// campaign happens on them. Lists of `{}` are the worst: each element
/// becomes a struct of `Option`s of up to 136 bytes, from 3 bytes of body.
#[test]
fn the_costliest_known_shapes_stay_within_bounds() {
    let _serial = serial();
    let harness = Harness::new();
    let mut stats = Stats::default();
    // Past a power of two, so the worst Vec slack; the distinct shapes need no such care.
    let n = (1 << 17) + 1;
    let d = 1 << 16;
    let wide = |elem: J| J::Arr(vec![J::Repeat { count: n, elem: Box::new(elem) }]);
    let empty = || J::Obj(Vec::new());
    let container = |members: Vec<(J, J)>| {
        let mut container = vec![(s("name"), s("c"))];
        container.extend(members);
        J::Obj(container)
    };
    let spec = |containers: J, volumes: J| obj([("containers", containers), ("volumes", volumes)]);
    let one = |c: J| J::Arr(vec![c]);
    let none = || J::Arr(Vec::new());
    let config_map_volume = |items: J| {
        one(obj([("name", s("v")), ("configMap", obj([("name", s("cm-0")), ("items", items)]))]))
    };
    let distinct = |count: usize, f: &dyn Fn(usize) -> (J, J)| J::Obj((0..count).map(f).collect());
    let tokens =
        |f: &dyn Fn(usize) -> String| -> J { s((0..d).map(f).collect::<Vec<_>>().join(",")) };
    let default_spec = || spec(one(container(vec![])), none());
    // (label, pod spec, workload annotations, template annotations, owners, well-formed)
    let shapes: Vec<(&str, J, J, J, J, bool)> = vec![
        ("volumes of {}", spec(none(), wide(empty())), empty(), empty(), none(), false),
        ("containers of {}", spec(wide(empty()), none()), empty(), empty(), none(), false),
        (
            "tracked images, each container its own",
            spec(wide(obj([("name", s("c")), ("image", s("r.example/a:1"))])), none()),
            obj([("configsum.dev/images", s("*")), ("configsum.dev/image-policy", s("pin"))]),
            empty(),
            none(),
            true,
        ),
        (
            "env of {}",
            spec(one(container(vec![(s("env"), wide(empty()))])), none()),
            empty(),
            empty(),
            none(),
            false,
        ),
        (
            "envFrom of {}",
            spec(one(container(vec![(s("envFrom"), wide(empty()))])), none()),
            empty(),
            empty(),
            none(),
            false,
        ),
        (
            "items of {}",
            spec(none(), config_map_volume(wide(empty()))),
            empty(),
            empty(),
            none(),
            false,
        ),
        (
            "projected sources of {}",
            spec(
                none(),
                one(obj([("name", s("p")), ("projected", obj([("sources", wide(empty()))]))])),
            ),
            empty(),
            empty(),
            none(),
            false,
        ),
        ("ownerReferences of {}", default_spec(), empty(), empty(), wide(empty()), false),
        (
            "distinct item keys",
            spec(
                none(),
                config_map_volume(J::Arr(
                    (0..d).map(|i| obj([("key", s(format!("k{i}")))])).collect(),
                )),
            ),
            empty(),
            empty(),
            none(),
            true,
        ),
        (
            "distinct workload annotations",
            default_spec(),
            distinct(d, &|i| (s(format!("a{i}")), s(""))),
            empty(),
            none(),
            true,
        ),
        (
            "distinct owned template annotations",
            default_spec(),
            empty(),
            distinct(d, &|i| (s(format!("secret.configsum.dev/{i}")), s(""))),
            none(),
            true,
        ),
        (
            "distinct tracked objects",
            default_spec(),
            obj([("configsum.dev/track", tokens(&|i| format!("configmap/t{i}")))]),
            empty(),
            none(),
            true,
        ),
        (
            "repeated track stars",
            default_spec(),
            obj([("configsum.dev/track", tokens(&|_| "*".into()))]),
            empty(),
            none(),
            true,
        ),
        (
            "unparseable track tokens",
            default_spec(),
            obj([("configsum.dev/track", tokens(&|i| format!("bad token {i}")))]),
            empty(),
            none(),
            true,
        ),
        (
            "distinct tracked workloads",
            default_spec(),
            obj([("configsum.dev/track", tokens(&|i| format!("deployment/db-{i}")))]),
            empty(),
            none(),
            true,
        ),
        (
            "distinct image-env variables",
            spec(one(obj([("name", s("c")), ("image", s("r.example/a:1"))])), none()),
            obj([(
                "configsum.dev/image-env",
                tokens(&|i| format!("c/V{i}=r.example/ingestor:{i}")),
            )]),
            empty(),
            none(),
            true,
        ),
        (
            "env of many variables for image-env",
            spec(
                one(obj([
                    ("name", s("c")),
                    ("image", s("r.example/a:1")),
                    (
                        "env",
                        J::Arr(
                            (0..d)
                                .map(|i| obj([("name", s(format!("V{i}"))), ("value", s("x"))]))
                                .collect(),
                        ),
                    ),
                ])),
                none(),
            ),
            obj([("configsum.dev/image-env", s("c/V1=r.example/ingestor:prod"))]),
            empty(),
            none(),
            true,
        ),
    ];
    for (label, pod_spec, annotations, template_annotations, owners, well_formed) in shapes {
        let body = shaped_review(pod_spec, annotations, template_annotations, owners);
        let built = Built { body, uri: "/mutate".into(), well_formed };
        let answer = harness.send(false, &built.uri, built.body.clone());
        let len = built.body.len();
        let outcome = check(&built, false, &answer, &mut stats)
            .unwrap_or_else(|why| panic!("{label}: {why}"));
        assert_eq!(answer.status, StatusCode::OK, "{label}");
        eprintln!(
            "  {label:36} body {:5.2} MiB, allocated {:7.2} MiB ({:5.1}x), CPU {:6.1} ms",
            len as f64 / MIB as f64,
            answer.peak as f64 / MIB as f64,
            answer.peak as f64 / len as f64,
            answer.cpu.as_secs_f64() * 1000.0
        );
        stats.record(len, &answer, outcome, well_formed, &|| label.to_owned());
    }
    stats.print("costliest known shapes");
}
