//! Images behind floating tags, end to end: the real `configsum serve` over
//! TLS resolves tags against real distribution registries
//! (tests/support/registry.rs): anonymous over plain HTTP, htpasswd Basic,
//! token auth, and HTTPS with a private CA, with credentials from pull
//! secrets in `--objects-from`, and from a ServiceAccount in the fake API
//! server.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/registry.rs"]
mod registry;
#[path = "support/server.rs"]
mod server;

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use fake_apiserver::FakeApiServer;
use registry::*;
use serde_json::{Value, json};
use server::*;

struct Setup {
    dir: TempDir,
}

impl Setup {
    fn new(label: &str, objects: &str) -> Setup {
        install_crypto_provider();
        let dir = TempDir::new(label);
        make_certs(&dir.0, "ec-sec1");
        std::fs::write(dir.path("objects.yaml"), objects).expect("objects");
        Setup { dir }
    }

    /// One PEM file with the test CAs of `registries`, for `--registry-ca-file`.
    fn ca_bundle(&self, registries: &[&Registry]) -> String {
        let path = self.dir.path("registry-ca.pem");
        let pem: Vec<String> = registries
            .iter()
            .map(|r| std::fs::read_to_string(r.ca_file().expect("a TLS registry")).expect("CA"))
            .collect();
        std::fs::write(&path, pem.concat()).expect("write the CA bundle");
        path.display().to_string()
    }

    async fn start(&self, extra: &[String]) -> Server {
        let (cert, key, objects) = (
            self.dir.path("tls.crt").display().to_string(),
            self.dir.path("tls.key").display().to_string(),
            self.dir.path("objects.yaml").display().to_string(),
        );
        let mut args = vec![
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--objects-from",
            &objects,
            "--allow-plain-secret-digests",
        ];
        args.extend(extra.iter().map(String::as_str));
        Server::start(&args, &[], &self.dir.path("ca.crt")).await
    }
}

/// A Deployment's review; [`review_of`] for other kinds.
fn review(operation: &str, object: &Value) -> Vec<u8> {
    review_of(("apps", "v1", "Deployment"), "deployments", operation, object)
}

fn deployment(name: &str, annotations: Value, spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "team-a", "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
}

/// Admits `object` and returns the answer and the patched object.
async fn admit(server: &Server, operation: &str, object: &Value) -> (Value, Value) {
    let (status, body) = server.post("/mutate?timeout=10s", review(operation, object)).await;
    assert_eq!(status, 200);
    apply_response(object, &body)
}

fn template_annotations(object: &Value) -> &Value {
    &object["spec"]["template"]["metadata"]["annotations"]
}

fn warnings(answer: &Value) -> Vec<String> {
    let list = answer["response"]["warnings"].as_array().cloned().unwrap_or_default();
    list.iter().filter_map(|w| w.as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn record_and_pin_follow_the_tag_and_leave_author_pins_alone() {
    let registry = Registry::anonymous().await;
    let (index, _) = registry.push_multi_platform("team/app", "prod", "v1", Format::Oci).await;
    let sidecar = registry.push_image("sidecar", "1", "sidecar").await;
    let setup = Setup::new("images-record", "");
    let server = setup.start(&["--insecure-registry".into(), registry.host()]).await;

    let app = registry.image("team/app", "prod");
    let pinned_sidecar = format!("{}/sidecar:1@{sidecar}", registry.host());
    let recorded = deployment(
        "recorded",
        json!({"configsum.dev/images": "*"}),
        json!({"containers": [
                {"name": "app", "image": app, "imagePullPolicy": "IfNotPresent"},
                {"name": "sidecar", "image": pinned_sidecar, "imagePullPolicy": "IfNotPresent"}],
            "initContainers": [{"name": "init", "image": registry.image("missing", "1"),
                "imagePullPolicy": "Always"}]}),
    );
    let (answer, patched) = admit(&server, "CREATE", &recorded).await;
    assert_eq!(
        template_annotations(&patched),
        &json!({"image.configsum.dev/app": index, "image.configsum.dev/init": "absent"}),
        "the index digest of the multi-arch tag; the author's pin is not tracked"
    );
    assert_eq!(patched["spec"]["template"]["spec"], recorded["spec"]["template"]["spec"]);
    let warned = warnings(&answer);
    assert!(warned.contains(&format!(
        "container app ({app}): imagePullPolicy is not Always: a node may run an older image it cached"
    )));
    assert!(warned.contains(&format!(
        "container init ({}): unknown to the registry; its digest is \"absent\"",
        registry.image("missing", "1")
    )));
    assert_eq!(warned.len(), 2, "{warned:?}");
    let (again, _) = admit(&server, "UPDATE", &patched).await;
    assert!(again["response"].get("patch").is_none(), "idempotent: {again}");

    let pin = deployment(
        "pinned",
        json!({"configsum.dev/images": "app", "configsum.dev/image-policy": "pin"}),
        json!({"containers": [{"name": "app", "image": app}]}),
    );
    let (answer, pinned) = admit(&server, "CREATE", &pin).await;
    let containers = &pinned["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], format!("{app}@{index}"), "tag kept for readers");
    assert_eq!(template_annotations(&pinned), &json!({"image.configsum.dev/app": index}));
    assert!(warnings(&answer).is_empty(), "{answer}");
    let (again, _) = admit(&server, "UPDATE", &pinned).await;
    assert!(again["response"].get("patch").is_none(), "a pin of ours is re-resolved: {again}");

    // The tag moves. Answers are reused for 10 s, so wait that out.
    let (moved, _) = registry.push_multi_platform("team/app", "prod", "v2", Format::Oci).await;
    assert_ne!(moved, index);
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    let (answer, repinned) = admit(&server, "UPDATE", &pinned).await;
    let containers = &repinned["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], format!("{app}@{moved}"));
    assert_eq!(template_annotations(&repinned), &json!({"image.configsum.dev/app": moved}));
    assert_eq!(answer["response"]["auditAnnotations"], json!({"changed": "image/app"}));

    // Back to record: our pin is undone, the digest stays recorded.
    let mut recording = repinned.clone();
    recording["metadata"]["annotations"]["configsum.dev/image-policy"] = json!("record");
    let (_, unpinned) = admit(&server, "UPDATE", &recording).await;
    assert_eq!(unpinned["spec"]["template"]["spec"]["containers"][0]["image"], app);
    assert_eq!(template_annotations(&unpinned), &json!({"image.configsum.dev/app": moved}));

    let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    let digests = format!(
        "configsum_registry_requests_total{{registry=\"{}\",outcome=\"digest\"}} 2",
        registry.host()
    );
    assert!(metrics.contains(&digests), "{metrics}");
    assert_eq!(server.terminate().await, Some(0));
}

/// Pull secrets as `--objects-from` carries them: a dockerconfigjson with one
/// `auth` entry and one username/password entry.
fn pull_secret(basic: &Registry, token: &Registry) -> String {
    let (user, password) = basic.credentials().expect("basic credentials");
    let (token_user, token_password) = token.credentials().expect("token credentials");
    let config = json!({"auths": {
        basic.host(): {"auth": STANDARD.encode(format!("{user}:{password}"))},
        format!("https://{}/v2/", token.host()): {"username": token_user, "password": token_password},
    }});
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: regcred, namespace: team-a}}\n\
         type: kubernetes.io/dockerconfigjson\ndata: {{.dockerconfigjson: \"{}\"}}\n",
        STANDARD.encode(config.to_string())
    )
}

#[tokio::test]
async fn credentials_come_from_pull_secrets_and_tokens_are_reused() {
    let basic = Registry::basic("puller", "s3cr3t-basic").await;
    // As GHCR: HTTPS, with the realm on HTTPS too (here on another port of its own).
    let token = Registry::start(RegistryOptions {
        tls: true,
        auth: Auth::Token(TokenOptions {
            anonymous: AnonymousAccess::Refused,
            https_realm: true,
            ..TokenOptions::default()
        }),
    })
    .await;
    let private_ca = Registry::anonymous_tls().await;
    let basic_digest = basic.push_image("app", "1", "basic").await;
    let token_digest = token.push_image("app", "1", "token").await;
    let token_digest_2 = token.push_docker_v2("app", "2", "token two").await;
    let tls_digest = private_ca.push_image("app", "1", "tls").await;

    let setup = Setup::new("images-auth", &pull_secret(&basic, &token));
    let ca_file = setup.ca_bundle(&[&private_ca, &token]);
    let server = setup
        .start(&[
            "--insecure-registry".into(),
            basic.host(),
            // Loopback is contacted only when listed; every port of 127.0.0.1 is, the realm's too.
            "--registry-allow".into(),
            "127.0.0.1".into(),
            "--registry-ca-file".into(),
            ca_file,
        ])
        .await;
    let spec = |secrets: Value, token_tag: &str| {
        json!({"imagePullSecrets": secrets, "containers": [
            {"name": "basic", "image": basic.image("app", "1"), "imagePullPolicy": "Always"},
            {"name": "token", "image": token.image("app", token_tag), "imagePullPolicy": "Always"},
            {"name": "tls", "image": private_ca.image("app", "1"), "imagePullPolicy": "Always"}]})
    };
    let images = json!({"configsum.dev/images": "*"});

    let with_secret =
        deployment("with-secret", images.clone(), spec(json!([{"name": "regcred"}]), "1"));
    let (answer, patched) = admit(&server, "CREATE", &with_secret).await;
    assert_eq!(
        template_annotations(&patched),
        &json!({"image.configsum.dev/basic": basic_digest,
            "image.configsum.dev/token": token_digest, "image.configsum.dev/tls": tls_digest}),
        "{answer}"
    );
    let issued = token.token_service().expect("token service").tokens_issued();
    assert_eq!(issued, 1, "one token for repository:app:pull");

    // Another tag of the same repository: the cached token serves it.
    let second = deployment("second", images.clone(), spec(json!([{"name": "regcred"}]), "2"));
    let (_, patched) = admit(&server, "CREATE", &second).await;
    assert_eq!(template_annotations(&patched)["image.configsum.dev/token"], token_digest_2);
    assert_eq!(token.token_service().expect("token service").tokens_issued(), 1, "reused");

    // Without the pull secret: both private registries refuse; nothing is
    // recorded for them and the warnings say so, naming no credential.
    let without = deployment("without", images, spec(json!([]), "1"));
    let (answer, patched) = admit(&server, "CREATE", &without).await;
    assert_eq!(template_annotations(&patched), &json!({"image.configsum.dev/tls": tls_digest}));
    let warned = warnings(&answer);
    assert_eq!(warned.len(), 2, "{warned:?}");
    assert!(
        warned.iter().all(|w| w.contains("): image not resolved; no annotation written (")),
        "{warned:?}"
    );
    // Every line, once written at exit.
    let logs = server.terminate_logs().await.join("\n");
    for secret in ["s3cr3t-basic", "fixture-password"] {
        assert!(!logs.contains(secret) && !answer.to_string().contains(secret));
    }
}

/// A registry over HTTPS whose 401 names a plain-HTTP realm: before, the pull secret's
/// credentials went to that realm in cleartext. Now the realm is not contacted at all (it is not
/// an `--insecure-registry`), nothing is recorded, and the warning says why.
/// Only a review that resolves images logs inside the review (a pull secret it cannot use),
/// and that line names the review.
#[tokio::test]
async fn a_skipped_pull_secret_is_logged_with_the_review_it_belongs_to() {
    let registry = Registry::anonymous().await;
    let digest = registry.push_image("app", "1", "app").await;
    let broken = "apiVersion: v1\nkind: Secret\nmetadata: {name: broken, namespace: team-a}\n\
        type: kubernetes.io/dockerconfigjson\nstringData: {.dockerconfigjson: not json}\n";
    let setup = Setup::new("images-span", broken);
    let server = setup.start(&["--insecure-registry".into(), registry.host()]).await;
    let spec = json!({"imagePullSecrets": [{"name": "broken"}],
        "containers": [{"name": "app", "image": registry.image("app", "1"),
            "imagePullPolicy": "Always"}]});
    let (_, patched) =
        admit(&server, "CREATE", &deployment("web", json!({"configsum.dev/images": "*"}), spec))
            .await;
    assert_eq!(template_annotations(&patched), &json!({"image.configsum.dev/app": digest}));
    let skipped = |l: &str| l.contains("not a usable pull secret");
    assert!(server.logged(skipped).await, "{:?}", server.logs());
    let line = server.logs().into_iter().find(|l| skipped(l)).expect("the line");
    let fields = log_fields(&line);
    assert_eq!(fields["secret"], "broken", "{line}");
    assert_eq!(fields["span"]["uid"], "images", "{line}");
    assert_eq!(fields["span"]["object"], "team-a/web", "{line}");
    assert!(!line.contains("not json"), "no Secret content: {line}");
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn a_plain_http_realm_behind_an_https_registry_gets_no_request() {
    let registry = Registry::start(RegistryOptions {
        tls: true,
        auth: Auth::Token(TokenOptions {
            anonymous: AnonymousAccess::Refused,
            https_realm: false,
            ..TokenOptions::default()
        }),
    })
    .await;
    registry.push_image("app", "1", "cleartext").await;
    let service = registry.token_service().expect("token service");
    let pushed = service.requests().len();
    let setup = Setup::new("images-plain-realm", &pull_secret_for(&registry));
    let ca_file = setup.ca_bundle(&[&registry]);
    let server = setup
        .start(&[
            "--registry-allow".into(),
            "127.0.0.1".into(),
            "--registry-ca-file".into(),
            ca_file,
        ])
        .await;
    let spec = json!({"imagePullSecrets": [{"name": "regcred"}], "containers": [
        {"name": "app", "image": registry.image("app", "1"), "imagePullPolicy": "Always"}]});
    let workload = deployment("plain-realm", json!({"configsum.dev/images": "*"}), spec);
    let (answer, _) = admit(&server, "CREATE", &workload).await;
    assert_eq!(answer["response"]["patch"], Value::Null, "{answer}");
    assert_eq!(service.requests().len(), pushed, "the realm got a request");
    assert_eq!(service.tokens_issued(), 0);
    let warned = warnings(&answer);
    assert!(
        warned.len() == 1 && warned[0].contains("plain HTTP") && warned[0].contains("app"),
        "{warned:?}"
    );
    assert_eq!(server.terminate().await, Some(0));
}

/// A pull secret holding `registry`'s credentials under its `https://` key.
fn pull_secret_for(registry: &Registry) -> String {
    let (user, password) = registry.credentials().expect("credentials");
    let config = json!({"auths": {format!("https://{}/v2/", registry.host()):
        {"username": user, "password": password}}});
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: regcred, namespace: team-a}}\n\
         type: kubernetes.io/dockerconfigjson\ndata: {{.dockerconfigjson: \"{}\"}}\n",
        STANDARD.encode(config.to_string())
    )
}

/// A `kubernetes.io/dockerconfigjson` Secret as the API server stores it.
fn docker_config_secret(name: &str, registry: &Registry) -> Value {
    let (user, password) = registry.credentials().expect("credentials");
    let config = json!({"auths": {format!("https://{}", registry.host()):
        {"auth": STANDARD.encode(format!("{user}:{password}"))}}});
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": name, "namespace": "team-a"},
        "data": {".dockerconfigjson": STANDARD.encode(config.to_string())}})
}

#[tokio::test]
async fn credentials_come_from_the_service_account_read_fresh_from_the_api_server() {
    let registry = Registry::basic("robot", "s3cr3t-robot").await;
    let digest = registry.push_image("app", "1", "sa").await;
    let api = FakeApiServer::start().await;
    let setup = Setup::new("images-sa", "");
    let kubeconfig = api.kubeconfig(&setup.dir.0).display().to_string();
    let (cert, key) = (
        setup.dir.path("tls.crt").display().to_string(),
        setup.dir.path("tls.key").display().to_string(),
    );
    let host = registry.host();
    let args = [
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--allow-plain-secret-digests",
        "--insecure-registry",
        &host,
    ];
    let server =
        Server::start(&args, &[("KUBECONFIG", &kubeconfig)], &setup.dir.path("ca.crt")).await;
    let ready = std::time::Instant::now() + Duration::from_secs(20);
    while server.get("/readyz").await.0 != 200 {
        assert!(std::time::Instant::now() < ready, "not ready within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    api.put(
        &FakeApiServer::secret_path("team-a", "robot-pull"),
        docker_config_secret("robot-pull", &registry),
    );
    let account = "/api/v1/namespaces/team-a/serviceaccounts/builder";
    api.put(
        account,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "builder", "namespace": "team-a"},
            "imagePullSecrets": [{"name": "robot-pull"}]}),
    );
    let spec = |account: &str| {
        json!({"serviceAccountName": account, "containers": [
            {"name": "app", "image": registry.image("app", "1"), "imagePullPolicy": "Always"}]})
    };
    let images = json!({"configsum.dev/images": "app"});
    let (answer, patched) =
        admit(&server, "CREATE", &deployment("built", images.clone(), spec("builder"))).await;
    assert_eq!(
        template_annotations(&patched),
        &json!({"image.configsum.dev/app": digest}),
        "{answer}"
    );
    assert_eq!(api.calls("GET", account), 1, "read at the review");
    let secret = FakeApiServer::secret_path("team-a", "robot-pull");
    assert_eq!(api.calls("GET", &secret), 1);

    // Another ServiceAccount, which the namespace does not have: anonymous,
    // refused, nothing recorded.
    let (answer, patched) =
        admit(&server, "CREATE", &deployment("other", images, spec("missing"))).await;
    assert!(template_annotations(&patched).is_null(), "{patched}");
    let warned = warnings(&answer);
    assert_eq!(warned.len(), 1, "{warned:?}");
    // Nothing was recorded before: the warning says so first, and the
    // cause as far as 119 characters allow.
    let expected = format!(
        "container app ({}): image not resolved; no annotation written (the registry wants credentials it was not given (HTTP 401))",
        registry.image("app", "1")
    );
    let mut shortened: String = expected.chars().take(118).collect();
    shortened.push('…');
    assert_eq!(warned[0], shortened);
    assert!(!server.terminate_logs().await.join("\n").contains("s3cr3t-robot"));
}

fn review_of(kind: (&str, &str, &str), resource: &str, operation: &str, object: &Value) -> Vec<u8> {
    let (group, version, kind) = kind;
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "images", "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "operation": operation, "namespace": "team-a", "name": object["metadata"]["name"],
        "object": object, "oldObject": null}}),
    )
    .expect("json")
}

#[tokio::test]
async fn jobs_and_pods_record_and_pin_the_digest_they_start_with() {
    let registry = Registry::anonymous().await;
    let digest = registry.push_image("batch", "nightly", "job").await;
    let image = registry.image("batch", "nightly");
    let setup = Setup::new("images-jobs", "");
    let server = setup.start(&["--insecure-registry".into(), registry.host()]).await;

    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "once", "namespace": "team-a",
            "annotations": {"configsum.dev/images": "*", "configsum.dev/image-policy": "pin"}},
        "spec": {"containers": [{"name": "run", "image": image, "imagePullPolicy": "Always"}]}});
    let (status, body) =
        server.post("/mutate", review_of(("", "v1", "Pod"), "pods", "CREATE", &pod)).await;
    assert_eq!(status, 200);
    let (_, patched) = apply_response(&pod, &body);
    assert_eq!(patched["metadata"]["annotations"]["image.configsum.dev/run"], digest);
    assert_eq!(patched["spec"]["containers"][0]["image"], format!("{image}@{digest}"));

    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "nightly", "namespace": "team-a",
            "annotations": {"configsum.dev/images": "run"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "run", "image": image, "imagePullPolicy": "Always"}]}}}});
    let (status, body) =
        server.post("/mutate", review_of(("batch", "v1", "Job"), "jobs", "CREATE", &job)).await;
    assert_eq!(status, 200);
    let (_, patched) = apply_response(&job, &body);
    assert_eq!(template_annotations(&patched), &json!({"image.configsum.dev/run": digest}));
    assert_eq!(patched["spec"]["template"]["spec"]["containers"][0]["image"], image);
    assert_eq!(server.terminate().await, Some(0));
}

/// A registry as GHCR serves one: HTTPS, a 401 whose challenge names a token realm on another
/// host:port, and anonymous pull tokens for a public repository.
async fn ghcr_like() -> Registry {
    Registry::start(RegistryOptions {
        tls: true,
        auth: Auth::Token(TokenOptions {
            anonymous: AnonymousAccess::Pull,
            https_realm: true,
            ..TokenOptions::default()
        }),
    })
    .await
}

/// Seed 002's jobs-manager: its Jobs run the ingestor image, so the manager's `api` container
/// carries the ingestor's digest in `INGESTOR_IMAGE_DIGEST`, as a `kubectl set env` CronJob
/// kept it before.
#[tokio::test]
async fn image_env_hands_the_digest_behind_a_tag_to_a_variable() {
    let registry = ghcr_like().await;
    let digest = registry.push_image("org/ingestor", "prod", "ingestor v1").await;
    let setup = Setup::new("images-env", "");
    let ca_file = setup.ca_bundle(&[&registry]);
    let allow = ["--registry-allow".into(), "127.0.0.1".into()];
    let server = setup.start(&[&allow[..], &["--registry-ca-file".into(), ca_file]].concat()).await;

    let ingestor = registry.image("org/ingestor", "prod");
    let pinned = format!("{}/org/tool@{digest}", registry.host());
    let annotation = format!(
        "api/INGESTOR_IMAGE_DIGEST={ingestor}, api/TOOL_DIGEST={pinned}, api/POD_NAME={ingestor}"
    );
    let env = json!([
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
    let spec = json!({"containers": [{"name": "api", "image": "jobs-manager:3", "env": env}]});
    let manager = deployment("jobs-manager", json!({"configsum.dev/image-env": annotation}), spec);
    let (answer, patched) = admit(&server, "CREATE", &manager).await;
    let expected = json!([
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "INGESTOR_IMAGE_DIGEST", "value": digest}]);
    assert_eq!(patched["spec"]["template"]["spec"]["containers"][0]["env"], expected, "{answer}");
    assert!(template_annotations(&patched).is_null(), "the variable is the record: {patched}");
    assert_eq!(
        warnings(&answer),
        [format!("container api env POD_NAME ({ingestor}): set through valueFrom; left alone")]
    );
    assert_eq!(answer["response"].get("auditAnnotations"), None, "a first digest changes nothing");
    let issued = registry.token_service().expect("token service").tokens_issued();
    assert_eq!(issued, 1, "one anonymous token from the realm; the pinned tool is never resolved");

    let (again, _) = admit(&server, "UPDATE", &patched).await;
    assert!(again["response"].get("patch").is_none(), "idempotent: {again}");

    // A variable holding an older digest (the CronJob's last run) is brought up to date, and
    // the audit annotation names it.
    let stale = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let mut behind = patched.clone();
    behind["spec"]["template"]["spec"]["containers"][0]["env"][2]["value"] = json!(stale);
    let (answer, updated) = admit(&server, "UPDATE", &behind).await;
    assert_eq!(updated["spec"]["template"]["spec"]["containers"][0]["env"], expected);
    assert_eq!(
        answer["response"]["auditAnnotations"],
        json!({"changed": "image-env/api/INGESTOR_IMAGE_DIGEST"})
    );

    // A tag the registry does not know leaves the variable as it is: never an empty value.
    let mut unknown = updated.clone();
    let missing = registry.image("org/ingestor", "nope");
    unknown["metadata"]["annotations"]["configsum.dev/image-env"] =
        json!(format!("api/INGESTOR_IMAGE_DIGEST={missing}"));
    let (answer, kept) = admit(&server, "UPDATE", &unknown).await;
    assert!(answer["response"].get("patch").is_none(), "{answer}");
    assert_eq!(kept["spec"]["template"]["spec"]["containers"][0]["env"], expected);
    assert_eq!(
        warnings(&answer),
        [format!(
            "container api env INGESTOR_IMAGE_DIGEST ({missing}): unknown to the registry; left as it is"
        )]
    );
    assert_eq!(server.terminate().await, Some(0));
}
