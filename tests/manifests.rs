//! The manifests and the code cannot drift apart: every claim the manifests
//! make about the server (ports, paths, arguments, kinds, RBAC, Secrets) is
//! checked against the code itself, for the kustomize base and for the Helm
//! chart rendered with its defaults and with charts/configsum/ci/custom-values.yaml
//! (a test module per source, at the end). Schema validation is in
//! scripts/validate-manifests.sh (part of `make test`); tests/chart.rs compares
//! the chart with the base object by object.

#[path = "support/chart.rs"]
mod render;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use clap::Parser as _;
use configsum::config::{Cli, Command, DIGEST_KEY_FILE_NAME, DIGEST_KEY_SECRET};
use configsum::core::AnnotationDomain;
use configsum::core::custom_kinds;
use configsum::core::model::annotations::NAMESPACE_LABEL;
use configsum::core::model::kinds::{self, KindRow};
use configsum::core::model::operation::Operation;
use configsum::core::rbac::{
    LEASE_VERBS, controller_permissions_among, csi_controller_permissions, csi_webhook_permissions,
    webhook_permissions_among,
};
use configsum::core::{Digester, Settings};
use configsum::lookup::{FileSource, lookup_budget};
use configsum::process::{MetricsRegistry, Readiness, admin_router};
use configsum::webhook::api::{AppState, router};
use configsum::webhook::{DRAIN_TIMEOUT, WebhookMetrics};
use serde_json::Value;
use tower::ServiceExt as _;

const BASE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/base");
/// The namespace chart_custom is rendered into: anything but the base's.
const CUSTOM_NAMESPACE: &str = "configsum-platform";

struct Manifests {
    objects: Vec<Value>,
    namespace: String,
    /// The image every container runs.
    image: String,
    /// The Secret the webhook serves TLS from when no Certificate makes it (tls.mode=secret).
    user_tls_secret: Option<String>,
    /// Whether the CSI driver's statuses are granted (the chart's `csi.enabled`).
    csi: bool,
}

impl Manifests {
    /// manifests/base, file by file.
    fn base() -> &'static Manifests {
        static BASE_MANIFESTS: LazyLock<Manifests> = LazyLock::new(Manifests::load);
        &BASE_MANIFESTS
    }

    /// charts/configsum with its defaults, as `helm install -n configsum-system` renders it.
    fn chart() -> &'static Manifests {
        static CHART: LazyLock<Manifests> = LazyLock::new(|| Manifests {
            objects: render::Helm::V4.render(render::NAMESPACE, &[]),
            namespace: render::NAMESPACE.to_owned(),
            image: format!("ghcr.io/configsum/configsum:{}", env!("CARGO_PKG_VERSION")),
            user_tls_secret: None,
            csi: false,
        });
        &CHART
    }

    /// charts/configsum with every value moved (ci/custom-values.yaml), in another namespace.
    fn chart_custom() -> &'static Manifests {
        static CUSTOM: LazyLock<Manifests> = LazyLock::new(|| {
            let values = custom_values();
            let image = &values["image"];
            Manifests {
                objects: render::Helm::V4.render(CUSTOM_NAMESPACE, &["-f", render::CUSTOM_VALUES]),
                namespace: CUSTOM_NAMESPACE.to_owned(),
                image: format!("{}:{}", str_of(&image["repository"]), str_of(&image["tag"])),
                user_tls_secret: Some(str_of(&values["tls"]["existingSecret"]).to_owned()),
                csi: values["csi"]["enabled"] == Value::Bool(true),
            }
        });
        &CUSTOM
    }

    fn load() -> Manifests {
        let mut objects = Vec::new();
        for file in resource_files() {
            let text = std::fs::read_to_string(Path::new(BASE).join(&file)).expect("manifest file");
            let docs: Vec<Value> =
                serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
            objects.extend(docs.into_iter().filter(|d| !d.is_null()));
        }
        let text = std::fs::read_to_string(Path::new(BASE).join("kustomization.yaml"))
            .expect("kustomization");
        let kustomization: Value = serde_saphyr::from_str(&text).expect("kustomization YAML");
        Manifests {
            objects,
            namespace: str_of(&kustomization["namespace"]).to_owned(),
            image: format!("ghcr.io/configsum/configsum:{}", env!("CARGO_PKG_VERSION")),
            user_tls_secret: None,
            csi: false,
        }
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    fn one(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<_> =
            self.all(kind).into_iter().filter(|o| o["metadata"]["name"] == name).collect();
        assert_eq!(found.len(), 1, "expected exactly one {kind} {name}");
        found[0]
    }

    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn deployment(&self) -> &Value {
        self.one("Deployment", "configsum-webhook")
    }

    /// The kinds table of this installation: the built-in kinds and those its
    /// configsum-custom-kinds ConfigMap declares, read by the real parser.
    fn kinds(&self) -> Vec<KindRow> {
        let declared = match self
            .all("ConfigMap")
            .into_iter()
            .find(|c| c["metadata"]["name"] == "configsum-custom-kinds")
        {
            Some(config) => custom_kinds::parse(str_of(&config["data"]["kinds.yaml"]))
                .unwrap_or_else(|e| panic!("the rendered custom kinds: {e}")),
            None => Vec::new(),
        };
        kinds::table_with(declared).expect("the rendered kinds join the table")
    }

    fn webhook(&self) -> &Value {
        let config = self.one("MutatingWebhookConfiguration", "configsum");
        let webhooks = config["webhooks"].as_array().expect("webhooks");
        assert_eq!(webhooks.len(), 1);
        &webhooks[0]
    }
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or_else(|| panic!("expected a string, got {value}"))
}

fn custom_values() -> Value {
    let text = std::fs::read_to_string(render::CUSTOM_VALUES).expect("custom values");
    serde_saphyr::from_str(&text).expect("custom values YAML")
}

fn resource_files() -> Vec<String> {
    let text =
        std::fs::read_to_string(Path::new(BASE).join("kustomization.yaml")).expect("kustomization");
    let k: Value = serde_saphyr::from_str(&text).expect("YAML");
    k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("path").to_owned())
        .collect()
}

fn container<'a>(pod_owner: &'a Value, name: &str) -> &'a Value {
    let containers =
        pod_owner["spec"]["template"]["spec"]["containers"].as_array().expect("containers");
    containers.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("container {name}"))
}

fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_owned())
        .collect()
}

fn parse_cli(args: &[String]) -> Command {
    // The kubelet expands $(POD_NAMESPACE) before the process sees it.
    let argv = std::iter::once("configsum".to_owned())
        .chain(args.iter().map(|a| a.replace("$(POD_NAMESPACE)", "ns")));
    Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("the CLI rejects {args:?}: {e}")).command
}

fn serve_args(m: &Manifests) -> configsum::config::ServeArgs {
    match parse_cli(&args(container(m.deployment(), "webhook"))) {
        Command::Serve(args) => args,
        other => panic!("the webhook container runs {other:?}"),
    }
}

fn controller_args(m: &Manifests) -> configsum::config::ControllerArgs {
    match parse_cli(&args(container(m.one("Deployment", "configsum-controller"), "controller"))) {
        Command::Controller(args) => args,
        other => panic!("the controller container runs {other:?}"),
    }
}

fn port_named(container: &Value, name: &str) -> u16 {
    let ports = container["ports"].as_array().expect("ports");
    let port = ports.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("port {name}"));
    port["containerPort"].as_u64().and_then(|p| u16::try_from(p).ok()).expect("containerPort")
}

#[test]
fn kustomization_lists_every_file_and_nothing_else() {
    let listed: BTreeSet<String> = resource_files().into_iter().collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(BASE)
        .expect("base dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, on_disk);
    let m = Manifests::base();
    assert_eq!(m.one("Namespace", m.namespace())["metadata"]["name"], m.namespace());
}

/// The chart renders the Namespace only with namespace.create (tests/chart.rs).
fn every_namespaced_object_is_in_the_namespace(m: &Manifests) {
    for namespace in m.all("Namespace") {
        assert_eq!(namespace["metadata"]["name"], m.namespace());
    }
    for object in &m.objects {
        let namespaced = !matches!(
            object["kind"].as_str(),
            Some(
                "Namespace"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "MutatingWebhookConfiguration"
                    | "FlowSchema"
                    | "PriorityLevelConfiguration"
            )
        );
        if namespaced {
            assert_eq!(
                object["metadata"]["namespace"],
                m.namespace(),
                "{}",
                object["metadata"]["name"]
            );
        }
    }
}

fn webhook_rules_cover_exactly_what_the_server_mutates(m: &Manifests) {
    let mut in_manifest = BTreeSet::new();
    for rule in m.webhook()["rules"].as_array().expect("rules") {
        assert_eq!(rule["scope"], "Namespaced");
        let list = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .expect(field)
                .iter()
                .map(|v| v.as_str().expect("string").to_owned())
                .collect()
        };
        for group in list("apiGroups") {
            for version in list("apiVersions") {
                for resource in list("resources") {
                    for operation in list("operations") {
                        in_manifest.insert((
                            group.clone(),
                            version.clone(),
                            resource.clone(),
                            operation,
                        ));
                    }
                }
            }
        }
    }
    let mut in_code = BTreeSet::new();
    for row in m.kinds() {
        let kind = &row.declaration;
        let (group, version, resource) = (kind.group, kind.version, kind.resource);
        for (operation, name) in [
            (Operation::Create, "CREATE"),
            (Operation::Update, "UPDATE"),
            (Operation::Delete, "DELETE"),
            (Operation::Connect, "CONNECT"),
        ] {
            if kind.operations.contains(&operation) {
                in_code.insert((
                    group.to_owned(),
                    version.to_owned(),
                    resource.to_owned(),
                    name.to_owned(),
                ));
            }
        }
    }
    assert_eq!(in_manifest, in_code);
}

fn webhook_settings_follow_the_spec(m: &Manifests) {
    let webhook = m.webhook();
    assert_eq!(webhook["sideEffects"], "None");
    assert_eq!(webhook["admissionReviewVersions"], serde_json::json!(["v1"]));
    assert_eq!(webhook["reinvocationPolicy"], "IfNeeded");
    assert_eq!(webhook["failurePolicy"], "Ignore");
    assert_eq!(webhook["matchPolicy"], "Equivalent");
    let condition = webhook["matchConditions"][0]["expression"].as_str().expect("matchCondition");
    assert!(
        condition.contains("ownerReferences") && condition.contains("controller"),
        "{condition}"
    );

    // Opt-in label, own namespace and kube-system excluded.
    let expressions =
        webhook["namespaceSelector"]["matchExpressions"].as_array().expect("selector");
    let by_key: BTreeMap<&str, &Value> =
        expressions.iter().map(|e| (e["key"].as_str().expect("key"), e)).collect();
    assert_eq!(by_key[NAMESPACE_LABEL]["operator"], "In");
    assert_eq!(by_key[NAMESPACE_LABEL]["values"], serde_json::json!(["true"]));
    let excluded = &by_key["kubernetes.io/metadata.name"];
    assert_eq!(excluded["operator"], "NotIn");
    let excluded: Vec<&str> =
        excluded["values"].as_array().expect("values").iter().filter_map(Value::as_str).collect();
    assert!(excluded.contains(&m.namespace()) && excluded.contains(&"kube-system"), "{excluded:?}");

    // The server answers well inside timeoutSeconds, whatever its lookups do.
    let timeout = Duration::from_secs(webhook["timeoutSeconds"].as_u64().expect("timeoutSeconds"));
    assert!(timeout <= Duration::from_secs(5), "a short timeout: {timeout:?}");
    let budget = lookup_budget(Some(timeout), serve_args(m).lookup_timeout);
    assert!(
        budget + Duration::from_millis(500) <= timeout,
        "budget {budget:?} leaves no margin in {timeout:?}"
    );
}

fn service_ports_container_ports_and_listen_addresses_agree(m: &Manifests) {
    let webhook = m.webhook();
    let service = m
        .one("Service", webhook["clientConfig"]["service"]["name"].as_str().expect("service name"));
    assert_eq!(webhook["clientConfig"]["service"]["namespace"], m.namespace());
    assert_eq!(webhook["clientConfig"]["service"]["path"], "/mutate");
    let ports = service["spec"]["ports"].as_array().expect("ports");
    let https = ports
        .iter()
        .find(|p| p["port"] == webhook["clientConfig"]["service"]["port"])
        .expect("webhook port");
    let container = container(m.deployment(), "webhook");
    let target = port_named(container, https["targetPort"].as_str().expect("named targetPort"));
    let args = serve_args(m);
    assert_eq!(args.listen.port(), target);
    let default = match parse_cli(&["serve".into(), "--tls-cert=c".into(), "--tls-key=k".into()]) {
        Command::Serve(args) => args,
        other => panic!("{other:?}"),
    };
    assert_eq!(default.listen.port(), target, "the default --listen port is the container port");
    assert_eq!(args.admin.metrics_listen.port(), port_named(container, "metrics"));
    assert_eq!(default.admin.metrics_listen.port(), port_named(container, "metrics"));
    let pod_labels = &m.deployment()["spec"]["template"]["metadata"]["labels"];
    for (key, value) in service["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&pod_labels[key], value);
    }
}

async fn probe_paths_answer_on_their_listeners(m: &Manifests) {
    let container = container(m.deployment(), "webhook");
    let args = serve_args(m);
    let state = Arc::new(AppState::new(
        FileSource::default(),
        Digester::default(),
        Settings::default(),
        args.lookup_timeout,
        WebhookMetrics::default(),
        Readiness::new(true),
    ));
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        let path = get["path"].as_str().expect("path").to_owned();
        let port = port_named(container, get["port"].as_str().expect("named port"));
        let app = if port == args.listen.port() {
            assert_eq!(get["scheme"], "HTTPS", "{probe}: the webhook listener is TLS");
            router(state.clone())
        } else {
            assert_eq!(port, args.admin.metrics_listen.port(), "{probe}: an unknown port");
            assert_eq!(get["scheme"], "HTTP", "{probe}: the metrics listener is plain HTTP");
            admin_router(Arc::new(MetricsRegistry::new()), state.ready.clone())
        };
        let response = app
            .oneshot(Request::get(&path).body(Body::empty()).expect("request"))
            .await
            .expect("answer");
        assert_eq!(response.status(), StatusCode::OK, "{probe} {path}");
    }
}

fn every_container_argument_is_accepted_by_the_cli(m: &Manifests) {
    let serve = serve_args(m);
    assert!(
        serve.keys.digest_key_file.is_some()
            && serve.objects_from.is_none()
            && !serve.keys.allow_plain_secret_digests
    );
    let job = m.one("Job", "configsum-digest-key");
    match parse_cli(&args(container(job, "ensure-digest-key"))) {
        Command::EnsureDigestKey(ensure) => {
            assert_eq!(ensure.secret_name, DIGEST_KEY_SECRET);
            assert_eq!(ensure.secret_key, DIGEST_KEY_FILE_NAME);
        }
        other => panic!("the Job runs {other:?}"),
    }
}

fn mounted_secrets_are_the_ones_made_for_them(m: &Manifests) {
    let deployment = m.deployment();
    let container = container(deployment, "webhook");
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].as_array().expect("volumes");
    let mount_of = |file: &Path| -> String {
        let mounts = container["volumeMounts"].as_array().expect("mounts");
        let mount = mounts
            .iter()
            .find(|v| file.starts_with(v["mountPath"].as_str().unwrap_or("-")))
            .unwrap_or_else(|| panic!("{} is not under a mount", file.display()));
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]).expect("volume");
        volume["secret"]["secretName"].as_str().expect("a Secret volume").to_owned()
    };
    let args = serve_args(m);
    let tls_secret = match &m.user_tls_secret {
        // tls.mode=secret: the user's Secret, which no Certificate writes.
        Some(secret) => {
            assert!(m.all("Certificate").is_empty());
            secret.clone()
        }
        None => str_of(&m.one("Certificate", "configsum-webhook")["spec"]["secretName"]).to_owned(),
    };
    assert_eq!(mount_of(&args.tls_cert), tls_secret);
    assert_eq!(mount_of(&args.tls_key), tls_secret);
    assert_eq!(args.tls_cert.file_name().and_then(|f| f.to_str()), Some("tls.crt"));
    assert_eq!(args.tls_key.file_name().and_then(|f| f.to_str()), Some("tls.key"));
    let key_file = args.keys.digest_key_file.expect("--digest-key-file");
    assert_eq!(mount_of(&key_file), DIGEST_KEY_SECRET);
    assert_eq!(key_file.file_name().and_then(|f| f.to_str()), Some(DIGEST_KEY_FILE_NAME));
}

fn cert_manager_chain_has_its_required_fields(m: &Manifests) {
    let issuer = |name: &Value| m.one("Issuer", name.as_str().expect("issuer name"));
    let root = m.one("Certificate", "configsum-root-ca");
    assert_eq!(root["spec"]["isCA"], true);
    assert!(root["spec"]["secretName"].is_string() && root["spec"]["commonName"].is_string());
    assert!(issuer(&root["spec"]["issuerRef"]["name"])["spec"]["selfSigned"].is_object());
    let leaf = m.one("Certificate", "configsum-webhook");
    let ca_issuer = issuer(&leaf["spec"]["issuerRef"]["name"]);
    assert_eq!(
        ca_issuer["spec"]["ca"]["secretName"], root["spec"]["secretName"],
        "the CA Issuer signs with the root"
    );
    let dns: Vec<&str> = leaf["spec"]["dnsNames"]
        .as_array()
        .expect("dnsNames")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let service = m.webhook()["clientConfig"]["service"]["name"].as_str().expect("service");
    assert!(dns.contains(&format!("{service}.{}.svc", m.namespace()).as_str()), "{dns:?}");
    for certificate in m.all("Certificate") {
        assert_eq!(certificate["spec"]["issuerRef"]["kind"], "Issuer");
        assert_eq!(certificate["spec"]["issuerRef"]["group"], "cert-manager.io");
    }
    // The caBundle is the root's, which leaf renewals never change.
    let config = m.one("MutatingWebhookConfiguration", "configsum");
    assert_eq!(
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{}/configsum-root-ca", m.namespace())
    );
    let days = |d: &Value| {
        d.as_str()
            .and_then(|s| s.strip_suffix('h')?.parse::<u64>().ok())
            .expect("duration in hours")
    };
    assert!(
        days(&root["spec"]["duration"]) > 10 * days(&leaf["spec"]["duration"]),
        "the root outlives many leaves"
    );
    // When the root is renewed, the injector keeps the old one in the caBundle only until it
    // expires; a leaf the old root signed just before must be replaced by then.
    assert!(
        days(&root["spec"]["renewBefore"]) > days(&leaf["spec"]["duration"]),
        "the old root outlives every leaf it signed"
    );
}

fn rbac_grants_what_the_code_calls_and_nothing_more(m: &Manifests) {
    let rules_of = |role: &Value| -> BTreeSet<(String, String, String, Option<String>)> {
        let mut out = BTreeSet::new();
        for rule in role["rules"].as_array().expect("rules") {
            let strings = |f: &str| -> Vec<String> {
                rule[f]
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default()
            };
            let names = strings("resourceNames");
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        if names.is_empty() {
                            out.insert((group.clone(), resource.clone(), verb.clone(), None));
                        }
                        for name in &names {
                            out.insert((
                                group.clone(),
                                resource.clone(),
                                verb.clone(),
                                Some(name.clone()),
                            ));
                        }
                    }
                }
            }
        }
        out
    };
    assert_eq!(m.all("ClusterRole").len(), 2);
    assert_eq!(m.all("Role").len(), 2);
    let webhook_role = m.one("ClusterRole", "configsum-webhook");
    let table = m.kinds();
    let trackable = kinds::tracked_among(table.iter().map(|row| &row.declaration));
    let csi_webhook = if m.csi { csi_webhook_permissions() } else { Vec::new() };
    let expected: BTreeSet<_> = webhook_permissions_among(trackable)
        .into_iter()
        .chain(csi_webhook)
        .flat_map(|(g, r, verbs)| {
            verbs.iter().map(move |v| (g.to_string(), r.to_string(), v.to_string(), None))
        })
        .collect();
    assert_eq!(rules_of(webhook_role), expected);
    let key_role = m.one("Role", "configsum-digest-key");
    let expected = BTreeSet::from([
        (String::new(), "secrets".into(), "create".into(), None),
        (String::new(), "secrets".into(), "get".into(), Some(DIGEST_KEY_SECRET.to_owned())),
    ]);
    assert_eq!(rules_of(key_role), expected);

    // The controller: exactly docs/controller.md's list for the controller, which is what its code calls.
    let table = m.kinds();
    let rolled = kinds::rolled_among(table.iter().map(|row| &row.declaration));
    let trackable = kinds::tracked_among(table.iter().map(|row| &row.declaration));
    let csi_controller = if m.csi { csi_controller_permissions() } else { Vec::new() };
    let expected: BTreeSet<_> = controller_permissions_among(rolled, trackable)
        .into_iter()
        .chain(csi_controller)
        .flat_map(|(g, r, verbs)| {
            verbs.iter().map(move |v| (g.to_string(), r.to_string(), v.to_string(), None))
        })
        .collect();
    assert_eq!(rules_of(m.one("ClusterRole", "configsum-controller")), expected);
    let lease_role = m.one("Role", "configsum-controller-lease");
    assert_eq!(lease_role["metadata"]["namespace"], m.deployment()["metadata"]["namespace"]);
    let lease_rules = rules_of(lease_role);
    let verbs: BTreeSet<&str> = lease_rules.iter().map(|(_, _, v, _)| v.as_str()).collect();
    assert_eq!(verbs, LEASE_VERBS.iter().copied().collect::<BTreeSet<_>>());
    for (group, resource, _, _) in &lease_rules {
        assert_eq!((group.as_str(), resource.as_str()), ("coordination.k8s.io", "leases"));
    }

    // Each role is bound to the ServiceAccount that runs the code needing it.
    let binding_subject = |kind: &str, name: &str| {
        let binding = m.one(kind, name);
        assert_eq!(binding["roleRef"]["name"], name);
        binding["subjects"][0]["name"].as_str().expect("subject").to_owned()
    };
    let sa_of = |owner: &Value| {
        owner["spec"]["template"]["spec"]["serviceAccountName"].as_str().expect("SA").to_owned()
    };
    assert_eq!(binding_subject("ClusterRoleBinding", "configsum-webhook"), sa_of(m.deployment()));
    assert_eq!(
        binding_subject("RoleBinding", "configsum-digest-key"),
        sa_of(m.one("Job", "configsum-digest-key"))
    );
}

fn the_deployment_is_highly_available_and_locked_down(m: &Manifests) {
    let deployment = m.deployment();
    let spec = &deployment["spec"];
    assert!(spec["replicas"].as_u64().is_some_and(|r| r >= 2));
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["topologySpreadConstraints"][0]["topologyKey"], "kubernetes.io/hostname");
    let pdb = m.one("PodDisruptionBudget", "configsum-webhook");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], spec["selector"]["matchLabels"]);
    for (key, value) in spec["selector"]["matchLabels"].as_object().expect("labels") {
        assert_eq!(&spec["template"]["metadata"]["labels"][key], value);
    }
    let pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .expect("preStop sleep");
    let grace = pod["terminationGracePeriodSeconds"].as_u64().expect("grace period");
    assert!(
        grace > pre_stop + DRAIN_TIMEOUT.as_secs(),
        "grace {grace}s < preStop {pre_stop}s + drain"
    );

    for owner in [deployment, m.one("Job", "configsum-digest-key")] {
        let pod = &owner["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        for container in pod["containers"].as_array().expect("containers") {
            let sc = &container["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"], true);
            assert_eq!(sc["allowPrivilegeEscalation"], false);
            assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
            assert!(container["resources"]["requests"]["memory"].is_string());
            assert!(container["resources"]["limits"]["memory"].is_string());
            assert_eq!(container["image"], m.image.as_str(), "image tag = crate version");
        }
    }
    let makefile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Makefile"))
        .expect("Makefile");
    assert!(
        makefile.contains("IMAGE ?= ghcr.io/configsum/configsum:$(VERSION)"),
        "make image-push and make deploy default to the image the manifests name"
    );
}

async fn the_controller_deployment_agrees_with_the_code(m: &Manifests) {
    let deployment = m.one("Deployment", "configsum-controller");
    let args = controller_args(m);
    assert!(args.keys.digest_key_file.is_some() && !args.keys.allow_plain_secret_digests);
    assert!(deployment["spec"]["replicas"].as_u64().is_some_and(|r| r >= 2));
    let container = container(deployment, "controller");
    assert_eq!(args.admin.metrics_listen.port(), port_named(container, "metrics"));
    // The digest key is the webhook's own Secret, at the same path.
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].as_array().expect("volumes");
    assert!(volumes.iter().any(|v| v["secret"]["secretName"] == DIGEST_KEY_SECRET));
    assert_eq!(args.keys.digest_key_file, serve_args(m).keys.digest_key_file);
    // Identity and Lease namespace come from the downward API.
    let env: Vec<&str> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(env.contains(&"POD_NAMESPACE") && env.contains(&"POD_NAME"), "{env:?}");
    let ready = Readiness::new(true);
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(
            port_named(container, get["port"].as_str().expect("port")),
            args.admin.metrics_listen.port()
        );
        let path = get["path"].as_str().expect("path").to_owned();
        let app = admin_router(Arc::new(MetricsRegistry::new()), ready.clone());
        let response = app
            .oneshot(Request::get(&path).body(Body::empty()).expect("request"))
            .await
            .expect("answer");
        assert_eq!(response.status(), StatusCode::OK, "{probe} {path}");
    }
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(container["image"], m.image.as_str());
}

#[test]
fn the_network_policy_component_selects_the_pods_and_ports_it_names() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/components/network-policy");
    let component: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(dir.join("kustomization.yaml")).expect("component"),
    )
    .expect("YAML");
    assert_eq!(component["kind"], "Component");
    assert_eq!(component["resources"], serde_json::json!(["network-policy.yaml"]));
    let text = std::fs::read_to_string(dir.join("network-policy.yaml")).expect("policies");
    let policies: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    policies_select_the_pods_and_ports_they_name(
        &policies.iter().collect::<Vec<_>>(),
        Manifests::base(),
        "monitoring",
    );
}

/// The chart's NetworkPolicies (networkPolicy.enabled), like the component's.
fn the_network_policies_select_the_pods_and_ports_they_name(m: &Manifests) {
    let values = custom_values();
    let policies = m.all("NetworkPolicy");
    policies_select_the_pods_and_ports_they_name(
        &policies,
        m,
        str_of(&values["networkPolicy"]["metricsNamespace"]),
    );
    // One ipBlock per webhookCallerCIDRs entry, nothing else.
    let webhook = m.one("NetworkPolicy", "configsum-webhook");
    let cidrs: Vec<&Value> = webhook["spec"]["ingress"][0]["from"]
        .as_array()
        .expect("from")
        .iter()
        .map(|f| &f["ipBlock"]["cidr"])
        .collect();
    let expected: Vec<&Value> =
        values["networkPolicy"]["webhookCallerCIDRs"].as_array().expect("CIDRs").iter().collect();
    assert_eq!(cidrs, expected);
}

/// The FlowSchema matches every request of exactly the ServiceAccounts configsum's pods run as,
/// and points at a priority level that exists: one the API server ships, or the one rendered.
fn the_flow_schema_matches_configsums_service_accounts(m: &Manifests) {
    let schema = m.one("FlowSchema", "configsum");
    assert!(schema["metadata"]["namespace"].is_null(), "FlowSchemas are cluster-scoped");
    let pods = m.all("Deployment").into_iter().chain(m.all("Job"));
    let runs_as: BTreeSet<(String, String)> = pods
        .map(|o| {
            let name = str_of(&o["spec"]["template"]["spec"]["serviceAccountName"]);
            (m.namespace().to_owned(), name.to_owned())
        })
        .collect();
    assert_eq!(runs_as.len(), 3, "webhook, controller and digest-key Job: {runs_as:?}");
    let rules = schema["spec"]["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1);
    let matched: BTreeSet<(String, String)> = rules[0]["subjects"]
        .as_array()
        .expect("subjects")
        .iter()
        .map(|s| {
            assert_eq!(s["kind"], "ServiceAccount");
            let account = &s["serviceAccount"];
            (str_of(&account["namespace"]).to_owned(), str_of(&account["name"]).to_owned())
        })
        .collect();
    assert_eq!(matched, runs_as);
    let everything = serde_json::json!(["*"]);
    let resources = &rules[0]["resourceRules"][0];
    for field in ["verbs", "apiGroups", "resources", "namespaces"] {
        assert_eq!(resources[field], everything, "{field}");
    }
    assert_eq!(resources["clusterScope"], true);
    assert_eq!(rules[0]["nonResourceRules"][0]["nonResourceURLs"], everything);
    assert_eq!(schema["spec"]["distinguisherMethod"]["type"], "ByUser");
    let level = str_of(&schema["spec"]["priorityLevelConfiguration"]["name"]);
    let levels = m.all("PriorityLevelConfiguration");
    if levels.is_empty() {
        // Levels every API server has (the suggested configuration), none exempt.
        assert!(["workload-low", "workload-high", "global-default"].contains(&level), "{level}");
    } else {
        assert_eq!(levels.len(), 1);
        assert_eq!(str_of(&levels[0]["metadata"]["name"]), level);
        assert_eq!(levels[0]["spec"]["type"], "Limited");
    }
}

fn policies_select_the_pods_and_ports_they_name(
    policies: &[&Value],
    m: &Manifests,
    metrics_namespace: &str,
) {
    let mut selected = BTreeSet::new();
    for policy in policies {
        assert_eq!(policy["kind"], "NetworkPolicy");
        assert_eq!(policy["metadata"]["namespace"], m.namespace());
        assert_eq!(policy["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
        let name = policy["metadata"]["name"].as_str().expect("name");
        let deployment = m.one("Deployment", name);
        let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
        for (key, value) in
            policy["spec"]["podSelector"]["matchLabels"].as_object().expect("labels")
        {
            assert_eq!(&pod_labels[key], value, "{name} selects its pods");
        }
        let containers =
            deployment["spec"]["template"]["spec"]["containers"].as_array().expect("containers");
        for rule in policy["spec"]["ingress"].as_array().expect("ingress") {
            let from = rule["from"].as_array().expect("from");
            for port in rule["ports"].as_array().expect("ports") {
                let port_name = port["port"].as_str().expect("a named port");
                assert!(
                    containers.iter().any(|c| port_named(c, port_name) > 0),
                    "{name} has a port {port_name}"
                );
                // HTTPS only from addresses, metrics only from the monitoring namespace.
                match port_name {
                    "https" => assert!(
                        from.iter().all(|f| f["ipBlock"]["cidr"].is_string()),
                        "{name}: {rule}"
                    ),
                    "metrics" => assert!(
                        from.iter().all(
                            |f| f["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                                == metrics_namespace
                        ),
                        "{name}: {rule}"
                    ),
                    other => panic!("{name} opens {other}"),
                }
                selected.insert(format!("{name}/{port_name}"));
            }
        }
    }
    let expected =
        ["configsum-controller/metrics", "configsum-webhook/https", "configsum-webhook/metrics"];
    assert_eq!(selected, expected.iter().map(|s| s.to_string()).collect());
}

/// tls.mode=secret: no cert-manager object, and the user's CA is the caBundle.
fn the_users_ca_is_the_ca_bundle(m: &Manifests) {
    use base64::Engine as _;
    assert!(m.all("Issuer").is_empty() && m.all("Certificate").is_empty());
    let config = m.one("MutatingWebhookConfiguration", "configsum");
    assert!(config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_null());
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(str_of(&m.webhook()["clientConfig"]["caBundle"]))
        .expect("caBundle is base64");
    assert_eq!(
        String::from_utf8(bundle).expect("PEM"),
        str_of(&custom_values()["tls"]["caBundle"])
    );
}

/// The values that become arguments reach both Deployments, and the CLI reads
/// them back as the values say.
fn chart_values_reach_the_arguments(m: &Manifests) {
    let values = custom_values();
    let serve = serve_args(m);
    let controller = controller_args(m);
    let domain = AnnotationDomain::new(str_of(&values["annotationDomain"])).expect("domain");
    let insecure: Vec<String> = values["registry"]["insecureRegistries"]
        .as_array()
        .expect("insecureRegistries")
        .iter()
        .map(|r| str_of(r).to_owned())
        .collect();
    let allowed: Vec<String> = values["registry"]["allow"]
        .as_array()
        .expect("registry.allow")
        .iter()
        .map(|r| str_of(r).to_owned())
        .collect();
    assert!(!allowed.is_empty(), "the custom values move registry.allow");
    let ca = &values["registry"]["ca"];
    for (name, custom_kinds) in [
        ("configsum-webhook", &serve.kinds.custom_kinds),
        ("configsum-controller", &controller.kinds.custom_kinds),
    ] {
        let path = custom_kinds.as_ref().and_then(|p| p.to_str());
        assert_eq!(path, Some("/etc/configsum/custom-kinds/kinds.yaml"), "{name}");
    }
    for (name, annotations, registries) in [
        ("configsum-webhook", &serve.annotations, &serve.registries),
        ("configsum-controller", &controller.annotations, &controller.registries),
    ] {
        assert_eq!(annotations.annotation_domain, domain, "{name}");
        assert_eq!(registries.insecure_registries, insecure, "{name}");
        assert_eq!(registries.allowed_registries, allowed, "{name}");
        // customKinds: the rendered file, mounted and passed (its content is checked by kinds()).
        let pod = &m.one("Deployment", name)["spec"]["template"]["spec"];
        let mounted = pod["volumes"].as_array().expect("volumes").iter().any(|v| {
            v["name"] == "custom-kinds" && v["configMap"]["name"] == "configsum-custom-kinds"
        });
        assert!(mounted, "{name}: the custom kinds ConfigMap is mounted");
        assert_eq!(registries.registry_timeout, Duration::from_secs(3), "{name}: extraArgs");
        // --registry-ca-file is the key of the named ConfigMap, mounted.
        let file = registries.registry_ca_file.as_ref().expect("--registry-ca-file");
        assert_eq!(file.file_name().and_then(|f| f.to_str()), Some(str_of(&ca["key"])));
        let pod = &m.one("Deployment", name)["spec"]["template"]["spec"];
        let mount = pod["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .find(|v| file.parent() == Some(Path::new(str_of(&v["mountPath"]))))
            .unwrap_or_else(|| panic!("{name}: {} is not mounted", file.display()));
        let volume = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("volume");
        assert_eq!(volume["configMap"]["name"], ca["configMap"], "{name}");
    }
    assert_eq!(serve.on_lookup_error, configsum::config::OnLookupError::Deny, "extraArgs");
    assert_eq!(serve.log.log_format, configsum::config::LogFormat::Text);
    let c = &values["controller"];
    let duration = |v: &Value| humantime::parse_duration(str_of(v)).expect("duration");
    assert_eq!(controller.window, duration(&c["window"]));
    assert_eq!(controller.rate, c["rate"].as_f64().expect("rate"));
    assert_eq!(u64::from(controller.burst), c["burst"].as_u64().expect("burst"));
    assert_eq!(controller.min_interval, duration(&c["minInterval"]));
    assert_eq!(controller.image_poll_interval, duration(&c["imagePollInterval"]));
    assert_eq!(controller.registry_rate, c["registryRate"].as_f64().expect("registryRate"));
    assert_eq!(
        u64::from(controller.registry_burst),
        c["registryBurst"].as_u64().expect("registryBurst")
    );
    assert_eq!(controller.fan_out, configsum::config::FanOutMode::All, "fanOut");
    assert_eq!(u64::from(controller.max_wave), c["maxWave"].as_u64().expect("maxWave"));
    assert_eq!(controller.wave_timeout, duration(&c["waveTimeout"]));
    // A window has spaces and a `;`: it reaches the flag as one argument, whole.
    assert_eq!(controller.roll_window.as_deref(), Some(str_of(&c["rollWindow"])));
    assert_eq!(controller.log.log_format, configsum::config::LogFormat::Text);
    assert_eq!(
        m.deployment()["spec"]["replicas"],
        values["webhook"]["replicas"],
        "webhook.replicas"
    );
    assert_eq!(
        m.one("Deployment", "configsum-controller")["spec"]["replicas"],
        values["controller"]["replicas"],
        "controller.replicas"
    );
}

/// A test module per source, each running the checks that apply to it:
/// `base::rbac_grants_what_the_code_calls_and_nothing_more`,
/// `chart::rbac_grants_...`, `chart_custom::rbac_grants_...`.
macro_rules! checks {
    ($source:ident: [$($check:ident),* $(,)?], async [$($async_check:ident),* $(,)?]) => {
        mod $source {
            use super::Manifests;
            $(
                #[test]
                fn $check() {
                    super::$check(Manifests::$source());
                }
            )*
            $(
                #[tokio::test]
                async fn $async_check() {
                    super::$async_check(Manifests::$source()).await;
                }
            )*
        }
    };
}

checks!(base: [
    every_namespaced_object_is_in_the_namespace,
    webhook_rules_cover_exactly_what_the_server_mutates,
    webhook_settings_follow_the_spec,
    service_ports_container_ports_and_listen_addresses_agree,
    every_container_argument_is_accepted_by_the_cli,
    mounted_secrets_are_the_ones_made_for_them,
    cert_manager_chain_has_its_required_fields,
    rbac_grants_what_the_code_calls_and_nothing_more,
    the_deployment_is_highly_available_and_locked_down,
    the_flow_schema_matches_configsums_service_accounts,
], async [
    probe_paths_answer_on_their_listeners,
    the_controller_deployment_agrees_with_the_code,
]);

checks!(chart: [
    every_namespaced_object_is_in_the_namespace,
    webhook_rules_cover_exactly_what_the_server_mutates,
    webhook_settings_follow_the_spec,
    service_ports_container_ports_and_listen_addresses_agree,
    every_container_argument_is_accepted_by_the_cli,
    mounted_secrets_are_the_ones_made_for_them,
    cert_manager_chain_has_its_required_fields,
    rbac_grants_what_the_code_calls_and_nothing_more,
    the_deployment_is_highly_available_and_locked_down,
    the_flow_schema_matches_configsums_service_accounts,
], async [
    probe_paths_answer_on_their_listeners,
    the_controller_deployment_agrees_with_the_code,
]);

checks!(chart_custom: [
    every_namespaced_object_is_in_the_namespace,
    webhook_rules_cover_exactly_what_the_server_mutates,
    webhook_settings_follow_the_spec,
    service_ports_container_ports_and_listen_addresses_agree,
    every_container_argument_is_accepted_by_the_cli,
    mounted_secrets_are_the_ones_made_for_them,
    the_users_ca_is_the_ca_bundle,
    rbac_grants_what_the_code_calls_and_nothing_more,
    the_deployment_is_highly_available_and_locked_down,
    the_network_policies_select_the_pods_and_ports_they_name,
    chart_values_reach_the_arguments,
], async [
    probe_paths_answer_on_their_listeners,
    the_controller_deployment_agrees_with_the_code,
]);
