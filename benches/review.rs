//! One admission review through the webhook's pure path: parse the AdmissionReview,
//! plan, digest four objects from memory, decide, encode the answer; and the same UPDATE
//! for a Deployment that tracks its images (no registry here: they stay unresolved).
//! Beside them, the pass over the body alone, and serde_json skipping the whole body (a
//! lower bound for any pass that checks the JSON). `make bench` runs it; `cargo test` runs
//! each benchmark once as a smoke test.

#[path = "../tests/support/fixtures.rs"]
mod fixtures;
#[path = "support/reviews.rs"]
mod reviews;

use configsum::core::review::decide_from_memory;
use configsum::core::{ObjectRef, Settings};
use configsum::webhook::admission::{encode_response, parse_review, plan};
use divan::{Bencher, black_box};
use fixtures::{Objects, keyed_digester};

fn main() {
    let (create, update) = (body(false), body(true));
    eprintln!("review bodies: CREATE {} bytes, UPDATE {} bytes", create.len(), update.len());
    divan::main();
}

fn body(update: bool) -> Vec<u8> {
    body_of(reviews::standard_deployment(), update)
}

/// The same Deployment tracking the digests behind its images: the image pass reads its
/// containers too.
fn tracking_images(update: bool) -> Vec<u8> {
    let mut object = reviews::standard_deployment();
    object["metadata"]["annotations"]["configsum.dev/images"] = "*".into();
    body_of(object, update)
}

fn body_of(object: serde_json::Value, update: bool) -> Vec<u8> {
    let old = update.then(|| object.clone());
    let operation = if update { "UPDATE" } else { "CREATE" };
    reviews::review(("apps", "v1", "Deployment"), operation, &object, old.as_ref())
}

fn objects() -> Objects {
    let mut objects = Objects::default();
    for (kind, name, data) in reviews::objects() {
        let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let object =
            if kind == "Secret" { ObjectRef::secret(name) } else { ObjectRef::config_map(name) };
        objects.insert(reviews::NAMESPACE, object, &data);
    }
    objects
}

fn run(bencher: Bencher, update: bool) {
    run_body(bencher, body(update));
}

fn run_body(bencher: Bencher, body: Vec<u8>) {
    let objects = objects();
    let settings = Settings::default();
    let digester = keyed_digester();
    bencher.bench_local(|| {
        let mut request = parse_review(black_box(&body)).unwrap_or_else(|e| panic!("{e}"));
        let read = request.take_read();
        let planned = plan(&request.as_core(), read, &body, &settings);
        let decision =
            decide_from_memory(planned, &settings, &digester, |ns, o| objects.lookup(ns, o));
        assert_eq!(decision.patch.len(), 4, "four digests added");
        encode_response(&request.uid, &decision)
    });
}

#[divan::bench]
fn deployment_20kb_create(bencher: Bencher) {
    run(bencher, false);
}

#[divan::bench]
fn deployment_20kb_update_with_old_object(bencher: Bencher) {
    run(bencher, true);
}

#[divan::bench]
fn deployment_20kb_update_tracking_images(bencher: Bencher) {
    run_body(bencher, tracking_images(true));
}

/// The pass over the body alone: what parsing costs of a review.
fn parse_only(bencher: Bencher, update: bool) {
    let body = body(update);
    bencher.bench_local(|| {
        let mut request = parse_review(black_box(&body)).unwrap_or_else(|e| panic!("{e}"));
        request.take_read().is_some()
    });
}

#[divan::bench]
fn parse_only_create(bencher: Bencher) {
    parse_only(bencher, false);
}

#[divan::bench]
fn parse_only_update(bencher: Bencher) {
    parse_only(bencher, true);
}

/// A lower bound for any pass that checks the body is JSON: serde_json skipping all of it,
/// building nothing. The webhook must check the fields it skips, or it would answer a
/// malformed body as if it were a review.
fn skip_only(bencher: Bencher, update: bool) {
    let body = body(update);
    bencher
        .bench_local(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body)).is_ok());
}

#[divan::bench]
fn skip_whole_body_create(bencher: Bencher) {
    skip_only(bencher, false);
}

#[divan::bench]
fn skip_whole_body_update(bencher: Bencher) {
    skip_only(bencher, true);
}
