//! `configsum explain`, the real binary, offline: a chart's stream is rendered with its digests
//! (`configsum render`), its Secret changes, and explain says which workloads roll, which
//! keys they read and why the others do not, as text and as JSON; never a Secret's value.

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

const KEY: &str = "0123456789abcdef0123456789abcdef\n";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn configsum(args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_configsum"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn configsum");
    let _ = child.stdin.take().expect("stdin").write_all(stdin.as_bytes());
    let out = child.wait_with_output().expect("configsum finishes");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("utf-8"),
        stderr: String::from_utf8(out.stderr).expect("utf-8"),
    }
}

fn deployment(name: &str, annotations: Value, container: Value) -> String {
    let mut c = json!({"name": "app", "image": "shop/app:1"});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), container.as_object()) {
        c.extend(extra.clone());
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [c]}}}})
    .to_string()
}

/// A Deployment that mounts one key of Secret db as a file (a volume's `items`).
fn mounted(name: &str, key: &str) -> String {
    let mut deployment: Value =
        serde_json::from_str(&deployment(name, json!({}), json!({}))).expect("json");
    deployment["spec"]["template"]["spec"]["volumes"] = json!([{"name": "db", "secret": {"secretName": "db", "items": [{"key": key, "path": key}]}}]);
    deployment.to_string()
}

fn env_key(key: &str) -> Value {
    json!({"env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "db", "key": key}}}]})
}

#[test]
fn explain_says_which_workloads_roll_when_a_secret_changes_and_why_not() {
    let dir = std::env::temp_dir().join(format!("configsum-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let key = dir.join("key");
    std::fs::write(&key, KEY).expect("key");
    let key = key.display().to_string();

    // The chart as rendered at its last install: every workload carries its digests.
    let secret = |password: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: db}}\nstringData: {{password: {password}, user: shop}}\n"
        )
    };
    let every_key = json!({"envFrom": [{"secretRef": {"name": "db"}}]});
    let workloads = [
        deployment("web", json!({}), every_key.clone()),
        deployment("api", json!({}), env_key("password")),
        deployment("worker", json!({}), env_key("user")),
        deployment("opted-out", json!({"configsum.dev/enabled": "false"}), every_key.clone()),
        deployment("ignores", json!({"configsum.dev/ignore": "secret/db"}), every_key.clone()),
        mounted("mounted-user", "user"),
    ];
    let stream = format!("{}---\n{}", secret("s3cr3t-one"), workloads.join("\n---\n"));
    let rendered =
        configsum(&["render", "--digest-key-file", &key, "--namespace", "shop"], &stream);
    assert_eq!(rendered.code, Some(0), "{}", rendered.stderr);

    // Then the Secret's password changes, and a workload is added that was never admitted.
    let changed = rendered.stdout.replace("s3cr3t-one", "s3cr3t-two")
        + "---\n"
        + &deployment("fresh", json!({}), every_key);
    let file = dir.join("changed.yaml");
    std::fs::write(&file, &changed).expect("stream");
    let file = file.display().to_string();
    let explain = |extra: &[&str]| {
        let mut args = vec!["explain", "secret/db", "-n", "shop", "-f", &file];
        args.extend_from_slice(extra);
        configsum(&args, "")
    };

    let run = explain(&["--digest-key-file", &key, "--output", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer: Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(answer["apiVersion"], "configsum.dev/v1alpha1");
    assert_eq!(answer["kind"], "Explanation");
    assert_eq!(
        (answer["object"].clone(), answer["exists"].clone()),
        (json!("secret/db"), json!(true))
    );
    let verdicts: Vec<(String, String, Value)> = answer["workloads"]
        .as_array()
        .expect("workloads")
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap_or("").to_owned(),
                w["verdict"].as_str().unwrap_or("").to_owned(),
                w["keys"].clone(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            ("api".to_owned(), "stale".to_owned(), json!(["password"])),
            ("fresh".to_owned(), "first-observation".to_owned(), json!(["*"])),
            ("mounted-user".to_owned(), "current".to_owned(), json!(["user"])),
            ("opted-out".to_owned(), "opted-out".to_owned(), json!(["*"])),
            ("web".to_owned(), "stale".to_owned(), json!(["*"])),
            ("worker".to_owned(), "current".to_owned(), json!(["user"])),
        ],
        "ignores does not track it; worker reads a key that did not change"
    );
    for secret_value in ["s3cr3t-one", "s3cr3t-two"] {
        assert!(!run.stdout.contains(secret_value), "never a Secret's value");
    }

    // --key password: only the workloads whose pods read it; as a table for people.
    let run = explain(&["--digest-key-file", &key, "--key", "password"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[0], "secret/db in shop, key password: tracked by 4 workloads");
    assert!(lines[1].starts_with("WORKLOAD") && lines[1].contains("VERDICT"), "{}", run.stdout);
    assert!(lines[2].starts_with("Deployment/api") && lines[2].contains("stale"), "{}", run.stdout);
    assert!(!run.stdout.contains("worker"), "{}", run.stdout);
    assert!(!run.stdout.contains("mounted-user"), "{}", run.stdout);
    // --key user: read through an env key (worker), envFrom (web, fresh, opted-out) and a
    // volume's items (mounted-user); not api, which reads password only.
    let run = explain(&["--digest-key-file", &key, "--key", "user", "--output", "json"]);
    let answer: Value = serde_json::from_str(&run.stdout).expect("json");
    let names: Vec<&str> = answer["workloads"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(names, ["fresh", "mounted-user", "opted-out", "web", "worker"]);

    // Without the digest key a Secret's current digest cannot be told.
    let run = explain(&[]);
    assert_eq!(run.code, Some(0));
    assert!(
        run.stdout.contains("unknown") && run.stdout.contains("no digest key"),
        "{}",
        run.stdout
    );

    // An object that does not exist: the answer, and exit 1; a malformed one: exit 2.
    let run = configsum(&["explain", "configmap/nope", "-n", "shop", "-f", &file], "");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(run.stdout, "configmap/nope in shop (it does not exist): tracked by 0 workloads\n");
    let run = configsum(&["explain", "secret/db", "-n", "../kube-system", "-f", &file], "");
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("is not a namespace name"), "{}", run.stderr);
    let run = configsum(&["explain", "cronjob/web", "-f", &file], "");
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("not configmap/<name>, secret/<name> or a workload"),
        "{}",
        run.stderr
    );

    // A workload: every input, recorded against current; no rollout status in a file.
    let run = configsum(
        &[
            "explain",
            "deploy/api",
            "-n",
            "shop",
            "-f",
            &file,
            "--digest-key-file",
            &key,
            "--output",
            "json",
        ],
        "",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer: Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(answer["kind"], "WorkloadExplanation");
    assert_eq!(answer["workload"], "deployment/api");
    assert_eq!(answer["verdict"], "stale");
    assert_eq!(answer["inputs"][0]["input"], "secret/db");
    assert_eq!(answer["inputs"][0]["keys"], json!(["password"]));
    assert_eq!(answer["inputs"][0]["verdict"], "stale");
    assert_eq!(answer["rollout"]["state"], "unknown");
    let run = configsum(&["explain", "sts/nope", "-n", "shop", "-f", &file], "");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(run.stdout, "statefulset/nope in shop: it does not exist\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hour of the day (UTC) `ahead` hours from now, as `HH`.
fn hour_ahead(ahead: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock");
    format!("{:02}", (now.as_secs() / 3600 + ahead) % 24)
}

/// A window that opens `ahead` hours from the current hour, for an hour: closed now, and for
/// the few seconds a run takes, whenever the test runs.
fn window_ahead(ahead: u64) -> String {
    format!("* {}:00-{}:00 UTC", hour_ahead(ahead), hour_ahead(ahead + 1))
}

#[test]
fn explain_says_when_a_stale_workload_is_paused_or_outside_its_window() {
    let dir = std::env::temp_dir().join(format!("configsum-explain-gates-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let key = dir.join("key");
    std::fs::write(&key, KEY).expect("key");
    let key = key.display().to_string();

    let every_key = json!({"envFrom": [{"secretRef": {"name": "db"}}]});
    let with = |name: &str, annotations: Value| deployment(name, annotations, every_key.clone());
    let always = "* 00:00-12:00 UTC; * 12:00-00:00 UTC";
    let workloads = [
        with("paused", json!({"configsum.dev/paused": "true"})),
        with("closed", json!({"configsum.dev/roll-window": window_ahead(3)})),
        with("invalid", json!({"configsum.dev/roll-window": "Mon 25:00-26:00 UTC"})),
        with("open", json!({"configsum.dev/roll-window": always})),
        with("namespaced", json!({})),
    ];
    let secret = |password: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: db}}\nstringData: {{password: {password}}}\n"
        )
    };
    let stream = format!("{}---\n{}", secret("s3cr3t-one"), workloads.join("\n---\n"));
    let rendered =
        configsum(&["render", "--digest-key-file", &key, "--namespace", "shop"], &stream);
    assert_eq!(rendered.code, Some(0), "{}", rendered.stderr);
    // The password changes; the Namespace, in the stream too, has a window of its own.
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "shop", "annotations": {"configsum.dev/roll-window": window_ahead(5)}}});
    let changed =
        format!("{}---\n{namespace}\n", rendered.stdout.replace("s3cr3t-one", "s3cr3t-two"));
    let file = dir.join("changed.yaml");
    std::fs::write(&file, &changed).expect("stream");
    let file = file.display().to_string();
    let explain = |subject: &str, extra: &[&str]| {
        let mut args =
            vec!["explain", subject, "-n", "shop", "-f", &file, "--digest-key-file", &key];
        args.extend_from_slice(extra);
        configsum(&args, "")
    };

    let run = explain("secret/db", &["--output", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer: Value = serde_json::from_str(&run.stdout).expect("json");
    let of = |name: &str| {
        let workloads = answer["workloads"].as_array().expect("workloads");
        workloads.iter().find(|w| w["name"] == name).cloned().expect("listed")
    };
    assert_eq!(of("paused")["verdict"], "paused");
    assert!(
        of("paused")["because"]
            .as_str()
            .unwrap_or("")
            .contains("removing the annotation rolls it once")
    );
    let closed = of("closed");
    assert_eq!(closed["verdict"], "waiting-window");
    assert_eq!(closed["window"]["from"], "workload");
    let opens = closed["window"]["opens"].as_str().unwrap_or("");
    assert!(opens.ends_with(&format!("T{}:00:00Z", hour_ahead(3))), "{closed}");
    let invalid = of("invalid");
    assert_eq!(invalid["verdict"], "waiting-window", "a window that does not parse never opens");
    assert_eq!(invalid["window"]["opens"], Value::Null);
    assert!(invalid["window"]["invalid"].as_str().unwrap_or("").contains("times"), "{invalid}");
    assert_eq!(
        of("open")["verdict"],
        "stale",
        "its own window is open: the namespace's is not read"
    );
    assert!(of("open").get("because").is_none(), "{}", of("open"));
    let namespaced = of("namespaced");
    assert_eq!(namespaced["verdict"], "waiting-window");
    assert_eq!(namespaced["window"]["from"], "namespace");

    // As a table: each verdict, and why under it.
    let run = explain("secret/db", &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "Deployment/closed: waiting-window: outside its maintenance window ({}): it rolls at {opens}",
            window_ahead(3)
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("Deployment/paused: paused: configsum.dev/paused: \"true\" on it"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "Deployment/namespaced: waiting-window: outside namespace shop's maintenance window"
        ),
        "{}",
        run.stdout
    );
    // A workload's own answer says the same, and its verdict.
    let run = explain("deploy/paused", &["--output", "json"]);
    let answer: Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(answer["verdict"], "paused");
    assert_eq!(answer["inputs"][0]["verdict"], "paused");
    let run = explain("deploy/invalid", &[]);
    assert!(
        run.stdout.starts_with("deployment/invalid in shop: waiting-window, 1 input\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("secret/db: waiting-window: its roll-window does not parse, so it never rolls until fixed: window 1: times"),
        "{}",
        run.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stream with a language tag is refused as explain reads it, by file or on stdin: exit 2,
/// the file, the document, the object and the line named, nothing on stdout.
#[test]
fn explain_refuses_a_tag_outside_yaml_s_core_schema() {
    let dir = std::env::temp_dir().join(format!("configsum-explain-tags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let workload = deployment("web", json!({}), env_key("password"));
    let stream = format!(
        "{workload}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: db, namespace: shop}}\n\
         stringData:\n  password: !!python/object/apply:os.system [\"id\"]\n"
    );
    let path = dir.join("chart.yaml");
    std::fs::write(&path, &stream).expect("stream");
    let file = path.display().to_string();
    let refused =
        "document 2 (Secret shop/db): tag outside YAML's core schema at line 7, column 13";
    for (shown, args_file, stdin) in [(file.as_str(), file.as_str(), ""), ("stdin", "-", &stream)] {
        let run = configsum(&["explain", "secret/db", "-n", "shop", "-f", args_file], stdin);
        assert_eq!((run.code, run.stdout.as_str()), (Some(2), ""), "{}", run.stderr);
        assert_eq!(run.stderr, format!("configsum explain: {shown}: {refused}\n"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn explain_lists_what_a_token_across_namespaces_stands_for() {
    let dir = std::env::temp_dir().join(format!("configsum-explain-across-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut web: Value = serde_json::from_str(&deployment(
        "web",
        json!({"configsum.dev/track": "configmap/shared/ca, configmap/shared/tls, configmap/local/k"}),
        json!({}),
    ))
    .expect("json");
    web["metadata"]["namespace"] = json!("app");
    let config_map = |namespace: &str, name: &str, annotations: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "data": {"k": "v"}})
    };
    let stream = [
        web,
        config_map("shared", "ca", json!({"configsum.dev/readable-from": "other, app"})),
        config_map("shared", "tls", json!({})),
        config_map("app", "local", json!({})),
        // Would consent, but `local` of the workload's own namespace makes its token a key.
        config_map("local", "k", json!({"configsum.dev/readable-from": "*"})),
    ]
    .map(|document| document.to_string())
    .join("\n---\n");
    let path = dir.join("stream.yaml");
    std::fs::write(&path, &stream).expect("stream");
    let file = path.display().to_string();
    let run =
        configsum(&["explain", "deployment/web", "-n", "app", "-f", &file, "--output", "json"], "");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer: Value = serde_json::from_str(&run.stdout).expect("json");
    let inputs = answer["inputs"].as_array().expect("inputs");
    let lines: Vec<(&str, &str, Value)> = inputs
        .iter()
        .map(|i| {
            (
                i["input"].as_str().unwrap_or(""),
                i["verdict"].as_str().unwrap_or(""),
                i["keys"].clone(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("configmap/local", "first-observation", json!(["k"])),
            ("configmap/shared/ca", "first-observation", json!(["*"])),
            ("configmap/shared/tls", "untracked", json!(["*"])),
        ],
        "no line for the absent `configmap/shared` nor for `local/k`: {}",
        run.stdout
    );
    // Bound to its own namespace and name, as the webhook digests it.
    use configsum::core::{Digester, ObjectContent, ObjectId, ObjectRef, refs::ConsumedKeys};
    let content = ObjectContent::from_entries([("k".to_owned(), b"v".to_vec())].into());
    let id = ObjectId { namespace: "shared", object: &ObjectRef::config_map("ca") };
    let expected = Digester::default().digest(id, &content, &ConsumedKeys::All, None);
    assert_eq!(inputs[1]["current"], json!(expected));
    assert_eq!(inputs[2]["current"], Value::Null, "no consent: nothing to tell");
    let _ = std::fs::remove_dir_all(&dir);
}
