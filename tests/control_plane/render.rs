//! Render time and admission agree on the real API server: a chart installed by Helm 3 with
//! `configsum render` as its post-renderer reaches the webhook with the digests it would write
//! itself, so the webhook patches nothing and the workload rolls no second time.

use std::process::Command;

use crate::chart::{Helm, write_shop_chart};
use crate::install::{installation, run};

#[test]
fn a_helm_install_post_rendered_by_configsum_is_admitted_with_no_patch() {
    run(async {
        let install = installation().await;
        let ns = "shop";
        install.cp.namespace(ns, true);
        let chart = install.path("shop-chart");
        write_shop_chart(&chart);
        let key = install.path("digest.key").display().to_string();
        let mut helm: Command = Helm::V3.command();
        helm.env("KUBECONFIG", &install.cp.kubeconfig)
            .args(["install", "rel"])
            .arg(&chart)
            .args(["--namespace", ns, "--post-renderer", env!("CARGO_BIN_EXE_configsum")])
            .args(["--post-renderer-args", "render", "--post-renderer-args", "--namespace=shop"])
            .arg(format!("--post-renderer-args=--digest-key-file={key}"));
        let output = helm.output().expect("helm install");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

        // The digests render wrote are in place, and the webhook's answer changed nothing.
        let annotations = install.template_annotations(ns, "rel-web");
        assert!(annotations["configmap.configsum.dev/rel-config"].is_string(), "{annotations}");
        assert!(annotations["secret.configsum.dev/rel-db"].is_string(), "{annotations}");
        let reviews = install.reviews_logged_in(ns).await;
        let web: Vec<&String> =
            reviews.iter().filter(|l| l.contains("\"object\":\"shop/rel-web\"")).collect();
        assert_eq!(web.len(), 1, "{reviews:?}");
        assert!(web[0].contains("\"patch_ops\":0"), "the webhook patched: {}", web[0]);
        // Strings stayed strings through render and the API server.
        let deployment = install.cp.get_json(&["deployment", "rel-web", "-n", ns]);
        let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"][0];
        assert_eq!(env["value"], "2001-12-14");
        let config = install.cp.get_json(&["configmap", "rel-config", "-n", ns]);
        assert_eq!(config["data"]["mode"], "0755");
    });
}
