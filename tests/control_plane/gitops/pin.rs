//! `image-policy: pin` as a GitOps tool meets it, on the real API server: a webhook that
//! resolves tags against a real registry on loopback (tests/support/registry.rs), a
//! client-side apply that writes the tag back (an Argo CD sync), server-side apply dry runs (its
//! server-side diff, Flux's drift checks) and a Job, whose template is immutable.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::control_plane::ControlPlane;
use crate::install::{installation, run, start_serve_with};
use crate::registry::Registry;
use crate::webhook::scoped_copy;

/// The webhook configuration (and namespace label) of this module's webhook.
const NAME: &str = "gitops-pin";

fn workload(kind: &str, namespace: &str, name: &str, image: &str) -> Value {
    let pod = json!({"metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": image}],
            "restartPolicy": if kind == "Job" { "Never" } else { "Always" }}});
    let spec = match kind {
        "Job" => json!({"template": pod}),
        _ => json!({"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": pod}),
    };
    let api_version = if kind == "Job" { "batch/v1" } else { "apps/v1" };
    json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "annotations": {
            "configsum.dev/images": "app", "configsum.dev/image-policy": "pin"}},
        "spec": spec})
}

fn image(object: &Value) -> &str {
    object["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap_or_default()
}

fn get(cp: &ControlPlane, kind: &str, namespace: &str, name: &str) -> Value {
    cp.get_json(&[kind, name, "-n", namespace])
}

/// A server-side apply dry run of `object` as Argo CD's controller asks for its server-side
/// diff (Flux's is the same request under its own name).
fn server_side_dry_run(cp: &ControlPlane, object: &Value) -> Value {
    let args = [
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager",
        "argocd-controller",
        "--force-conflicts",
        "-o",
        "json",
        "-f",
        "-",
    ];
    let output = cp.kubectl_with_input(&args, Some(&object.to_string()));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("kubectl JSON")
}

#[test]
fn under_pin_a_sync_writes_the_tag_back_and_the_webhook_pins_it_again() {
    run(async {
        let install = installation().await;
        let cp = install.cp;
        let registry = Registry::anonymous().await;
        let first = registry.push_image("shop/web", "prod", "one").await;
        let tag = registry.image("shop/web", "prod");
        let host = registry.host();
        let webhook = start_serve_with(
            cp,
            &install.dir,
            "configsum-webhook",
            &["--insecure-registry", &host, "--registry-allow", &host],
        )
        .await;
        scoped_copy(install, NAME, &webhook.addr);
        let ns = NAME;
        cp.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{configsum-test/{NAME}: \"true\"}}\n"
        ));
        // The API server picks the new configuration up from its watch: probe until it pins.
        let deadline = Instant::now() + Duration::from_secs(30);
        for attempt in 0.. {
            let probe = format!("probe-{attempt}");
            cp.apply(&workload("Deployment", ns, &probe, &tag).to_string());
            if image(&get(cp, "deployment", ns, &probe)) != tag {
                break;
            }
            assert!(Instant::now() < deadline, "never pinned: {:?}", webhook.logs());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let pinned = format!("{tag}@{first}");

        // Created from Git's manifest (the tag), stored pinned.
        let web = workload("Deployment", ns, "web", &tag);
        cp.apply(&web.to_string());
        let created = get(cp, "deployment", ns, "web");
        assert_eq!(image(&created), pinned);

        // Argo CD's default diff sees the tag in Git and the digest live; its sync applies Git
        // again. Client-side apply sends the tag back (the live value differs from the
        // manifest's), and the webhook pins it in the same write: nothing changes, nothing rolls.
        let synced = cp.apply(&web.to_string());
        assert!(synced.contains("deployment.apps/web configured"), "a patch was sent: {synced}");
        let after = get(cp, "deployment", ns, "web");
        assert_eq!(image(&after), pinned);
        assert_eq!(after["metadata"]["generation"], created["metadata"]["generation"]);
        assert_eq!(after["spec"], created["spec"]);

        // Server-side diff and Flux: the dry run of Git's manifest is pinned like the live object,
        // so a current pin is no difference.
        assert_eq!(image(&server_side_dry_run(cp, &web)), pinned);

        // A Job is pinned when created, and reviewed at creation only: a sync that writes the
        // tag back changes its template, which is immutable.
        let job = workload("Job", ns, "migrate", &tag);
        cp.apply(&job.to_string());
        assert_eq!(image(&get(cp, "job", ns, "migrate")), pinned);
        let refused = cp.kubectl_with_input(&["apply", "-f", "-"], Some(&job.to_string()));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "the Job's template changed");
        assert!(stderr.contains("field is immutable"), "{stderr}");
        // Flux's dry run of the Job is refused the same way.
        let args = [
            "apply",
            "--server-side",
            "--dry-run=server",
            "--force-conflicts",
            "--field-manager",
            "kustomize-controller",
            "-f",
            "-",
        ];
        let refused = cp.kubectl_with_input(&args, Some(&job.to_string()));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "the Job's dry run passed");
        assert!(stderr.contains("field is immutable"), "{stderr}");

        // Once the tag has moved, the dry run has the new digest: a difference until the
        // controller (or a sync) re-pins. The webhook reuses a tag's answer for up to 10 s.
        let second = registry.push_image("shop/web", "prod", "two").await;
        assert_ne!(second, first);
        let moved = format!("{tag}@{second}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while image(&server_side_dry_run(cp, &web)) != moved {
            assert!(Instant::now() < deadline, "the dry run never resolved the moved tag");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(image(&get(cp, "deployment", ns, "web")), pinned, "a dry run writes nothing");

        cp.kubectl_ok(&["delete", "mutatingwebhookconfiguration", NAME]);
        drop(webhook);
    });
}
