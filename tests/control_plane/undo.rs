//! `kubectl rollout undo` through the webhook, on the real Deployment controller. An undo
//! writes an old template back; the webhook refreshes its digests to the current
//! configuration (the pods read the current configuration anyway).

use std::time::Duration;

use serde_json::{Value, json};

use crate::controller::{secret_digest, wait_until};
use crate::install::{ConsumeAs, Installation, deployment_with_image, installation, run, secret};

const KEY: &str = "secret.configsum.dev/db";

/// The Deployment at `image`, with a Deployment-level annotation `note` so that an apply writes
/// it without touching its template.
fn web(ns: &str, image: &str, note: &str) -> String {
    let mut web: Value = serde_json::from_str(&deployment_with_image(
        ns,
        "web",
        image,
        &[("db", ConsumeAs::SecretEnvFrom)],
    ))
    .expect("json");
    web["metadata"]["annotations"] = json!({"note": note});
    web.to_string()
}

/// The ReplicaSets of `web`: (revision, image, digest, replicas wanted).
fn revisions(install: &Installation, ns: &str) -> Vec<(i64, String, String, i64)> {
    let list = install.cp.get_json(&["replicasets", "-n", ns, "-l", "app=web"]);
    let mut out: Vec<(i64, String, String, i64)> = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|rs| {
                    let revision =
                        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                            .as_str()
                            .and_then(|r| r.parse().ok())
                            .unwrap_or_default();
                    let template = &rs["spec"]["template"];
                    (
                        revision,
                        template["spec"]["containers"][0]["image"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        template["metadata"]["annotations"][KEY]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        rs["spec"]["replicas"].as_i64().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

async fn wait_for_revisions(install: &Installation, ns: &str, count: usize) {
    wait_until(&format!("{count} ReplicaSets"), Duration::from_secs(30), || {
        revisions(install, ns).len() == count
    })
    .await;
}

/// Undo of a roll that only the Secret caused: the old template comes back, the webhook
/// refreshes its digest, and the result is the current template: no new revision, the
/// Deployment stays where it was (kubectl still says "rolled back", and copies the old
/// ReplicaSet's annotations onto the Deployment).
#[test]
fn undo_after_a_secret_only_roll_changes_no_template() {
    run(async {
        let install = installation().await;
        let ns = "undo-secret";
        install.cp.namespace(ns, true);
        let (one, two) = ([("password", "one")], [("password", "two")]);
        install.cp.apply(&format!("{}\n---\n{}", secret(ns, "db", &one), web(ns, "app:1", "a")));
        wait_for_revisions(install, ns, 1).await;
        install.cp.apply(&secret(ns, "db", &two));
        // A write that leaves the template alone: the webhook refreshes the digest, which is
        // the only change of the template.
        install.cp.apply(&web(ns, "app:1", "b"));
        wait_for_revisions(install, ns, 2).await;
        let before = revisions(install, ns);
        assert_eq!(before[0].1, before[1].1, "the same image: a roll by the Secret alone");

        install.cp.kubectl_ok(&["rollout", "undo", "deployment/web", "-n", ns]);
        // The positive signal before asserting that no ReplicaSet came: the Deployment
        // controller has observed the Deployment as the undo left it.
        wait_until("the undo observed", Duration::from_secs(30), || {
            let web = install.cp.get_json(&["deployment", "web", "-n", ns]);
            web["status"]["observedGeneration"] == web["metadata"]["generation"]
        })
        .await;
        assert_eq!(revisions(install, ns), before, "no new ReplicaSet");
        let web = install.cp.get_json(&["deployment", "web", "-n", ns]);
        assert_eq!(
            web["spec"]["template"]["metadata"]["annotations"][KEY],
            secret_digest(ns, "db", &two)
        );
        assert_eq!(web["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");
    });
}

/// Undo of a roll that changed the image too: the old image comes back with the current
/// digest, a template no ReplicaSet had, so the Deployment controller makes a new revision
/// rather than reusing the old ReplicaSet.
#[test]
fn undo_after_an_image_and_secret_roll_makes_a_new_revision() {
    run(async {
        let install = installation().await;
        let ns = "undo-image";
        install.cp.namespace(ns, true);
        let (one, two) = ([("password", "one")], [("password", "two")]);
        install.cp.apply(&format!("{}\n---\n{}", secret(ns, "db", &one), web(ns, "app:1", "a")));
        wait_for_revisions(install, ns, 1).await;
        install.cp.apply(&secret(ns, "db", &two));
        install.cp.apply(&web(ns, "app:2", "b"));
        wait_for_revisions(install, ns, 2).await;

        install.cp.kubectl_ok(&["rollout", "undo", "deployment/web", "-n", ns]);
        wait_for_revisions(install, ns, 3).await;
        let after = revisions(install, ns);
        let current = secret_digest(ns, "db", &two);
        assert_eq!(after[0].0, 1);
        assert_eq!((after[0].1.as_str(), after[0].2 == current), ("app:1", false), "{after:?}");
        assert_eq!(
            (after[2].0, after[2].1.as_str(), after[2].2.as_str()),
            (3, "app:1", current.as_str())
        );
    });
}
