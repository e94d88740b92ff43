//! The node leaves the machine as it found it: `scripts/control-plane.sh up DIR --node` runs a
//! pod (its sandbox, a container, a Secret volume, a network namespace on the bridge), and
//! `down DIR` takes every trace away: network devices, addresses and routes, iptables rules,
//! mounts, sysctls, cgroups, files under the machine's fixed paths, processes. While it runs,
//! the kernel settings the kubelet insists on are still the machine's own.
//!
//! A test binary of its own: the comparison is of the whole machine, and cargo runs test
//! binaries one after another. Needs root, as the node does.

#[path = "support/control_plane.rs"]
mod control_plane;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use control_plane::ControlPlane;

/// The tests compare the whole machine: one at a time.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The kernel settings the kubelet sets unless they already have its values
/// (pkg/kubelet/cm/container_manager_linux.go, setupKernelTunables).
const KUBELET_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// Paths a kubelet, containerd or the CNI plugins write by default.
const FIXED_PATHS: [&str; 14] = [
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/var/lib/containerd",
    "/etc/cni",
    "/etc/kubernetes",
    "/opt/cni",
    "/opt/containerd",
    "/run/containerd",
    "/run/netns",
    "/run/runc",
    "/var/run/kubernetes",
    "/var/log/pods",
    "/var/log/containers",
    "/usr/libexec/kubernetes",
];

fn run(program: &str, args: &[&str]) -> String {
    let output =
        Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What the node could change on the machine, as comparable text per aspect.
fn machine() -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    let links: Vec<String> = run("ip", &["-o", "link", "show"])
        .lines()
        .filter_map(|l| {
            l.split(": ").nth(1).map(|name| name.split('@').next().unwrap_or(name).to_owned())
        })
        .collect();
    out.insert("network devices", links.join("\n"));
    out.insert(
        "addresses",
        run("ip", &["-o", "addr", "show"])
            .lines()
            .map(|l| {
                // Lifetimes count down; the rest identifies the address.
                l.split("valid_lft").next().unwrap_or(l).trim().to_owned()
            })
            .collect::<Vec<_>>()
            .join("\n"),
    );
    out.insert("routes", run("ip", &["route", "show", "table", "all"]));
    for (aspect, tool) in [("iptables", "iptables-save"), ("ip6tables", "ip6tables-save")] {
        let rules: Vec<String> = run(tool, &[])
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| match l.rfind(" [") {
                // Chain counters move with traffic.
                Some(at) if l.starts_with(':') => l[..at].to_owned(),
                _ => l.to_owned(),
            })
            .collect();
        out.insert(aspect, rules.join("\n"));
    }
    let mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .collect();
    out.insert("mounts", mounts.join("\n"));
    let mut sysctls = Vec::new();
    for dir in
        ["vm", "kernel", "net/ipv4", "net/ipv4/conf/all", "net/ipv4/conf/default", "net/bridge"]
    {
        let Ok(entries) = std::fs::read_dir(Path::new("/proc/sys").join(dir)) else { continue };
        let mut names: Vec<String> =
            entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        for name in names {
            // Counters of the kernel's own, not settings.
            if ["ns_last_pid", "random", "tainted", "nr_hugepages"].contains(&name.as_str()) {
                continue;
            }
            if let Ok(value) = std::fs::read_to_string(Path::new("/proc/sys").join(dir).join(&name))
            {
                sysctls.push(format!("{dir}/{name}={}", value.trim()));
            }
        }
    }
    out.insert("sysctls", sysctls.join("\n"));
    let mut cgroups = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
        for entry in std::fs::read_dir(hierarchy.path()).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                cgroups.push(entry.path().display().to_string());
            }
        }
    }
    cgroups.sort();
    out.insert("cgroups", cgroups.join("\n"));
    out.insert(
        "fixed paths",
        FIXED_PATHS
            .iter()
            .filter(|p| Path::new(p).exists())
            .copied()
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let mut processes: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !exited(&e.path()))
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|comm| comm.trim().to_owned())
        .filter(|comm| {
            ["containerd", "containerd-shim", "kubelet", "pause", "config-echo", "runc"]
                .iter()
                .any(|name| comm.starts_with(name))
        })
        .collect();
    processes.sort();
    out.insert("node processes", processes.join("\n"));
    out
}

/// Whether the process at /proc/PID has exited, every thread of it, and waits only for its
/// parent to reap it. The node's processes outlive `up` and so are PID 1's children; PID 1 here
/// reaps orphans about every two seconds, and a zombie holds nothing of the node's. (A zombie
/// leader whose other threads still run has not exited: scripts/lib.sh's `alive` reads the same.)
fn exited(proc_dir: &Path) -> bool {
    let mut tasks = std::fs::read_dir(proc_dir.join("task")).into_iter().flatten().flatten();
    tasks.all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and may hold spaces.
        stat.rsplit_once(") ").is_none_or(|(_, rest)| rest.starts_with(['Z', 'X']))
    })
}

/// Waits until no node runs on the machine: the test binary before this one (tests/node) leaves
/// its cluster to its watchdog, which takes some seconds to stop it; a `make cluster` left
/// running would never go, and is named.
fn no_other_node() {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let bridges: Vec<String> = run("ip", &["-o", "link", "show", "type", "bridge"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .filter(|name| name.starts_with("csnode"))
            .map(|name| {
                let alias = std::fs::read_to_string(format!("/sys/class/net/{name}/ifalias"));
                format!("{name} ({})", alias.unwrap_or_default().trim())
            })
            .collect();
        let cgroups = std::fs::read_dir("/sys/fs/cgroup/pids")
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("configsum-node-"));
        if bridges.is_empty() && !cgroups {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "another node runs on this machine: {bridges:?}; stop it (scripts/control-plane.sh \
             down DIR, `make cluster-down`) before this test"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn kubelet_sysctls() -> Vec<String> {
    KUBELET_SYSCTLS
        .iter()
        .map(|name| std::fs::read_to_string(Path::new("/proc/sys").join(name)).unwrap_or_default())
        .collect()
}

/// A pod of config-echo with a Secret volume, Ready.
fn run_a_pod(cp: &ControlPlane) {
    let ns = "machine";
    cp.namespace(ns, false);
    cp.apply(&format!(
        r#"{{"apiVersion": "v1", "kind": "Secret", "metadata": {{"name": "s", "namespace": "{ns}"}},
            "stringData": {{"password": "p1"}}}}"#
    ));
    cp.apply(&format!(
        r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "echo", "namespace": "{ns}"}},
            "spec": {{"terminationGracePeriodSeconds": 1, "containers": [{{"name": "app",
              "image": "config-echo:{}", "imagePullPolicy": "Never",
              "env": [{{"name": "VALUE_FILE", "value": "/s/password"}}],
              "readinessProbe": {{"httpGet": {{"path": "/healthz", "port": 8080}}, "periodSeconds": 1}},
              "volumeMounts": [{{"name": "s", "mountPath": "/s"}}]}}],
              "volumes": [{{"name": "s", "secret": {{"secretName": "s"}}}}]}}}}"#,
        env!("CARGO_PKG_VERSION")
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pod = cp.get_json(&["pod", "echo", "-n", ns]);
        let ready = pod["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "the pod never turned ready: {}", pod["status"]);
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn down_leaves_the_machine_as_the_node_found_it() {
    let _alone = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    no_other_node();
    let before = machine();
    let sysctls = kubelet_sysctls();
    let cp = ControlPlane::start_with_node();
    run_a_pod(&cp);
    let during = machine();
    assert_ne!(
        before["network devices"], during["network devices"],
        "the node's bridge and the pod's veth"
    );
    assert_ne!(before["cgroups"], during["cgroups"], "the pods' cgroup root");
    assert_eq!(kubelet_sysctls(), sysctls, "the kubelet read its values inside its namespace");
    for aspect in ["iptables", "ip6tables", "mounts", "sysctls", "fixed paths"] {
        assert_eq!(before[aspect], during[aspect], "{aspect} changed while the node runs");
    }

    cp.stop();
    let after = machine();
    for (aspect, was) in &before {
        assert_eq!(was, &after[aspect], "{aspect}: not as before the node");
    }
}

/// A run killed before its `down` (as when a session's processes are killed): its pods live on
/// in their cgroups, its bridge stays. The next `up --node` cleans it up, and that node's
/// `down` leaves the machine as it was before either.
#[test]
fn the_next_node_cleans_up_after_a_node_that_was_killed() {
    let _alone = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    no_other_node();
    let before = machine();
    let killed = ControlPlane::start_with_node();
    run_a_pod(&killed);
    // Everything of the run but the pods, killed at once: its watchdog, the control plane,
    // containerd, the kubelet and the namespace's holder.
    let mut pids = Vec::new();
    for list in ["pids", "node/pids", "node/holder.pid", "watchdog.pid"] {
        let text = std::fs::read_to_string(killed.dir.join(list)).unwrap_or_default();
        pids.extend(text.lines().filter_map(|line| line.split(' ').next()).map(str::to_owned));
    }
    assert!(pids.len() >= 6, "{pids:?}");
    run("kill", &[&["-KILL"][..], &pids.iter().map(String::as_str).collect::<Vec<_>>()].concat());
    std::thread::sleep(Duration::from_millis(500));
    let orphaned = machine();
    assert!(orphaned["node processes"].contains("config-echo"), "the pod outlives its node");
    assert_ne!(before["network devices"], orphaned["network devices"]);

    let next = ControlPlane::start_with_node();
    let cleaned = machine();
    assert!(!cleaned["node processes"].contains("config-echo"), "the orphaned pod was killed");
    next.stop();
    let after = machine();
    for (aspect, was) in &before {
        assert_eq!(was, &after[aspect], "{aspect}: not as before either node");
    }
}
