//! The project's in-memory stand-in for the Kubernetes API server (tests/support/
//! fake_apiserver.rs, the one the tests run the controller against), as a program for
//! `make demo`: it serves plain HTTP on loopback, holds namespace `shop` opted in and the
//! ConfigMaps, Secrets and Deployments of the YAML files given, writes a kubeconfig into DIR,
//! prints its address, and runs until SIGTERM or SIGINT. It is not Kubernetes: no kubelet, no
//! Deployment controller, nothing runs.
//!
//!   cargo run --example api_server_stand_in -- DIR [FILE.yaml]...

#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;

use std::path::PathBuf;

use fake_apiserver::FakeApiServer;
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let dir = args.next().ok_or("usage: api_server_stand_in DIR [FILE.yaml]...")?;
    let api = FakeApiServer::start().await;
    api.put_namespace("configsum-system", &[]);
    api.put_namespace("shop", &[("configsum.dev/enabled", "true")]);
    for file in args {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        for document in text.split("\n---") {
            let object: Value =
                serde_saphyr::from_str(document).map_err(|e| format!("{}: {e}", file.display()))?;
            load(&api, &object);
        }
    }
    let kubeconfig = api.kubeconfig(&dir);
    println!("{} {}", api.addr, kubeconfig.display());
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}

fn borrowed(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Stores a ConfigMap, Secret or Deployment as the API server would hold it.
fn load(api: &FakeApiServer, object: &Value) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let (namespace, name) =
        (text(&object["metadata"]["namespace"]), text(&object["metadata"]["name"]));
    let pairs = |field: &str| -> Vec<(String, String)> {
        object[field]
            .as_object()
            .map(|map| map.iter().map(|(k, v)| (k.clone(), text(v))).collect())
            .unwrap_or_default()
    };
    match object["kind"].as_str() {
        Some("ConfigMap") => api.put_config_map(&namespace, &name, &borrowed(&pairs("data"))),
        // The demo's Secrets are written with stringData, which the API server stores as data.
        Some("Secret") => api.put_secret(&namespace, &name, &borrowed(&pairs("stringData"))),
        Some("Deployment") => {
            api.put(&FakeApiServer::deployment_path(&namespace, &name), object.clone());
        }
        _ => {}
    }
}
