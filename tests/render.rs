//! `configsum render`, the real binary: a stream in, the same stream out with
//! the digests admission would write, proven by admitting the rendered
//! workloads to the real `configsum serve` with the same objects and key.

#[path = "support/server.rs"]
mod server;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use server::*;

const KEY: &str = "0123456789abcdef0123456789abcdef\n";
const MARKER: &str = "hunter2-render-marker";

const STREAM: &str = r#"---
# Source: app/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  namespace: shop
data:
  log-level: debug
  enabled: "true"
  mode: "0755"
  at: "12:30:45"
  hash: 72e40602
  script: |
    #!/bin/sh
    echo "ready: yes"
---
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: shop}
stringData: {password: hunter2}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        configmap.configsum.dev/removed: sha256:00
        secret.configsum.dev/elsewhere: hmac-sha256:kept
        team.example/owner: payments
    spec:
      containers:
        - name: app
          image: web:1.4
          env:
            - name: LOG
              valueFrom: {configMapKeyRef: {name: app-config, key: log-level}}
            - name: TOKEN
              valueFrom: {secretKeyRef: {name: elsewhere, key: token}}
          envFrom:
            - secretRef: {name: db}
---
# an empty document stays one
---
apiVersion: v1
kind: List
items:
  - apiVersion: apps/v1
    kind: StatefulSet
    metadata: {name: cache}
    spec:
      selector: {matchLabels: {app: cache}}
      serviceName: cache
      template:
        metadata: {labels: {app: cache}}
        spec:
          containers:
            - name: redis
              image: redis:7
              volumeMounts: [{name: conf, mountPath: /etc/redis}]
          volumes:
            - name: conf
              configMap: {name: app-config, items: [{key: mode, path: mode}]}
"#;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn render(args: &[&str], input: &str) -> Run {
    render_cpu(args, input).0
}

/// [`render`], with the CPU time the process used (user and system): unlike wall time, the
/// same on an idle machine and on one busy with other builds.
fn render_cpu(args: &[&str], input: &str) -> (Run, Duration) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_configsum"))
        .arg("render")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn configsum render");
    // A render that refuses its flags, or an input too large, may exit before
    // reading it all: a broken pipe is its answer.
    if let Err(error) = child.stdin.take().expect("stdin").write_all(input.as_bytes()) {
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {error}");
    }
    let cpu = cpu_time_at_exit(&child);
    let out = child.wait_with_output().expect("render finishes");
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    };
    (run, cpu)
}

/// The CPU time of `child` once it has exited, read from its `/proc` entry while it is
/// still a zombie (waited for with `WNOWAIT`, so that `wait` still reaps it). It writes at
/// most its error to stdout and stderr, well within a pipe's buffer: it cannot block on them.
fn cpu_time_at_exit(child: &std::process::Child) -> Duration {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    let pid = Pid::from_raw(child.id() as i32).expect("a pid");
    waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOWAIT).expect("waitid");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the parenthesised command name: state is field 3, utime and stime 14 and 15,
    // in USER_HZ ticks (100 a second on Linux).
    let fields: Vec<&str> = stat.rsplit_once(") ").expect("stat").1.split(' ').collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

/// The stream's documents as data. `72e40602` reads as an infinite float,
/// which JSON holds as null; its spelling is checked on the text.
fn documents(yaml: &str) -> Vec<Value> {
    let mut options = serde_saphyr::Options::default();
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    serde_saphyr::from_multiple_with_options(yaml, options)
        .unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

fn setup(label: &str) -> TempDir {
    install_crypto_provider();
    let dir = TempDir::new(label);
    std::fs::write(dir.path("key"), KEY).expect("key");
    dir
}

fn review(kind: (&str, &str, &str), object: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "render", "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
        "resource": {"group": kind.0, "version": kind.1, "resource": "x"},
        "operation": "CREATE", "namespace": object["metadata"]["namespace"].as_str().unwrap_or("default"),
        "name": object["metadata"]["name"], "object": object, "oldObject": null}}))
    .expect("json")
}

#[tokio::test]
async fn rendered_workloads_are_admitted_with_no_patch() {
    let dir = setup("render-agree");
    let key = dir.path("key").display().to_string();
    let run = render(&["--digest-key-file", &key, "--namespace", "shop"], STREAM);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let (input, output) = (documents(STREAM), documents(&run.stdout));
    assert_eq!(input.len(), output.len(), "the same documents");
    assert_eq!(run.stdout.matches("---\n").count(), 4, "the empty one kept: {}", run.stdout);

    // Everything but the workloads' configsum annotations is as it was, scalars included.
    assert_eq!(output[0], input[0], "the ConfigMap, with its strings still strings");
    assert_eq!(output[0]["data"]["enabled"], "true");
    assert_eq!(output[0]["data"]["mode"], "0755");
    assert!(run.stdout.contains("\n  hash: 72e40602\n"), "spelled as written: {}", run.stdout);
    assert!(run.stdout.contains("\n  at: \"12:30:45\"\n"), "{}", run.stdout);
    assert_eq!(output[1], input[1]);
    let web = &output[2];
    let annotations = &web["spec"]["template"]["metadata"]["annotations"];
    assert!(annotations.get("configmap.configsum.dev/removed").is_none(), "stale keys go");
    assert_eq!(annotations["secret.configsum.dev/elsewhere"], "hmac-sha256:kept", "not here: kept");
    assert_eq!(annotations["team.example/owner"], "payments");
    assert!(
        annotations["configmap.configsum.dev/app-config"]
            .as_str()
            .is_some_and(|v| v.starts_with("sha256:"))
    );
    assert!(
        annotations["secret.configsum.dev/db"]
            .as_str()
            .is_some_and(|v| v.starts_with("hmac-sha256:"))
    );
    let mut without = web.clone();
    without["spec"]["template"]["metadata"]["annotations"] =
        input[2]["spec"]["template"]["metadata"]["annotations"].clone();
    assert_eq!(without, input[2], "nothing else changed");
    let cache = &output.last().expect("the List")["items"][0];
    assert!(
        cache["spec"]["template"]["metadata"]["annotations"]["configmap.configsum.dev/app-config"]
            .is_string()
    );
    assert!(
        run.stderr.contains(
            "document 3 (Deployment shop/web): secret/elsewhere: could not be read; its annotation was kept (not in the input or --objects-from)"
        ),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("hunter2"));

    // An object in neither, with no annotation to keep: the note says so.
    const BARE: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bare, namespace: shop}\nspec:\n  selector: {matchLabels: {app: bare}}\n  template:\n    metadata: {labels: {app: bare}}\n    spec:\n      containers:\n        - {name: app, image: web:1.4, envFrom: [{secretRef: {name: nowhere}}]}\n";
    let bare = render(&["--digest-key-file", &key], BARE);
    assert_eq!(bare.code, Some(0), "{}", bare.stderr);
    assert_eq!(
        bare.stderr.trim_end(),
        "configsum render: document 1 (Deployment shop/bare): secret/nowhere: could not be read; no annotation written (not in the input or --objects-from)"
    );
    assert_eq!(documents(&bare.stdout), documents(BARE), "nothing written");

    // Rendered against the same objects as the cluster holds, the webhook
    // (same objects, same key) has nothing to add.
    const CLUSTER: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: elsewhere, namespace: shop}\ndata: {token: dG9rZW4=}\n";
    std::fs::write(dir.path("cluster.yaml"), CLUSTER).expect("cluster objects");
    let cluster = dir.path("cluster.yaml").display().to_string();
    let run = render(
        &["--digest-key-file", &key, "--namespace", "shop", "--objects-from", &cluster],
        STREAM,
    );
    assert_eq!((run.code, run.stderr.as_str()), (Some(0), ""));
    let output = documents(&run.stdout);
    let web = &output[2];
    let cache = &output.last().expect("the List")["items"][0];
    std::fs::write(dir.path("objects.yaml"), format!("{STREAM}\n---\n{CLUSTER}")).expect("objects");
    make_certs(&dir.0, "ec-sec1");
    let (cert, tls_key, objects) = (
        dir.path("tls.crt").display().to_string(),
        dir.path("tls.key").display().to_string(),
        dir.path("objects.yaml").display().to_string(),
    );
    let args = [
        "--tls-cert",
        &cert,
        "--tls-key",
        &tls_key,
        "--objects-from",
        &objects,
        "--digest-key-file",
        &key,
    ];
    let server = Server::start(&args, &[], &dir.path("ca.crt")).await;
    for (kind, object) in [
        (("apps", "v1", "Deployment"), web.clone()),
        (("apps", "v1", "StatefulSet"), {
            let mut cache = cache.clone();
            cache["metadata"]["namespace"] = json!("shop");
            cache
        }),
    ] {
        let (status, body) = server.post("/mutate", review(kind, &object)).await;
        assert_eq!(status, 200);
        let answer: Value = serde_json::from_slice(&body).expect("answer");
        assert!(answer["response"].get("patch").is_none(), "{kind:?}: {answer}");
    }
    assert_eq!(server.terminate().await, Some(0));
}

#[test]
fn bad_input_writes_nothing_names_the_document_and_quotes_no_value() {
    let dir = setup("render-bad");
    let key = dir.path("key").display().to_string();
    let bad = format!("a: 1\n---\nb: 2\n---\nc: [\"{MARKER}\"\n");
    let run = render(&["--digest-key-file", &key], &bad);
    assert_eq!(run.code, Some(1));
    assert_eq!(run.stdout, "", "never a partial stream");
    assert!(run.stderr.contains("document 3"), "{}", run.stderr);
    assert!(!run.stderr.contains(MARKER), "{}", run.stderr);

    let bad_secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\ndata: {{k: \"{MARKER}!\"}}\n"
    );
    let run = render(&["--digest-key-file", &key], &bad_secret);
    assert_eq!((run.code, run.stdout.as_str()), (Some(1), ""));
    assert!(run.stderr.contains("document 1") && !run.stderr.contains(MARKER), "{}", run.stderr);

    let run = render(&[], "a: 1\n");
    assert_eq!(run.code, Some(2), "no key and no --allow-plain-secret-digests: {}", run.stderr);
    let run = render(&["--digest-key-file", "/nonexistent/key"], "a: 1\n");
    assert_eq!(run.code, Some(2));
    let run = render(&["--allow-plain-secret-digests", "--objects-from", "/nonexistent"], "a: 1\n");
    assert_eq!(run.code, Some(2));
    let run = render(&["--no-such-flag"], "a: 1\n");
    assert_eq!(run.code, Some(2));
}

#[test]
fn a_resource_list_takes_its_options_from_function_config() {
    let list = r#"
apiVersion: config.kubernetes.io/v1
kind: ResourceList
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: configsum}
  data: {namespace: team-a, allow-plain-secret-digests: "true"}
items:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: app, namespace: team-a}
    data: {k: v}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec:
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec: {containers: [{name: c, image: x, envFrom: [{configMapRef: {name: app}}]}]}
"#;
    let run = render(&[], list);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let out = documents(&run.stdout);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["kind"], "ResourceList");
    assert_eq!(out[0]["functionConfig"]["data"]["namespace"], "team-a");
    let digest = &out[0]["items"][1]["spec"]["template"]["metadata"]["annotations"]["configmap.configsum.dev/app"];
    assert!(digest.as_str().is_some_and(|d| d.starts_with("sha256:")), "{}", run.stdout);

    let unknown = list.replace("allow-plain-secret-digests: \"true\"", "colour: blue");
    let run = render(&[], &unknown);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
}

#[test]
fn objects_from_files_come_after_the_stream_and_the_first_definition_wins() {
    let dir = setup("render-objects");
    let key = dir.path("key").display().to_string();
    std::fs::write(
        dir.path("cluster.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {k: from-file}\n\
         ---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: only-in-file}\ndata: {k: v}\n",
    )
    .expect("objects");
    let files = dir.path("cluster.yaml").display().to_string();
    let workload = |cm: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: w}}\nspec:\n  selector: {{matchLabels: {{a: b}}}}\n  template:\n    metadata: {{labels: {{a: b}}}}\n    spec: {{containers: [{{name: c, image: x, envFrom: [{{configMapRef: {{name: {cm}}}}}]}}]}}\n"
        )
    };
    let digest_of = |stream: &str| -> Value {
        let run = render(&["--digest-key-file", &key, "--objects-from", &files], stream);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        let docs = documents(&run.stdout);
        docs.last().expect("workload")["spec"]["template"]["metadata"]["annotations"].clone()
    };
    let in_stream = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app}}\ndata: {{k: from-stream}}\n---\n{}",
        workload("app")
    );
    let from_stream = digest_of(&in_stream);
    let from_file = digest_of(&workload("app"));
    assert_ne!(from_stream, from_file, "the stream's app wins over the file's");
    assert!(
        digest_of(&workload("only-in-file"))["configmap.configsum.dev/only-in-file"].is_string()
    );
}

/// A Deployment that reads every key of the ConfigMap `c`.
const READS_C: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: w}\nspec:\n  \
    selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    \
    spec: {containers: [{name: c, image: x, envFrom: [{configMapRef: {name: c}}]}]}\n";

/// The ConfigMap `c` with `metadata` (flow YAML), then [`READS_C`]; the Deployment's
/// annotations as render writes them, rendered with `args`.
fn annotations_for_c(metadata: &str, args: &[&str]) -> Value {
    let stream = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {metadata}\ndata: {{k: v}}\n---\n{READS_C}"
    );
    let run = render(&[&["--allow-plain-secret-digests"], args].concat(), &stream);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let docs = documents(&run.stdout);
    let workload = docs.iter().find(|d| d["kind"] == "Deployment").expect("the Deployment");
    workload["spec"]["template"]["metadata"]["annotations"].clone()
}

#[test]
fn an_object_its_owner_ignores_or_the_selector_leaves_out_gets_no_digest() {
    let has_digest = |metadata: &str, args: &[&str]| {
        annotations_for_c(metadata, args)["configmap.configsum.dev/c"].is_string()
    };
    assert!(has_digest("{name: c}", &[]));
    assert!(!has_digest(r#"{name: c, annotations: {configsum.dev/ignore: "true"}}"#, &[]));
    assert!(has_digest(r#"{name: c, annotations: {configsum.dev/ignore: "yes"}}"#, &[]));
    let selector = ["--object-selector", "reload in (on, yes)"];
    assert!(!has_digest("{name: c}", &selector));
    assert!(!has_digest("{name: c, labels: {reload: off}}", &selector));
    assert!(has_digest("{name: c, labels: {reload: yes}}", &selector));
    // The ignore annotation moves with the domain.
    let domain = ["--annotation-domain", "example.com"];
    let other =
        annotations_for_c(r#"{name: c, annotations: {configsum.dev/ignore: "true"}}"#, &domain);
    assert!(other["configmap.example.com/c"].is_string(), "{other}");
    let own = annotations_for_c(r#"{name: c, annotations: {example.com/ignore: "true"}}"#, &domain);
    assert!(own["configmap.example.com/c"].is_null(), "{own}");
    // A selector that does not parse is refused before anything is read.
    let run = render(&["--object-selector", "reload in on"], READS_C);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("a set of values is written in parentheses"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
}

fn digest_of_c(stream: &str) -> (String, String) {
    let run = render(&["--allow-plain-secret-digests"], stream);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let docs = documents(&run.stdout);
    let workload = docs.iter().find(|d| d["kind"] == "Deployment").expect("the Deployment");
    let digest =
        workload["spec"]["template"]["metadata"]["annotations"]["configmap.configsum.dev/c"]
            .as_str()
            .expect("a digest")
            .to_owned();
    (digest, run.stdout)
}

#[test]
fn a_block_scalar_that_ends_the_input_keeps_its_value_and_its_digest() {
    // The value is `echo hi` with no line break: YAML has none to keep at the
    // end of the input, and kubectl sends none to the API server.
    for header in ["|", "|+", ">"] {
        let at_end = format!(
            "{READS_C}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata:\n  script: {header}\n    echo hi"
        );
        let quoted = format!(
            "{READS_C}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata:\n  script: \"echo hi\"\n"
        );
        let (digest, out) = digest_of_c(&at_end);
        assert_eq!(digest, digest_of_c(&quoted).0, "{header}: the digest of `echo hi`");
        assert_eq!(documents(&out)[1]["data"]["script"], "echo hi", "{header}: {out}");
    }
}

#[test]
fn strings_stay_strings_numbers_stay_numbers_and_tags_stay() {
    let input = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: c
  labels: {since: "2001-12-14", "2001-12-15": key}
data:
  date: "2001-12-14"
  underscores: "1__0"
  hex: "0x_1F"
  octal: "0755_1"
  sexagesimal: '12:30:45'
  yes: "yes"
  merge: "<<"
  value: "="
  padded: "  a  "
  tab: "a	b"
  control: "\u0007\u0085\u2028\uFEFF"
extra:
  int: !!int "12"
  str: !!str 12
  plain-int: 0755
  plain-date: 2001-12-14
  plain-bool: on
  plain-null: ~
"#;
    let run = render(&["--allow-plain-secret-digests"], input);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    for line in [
        "  labels:\n    since: \"2001-12-14\"\n    \"2001-12-15\": key\n",
        "  date: \"2001-12-14\"\n",
        "  underscores: \"1__0\"\n",
        "  hex: \"0x_1F\"\n",
        "  octal: \"0755_1\"\n",
        "  sexagesimal: \"12:30:45\"\n",
        "  yes: \"yes\"\n",
        "  merge: \"<<\"\n",
        "  value: \"=\"\n",
        "  padded: \"  a  \"\n",
        "  tab: \"a\\tb\"\n",
        "  control: \"\\x07\\x85\\u2028\\uFEFF\"\n",
        "  int: !!int \"12\"\n",
        "  str: !!str 12\n",
        "  plain-int: 0755\n",
        "  plain-date: 2001-12-14\n",
        "  plain-bool: on\n",
        "  plain-null: ~\n",
    ] {
        assert!(run.stdout.contains(line), "{line:?} in:\n{}", run.stdout);
    }
}

#[test]
fn hostile_streams_are_refused_at_once_with_nothing_written() {
    let mut bomb =
        String::from("apiVersion: v1\nkind: ConfigMap\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        bomb.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", ")));
    }
    let cases = [
        ("an alias bomb", bomb),
        ("10,000-deep flow nesting", format!("a: {}1{}\n", "[".repeat(10_000), "]".repeat(10_000))),
        ("10,000-deep block nesting", format!("a:\n{}x\n", "- ".repeat(10_000))),
        ("a 200 MB document", format!("a: \"{}\"\n", "x".repeat(200 << 20))),
    ];
    for (what, input) in cases {
        let (run, cpu) = render_cpu(&["--allow-plain-secret-digests"], &input);
        eprintln!("{what}: refused after {cpu:?} of CPU time");
        assert_eq!(run.code, Some(1), "{what}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{what}: never a partial stream");
        assert!(run.stderr.starts_with("configsum render: "), "{what}: {}", run.stderr);
        assert!(!run.stderr.contains("xxxx"), "{what}: quotes no value: {}", run.stderr);
        // Expanding the bomb or the nesting would take minutes of CPU; refusing it, well under
        // a second, however busy the machine.
        assert!(cpu < Duration::from_secs(1), "{what} took {cpu:?} of CPU time");
    }
}

#[test]
fn errors_name_the_document_the_object_and_the_line_and_never_a_value() {
    let dir = setup("render-errors");
    let secret =
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\ndata:\n  k: \"{MARKER}!\"\n");
    std::fs::write(dir.path("objects.yaml"), &secret).expect("objects");
    let objects = dir.path("objects.yaml").display().to_string();
    let cases = [
        (
            vec![],
            format!(
                "a: 1\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: db, namespace: shop}}\n\
                 stringData:\n  password: x\n  password: {MARKER}\n"
            ),
            "document 2: Secret shop/db: not valid YAML at line 8, column 3: duplicate key \"password\""
                .to_owned(),
        ),
        (
            vec![],
            format!("a: 1\n---\nkind: ConfigMap\nmetadata:\n  name: c\ndata: {{k: '{MARKER}\n"),
            "document 2: ConfigMap c: not valid YAML at line 6, column 11: unclosed quote".to_owned(),
        ),
        (
            vec![],
            secret.clone(),
            "document 1: Secret default/s: data.k is not valid base64".to_owned(),
        ),
        (
            vec!["--objects-from", objects.as_str()],
            "a: 1\n".to_owned(),
            format!(
                "{objects}: document 1 (Secret default/s): data.k is not valid base64 (line 5, column 6)"
            ),
        ),
    ];
    for (args, input, expected) in cases {
        let mut args = args;
        args.push("--allow-plain-secret-digests");
        let run = render(&args, &input);
        assert_eq!((run.code, run.stdout.as_str()), (Some(1), ""), "{}", run.stderr);
        assert_eq!(run.stderr, format!("configsum render: {expected}\n"));
        assert!(!run.stderr.contains(MARKER));
    }
}

/// A chart's output with a language tag: refused, never written back for a later YAML loader to
/// run. In a document rendered as it is read, in a workload whose text is kept until the
/// objects after it are known, and in an `--objects-from` file; a tag-like string is a string.
#[test]
fn tags_outside_yaml_s_core_schema_are_refused_with_nothing_written() {
    const PYTHON: &str = "!!python/object/apply:os.system";
    let dir = setup("render-tags");
    let objects_file = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata:\n  k: {PYTHON} [\"id\"]\n"
    );
    std::fs::write(dir.path("objects.yaml"), objects_file).expect("objects");
    let objects = dir.path("objects.yaml").display().to_string();
    let config_map = "---\n# Source: app/templates/configmap.yaml\napiVersion: v1\nkind: ConfigMap\n\
                      metadata: {name: app-config, namespace: shop}\ndata: {log-level: debug}\n";
    let web = |command: &str| {
        format!(
            "---\n# Source: app/templates/deployment.yaml\napiVersion: apps/v1\nkind: Deployment\n\
             metadata: {{name: web, namespace: shop}}\nspec:\n  selector: {{matchLabels: {{app: web}}}}\n  \
             template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers:\n      \
             - name: app\n        image: web:1.4\n        command: {command}\n        envFrom:\n        \
             - configMapRef: {{name: app-config}}\n"
        )
    };
    let refused = "Deployment shop/web: tag outside YAML's core schema";
    let cases = [
        // The objects first: the workload is rendered as it is read.
        (
            vec![],
            format!("{config_map}{}", web(&format!("{PYTHON} [\"id\"]"))),
            format!("document 2: {refused} at line 20, column 18"),
        ),
        // The workload first, reading a ConfigMap after it: refused at its first reading, before
        // its text is kept to be rendered at the end.
        (
            vec![],
            format!("{}{config_map}", web(&format!("{PYTHON}\n        - id"))),
            format!("document 1: {refused} at line 14, column 18"),
        ),
        (
            vec![],
            format!("{config_map}{}", web("!custom [sh]")),
            format!("document 2: {refused} at line 20, column 18"),
        ),
        (
            vec!["--objects-from", objects.as_str()],
            web("[sh]"),
            format!(
                "{objects}: document 1 (ConfigMap default/c): tag outside YAML's core schema at line 5, column 6"
            ),
        ),
    ];
    for (args, input, expected) in cases {
        let mut args = args;
        args.push("--allow-plain-secret-digests");
        let run = render(&args, &input);
        assert_eq!((run.code, run.stdout.as_str()), (Some(1), ""), "{}", run.stderr);
        assert_eq!(run.stderr, format!("configsum render: {expected}\n"));
        assert!(!run.stderr.contains("python") && !run.stderr.contains("custom"), "{}", run.stderr);
    }
    // Only text that looks like a tag: strings, written back as strings.
    let input = format!("{config_map}{}", web(&format!("[\"{PYTHON}\", '!custom']")));
    let run = render(&["--allow-plain-secret-digests"], &input);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let command =
        &documents(&run.stdout)[1]["spec"]["template"]["spec"]["containers"][0]["command"];
    assert_eq!(command, &json!([PYTHON, "!custom"]));
    assert!(!run.stdout.contains(&format!("{PYTHON} ")) && !run.stdout.contains("!custom "));
}

/// Workloads that roll together and image-env are admission's: render has no API server to
/// read a tracked workload's template from (defaults and all) and no registry. Their
/// annotations and variables are left as they are, and stderr says so for the workloads.
#[test]
fn tracked_workloads_and_image_env_are_left_to_admission() {
    let dir = setup("render-together");
    let key = dir.path("key").display().to_string();
    let stream = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: keycloak\n  annotations:\n    \
        configsum.dev/track: deployment/keycloak-db\n    configsum.dev/image-env: c/DIGEST=ghcr.io/org/tool:prod\n\
        spec:\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata:\n      labels: {a: b}\n      \
        annotations: {deployment.configsum.dev/keycloak-db: kept}\n    \
        spec: {containers: [{name: c, image: x, env: [{name: DIGEST, value: old}]}]}\n";
    let run = render(&["--digest-key-file", &key], stream);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(documents(&run.stdout), documents(stream), "nothing changed");
    assert_eq!(
        run.stderr,
        "configsum render: document 1 (Deployment default/keycloak): deployment/keycloak-db: \
         left to admission, which reads its pod template from the cluster\n"
    );
}
