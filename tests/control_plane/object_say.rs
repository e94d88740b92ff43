//! The object's own say and the object selector on the real API server: `configsum.dev/ignore`
//! on a Secret, `--object-selector` in the webhook and the controller alike, and
//! `--namespace-selector` choosing the namespaces the controller serves.

use std::time::Duration;

use crate::controller::{Controller, one_controller_at_a_time, secret_digest, wait_until};
use crate::install::{ConsumeAs, deployment_with_image, installation, run, start_serve_with};
use crate::webhook::scoped_copy;

const NS: &str = "object-say";

/// Secret `name` of [`NS`] with `labels` and `annotations` (flow YAML maps) and one key.
fn secret(name: &str, labels: &str, annotations: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {NS}\n  \
         labels: {labels}\n  annotations: {annotations}\nstringData: {{k: {value}}}\n"
    )
}

fn web(image: &str) -> String {
    let reads = [
        ("db", ConsumeAs::SecretEnvFrom),
        ("other", ConsumeAs::SecretEnvFrom),
        ("shared", ConsumeAs::SecretEnvFrom),
    ];
    deployment_with_image(NS, "web", image, &reads)
}

#[test]
fn ignored_and_unselected_objects_get_no_digest_and_roll_nothing() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        // A webhook of its own with the selector, called for this namespace only; the
        // controller serves only namespaces with the same test label (not the opt-in label).
        let selector = ["--object-selector", "reload=on"];
        let serve = start_serve_with(cp, &install.dir, "configsum-webhook", &selector).await;
        scoped_copy(install, NS, &serve.addr);
        cp.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n  labels: {{configsum-test/{NS}: \"true\"}}\n"
        ));
        let on = "{reload: \"on\"}";
        cp.apply(&format!(
            "{}---\n{}---\n{}",
            secret("db", on, "{}", "one"),
            secret("other", "{}", "{}", "one"),
            secret("shared", on, "{configsum.dev/ignore: \"true\"}", "one"),
        ));
        let key = |name: &str| format!("secret.configsum.dev/{name}");
        let db = |value: &'static str| secret_digest(NS, "db", &[("k", value)]);
        // The scoped webhook configuration reaches the API server through its own watch.
        let image = std::cell::Cell::new(0);
        wait_until("web admitted by the scoped webhook", Duration::from_secs(30), || {
            image.set(image.get() + 1);
            cp.apply(&web(&format!("registry.example/app:{}", image.get())));
            install.template_annotations(NS, "web").get(key("db")).is_some()
        })
        .await;
        let annotations = install.template_annotations(NS, "web");
        assert_eq!(annotations[key("db")], db("one"), "{annotations}");
        assert!(annotations.get(key("other")).is_none(), "unselected: {annotations}");
        assert!(annotations.get(key("shared")).is_none(), "ignored: {annotations}");

        let extra = [
            "--namespace-selector",
            "configsum-test/object-say=true",
            "--object-selector",
            "reload=on",
            "--fan-out",
            "all",
        ];
        let controller =
            Controller::start_as(cp, &install.dir, "configsum-controller", "say", &extra).await;
        let generation = || {
            let deployment = cp.get_json(&["deployment", "web", "-n", NS]);
            deployment["metadata"]["generation"].as_i64().unwrap_or_default()
        };
        let before = generation();

        // Changes of the ignored and of the unselected Secret roll nothing; then db's does.
        // One watch delivers the three in order: once db's roll is done, the others were seen.
        cp.apply(&secret("shared", on, "{configsum.dev/ignore: \"true\"}", "two"));
        cp.apply(&secret("other", "{}", "{}", "two"));
        cp.apply(&secret("db", on, "{}", "two"));
        wait_until("db's change rolled web", Duration::from_secs(20), || {
            install.template_annotations(NS, "web")[key("db")] == db("two")
        })
        .await;
        controller.idle().await;
        assert_eq!(controller.patches().await, 1.0, "one roll, for db: {:?}", controller.logs());
        assert_eq!(generation(), before + 1);

        // Labelled into the selector: like a creation, web rolls and records it.
        cp.apply(&secret("other", on, "{}", "two"));
        wait_until("other moved in", Duration::from_secs(20), || {
            install.template_annotations(NS, "web").get(key("other")).is_some()
        })
        .await;
        // Labelled out: like a deletion, web rolls and its digest goes (not "absent").
        cp.apply(&secret("db", "{}", "{}", "two"));
        wait_until("db moved out", Duration::from_secs(20), || {
            install.template_annotations(NS, "web").get(key("db")).is_none()
        })
        .await;
        controller.idle().await;
        assert_eq!(controller.patches().await, 3.0, "{:?}", controller.logs());

        // Its owner ignores other now: its change rolls nothing. db moving back in rolls web,
        // and that roll brings every digest up to date: other's goes.
        cp.apply(&secret("other", on, "{configsum.dev/ignore: \"true\"}", "three"));
        cp.apply(&secret("db", on, "{}", "three"));
        wait_until("db moved back in", Duration::from_secs(20), || {
            install.template_annotations(NS, "web").get(key("db")) == Some(&db("three").into())
        })
        .await;
        controller.idle().await;
        assert_eq!(controller.patches().await, 4.0, "not for other: {:?}", controller.logs());
        assert!(install.template_annotations(NS, "web").get(key("other")).is_none());

        // No longer ignored: nothing rolls (first observation); the next write records it.
        // Ignored again: the next write removes it, and kubectl shows why.
        cp.apply(&secret("shared", on, "{}", "two"));
        let write = |image: &str| {
            let applied = cp.kubectl_with_input(&["apply", "-f", "-"], Some(&web(image)));
            let stderr = String::from_utf8_lossy(&applied.stderr).into_owned();
            assert!(applied.status.success(), "{stderr}");
            stderr
        };
        wait_until("shared recorded at a write", Duration::from_secs(20), || {
            write(&format!("registry.example/app:shared-{}", image.get()));
            image.set(image.get() + 1);
            install.template_annotations(NS, "web").get(key("shared")).is_some()
        })
        .await;
        cp.apply(&secret("shared", on, "{configsum.dev/ignore: \"true\"}", "two"));
        let stderr = write("registry.example/app:ignored");
        assert!(
            stderr.contains("secret/shared: its owner ignores it; its digest is removed"),
            "{stderr}"
        );
        assert!(install.template_annotations(NS, "web").get(key("shared")).is_none());
        controller.idle().await;
        assert_eq!(
            controller.patches().await,
            4.0,
            "writes are the webhook's: {:?}",
            controller.logs()
        );
        controller.stop().await;
    });
}
