//! The namespaces in scope: those the namespace watch lists with the opt-in label, never
//! configsum's own namespace nor kube-system. A namespace that leaves the scope is handed
//! to the router, which forgets its workloads everywhere.

use std::collections::{HashMap, HashSet};

use tracing::debug;

use super::relist::WatchIndex;
use crate::controller::model::message::ObjectVersion;
use crate::controller::model::shard::Shard;

#[derive(Debug)]
pub struct NamespaceScope {
    /// configsum's own namespace: never in scope, whatever its label says.
    own_namespace: String,
    in_scope: HashSet<String>,
    /// A namespace was opted in since the workload watches (re)started.
    newly_in_scope: bool,
    /// Namespaces that left the scope since the router last took them.
    opted_out: Vec<String>,
    /// `<domain>/roll-window`, and each namespace's in scope.
    roll_window_key: String,
    windows: HashMap<String, String>,
    /// Namespaces whose window changed since the router last took them.
    window_changes: Vec<(String, Option<String>)>,
    /// `--namespaces`, sorted: a namespace must be listed there too (empty: any).
    served: Vec<String>,
    /// `--shard`: a namespace must be one this shard owns.
    shard: Shard,
}

impl NamespaceScope {
    /// `roll_window_key`: `<domain>/roll-window`, the maintenance window a namespace gives
    /// its workloads.
    pub fn new(own_namespace: String, roll_window_key: String) -> Self {
        NamespaceScope {
            own_namespace,
            in_scope: HashSet::new(),
            newly_in_scope: false,
            opted_out: Vec::new(),
            roll_window_key,
            windows: HashMap::new(),
            window_changes: Vec::new(),
            served: Vec::new(),
            shard: Shard::default(),
        }
    }

    /// Only these namespaces (`--namespaces`, sorted) can be in scope, whatever their labels.
    pub fn serving(self, served: Vec<String>) -> Self {
        NamespaceScope { served, ..self }
    }

    /// Only the namespaces `shard` owns can be in scope: another shard rolls the rest.
    pub fn sharded(self, shard: Shard) -> Self {
        NamespaceScope { shard, ..self }
    }

    /// The namespaces whose maintenance window changed since the last call, with the new one.
    pub fn take_window_changes(&mut self) -> Vec<(String, Option<String>)> {
        std::mem::take(&mut self.window_changes)
    }

    fn set_window(&mut self, name: &str, window: Option<&str>) {
        if self.windows.get(name).map(String::as_str) == window {
            return;
        }
        match window {
            Some(window) => self.windows.insert(name.to_owned(), window.to_owned()),
            None => self.windows.remove(name),
        };
        self.window_changes.push((name.to_owned(), window.map(str::to_owned)));
    }

    pub fn contains(&self, namespace: &str) -> bool {
        self.in_scope.contains(namespace)
    }

    /// A namespace was opted in since the workload watches last (re)started: they must
    /// list again to see its workloads.
    pub fn newly_in_scope(&self) -> bool {
        self.newly_in_scope
    }

    /// The workload watches (re)started: every namespace in scope is listed by them.
    pub fn workload_watches_started(&mut self) {
        self.newly_in_scope = false;
    }

    /// The namespaces that left the scope since the last call.
    pub fn take_opted_out(&mut self) -> Vec<String> {
        std::mem::take(&mut self.opted_out)
    }
}

impl WatchIndex<ObjectVersion> for NamespaceScope {
    type Key = String;

    fn key(&self, namespace: &ObjectVersion) -> Option<String> {
        let name = namespace.name.as_deref()?;
        let served = crate::core::mutate::serves(&self.served, name) && self.shard.owns(name);
        (served && name != self.own_namespace && name != "kube-system").then(|| name.to_owned())
    }

    fn apply(&mut self, namespace: ObjectVersion) {
        let Some(name) = self.key(&namespace) else { return };
        self.set_window(&name, namespace.annotation(&self.roll_window_key));
        if self.in_scope.insert(name.clone()) {
            debug!(namespace = %name, "namespace opted in");
            self.newly_in_scope = true;
        }
    }

    fn delete(&mut self, name: String) {
        self.set_window(&name, None);
        if self.in_scope.remove(&name) {
            self.opted_out.push(name);
        }
    }

    fn unlisted(&self, listed: &HashSet<String>) -> Vec<String> {
        self.in_scope.iter().filter(|n| !listed.contains(*n)).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::controller::state::relist::Watch;

    fn namespace(name: &str) -> ObjectVersion {
        ObjectVersion {
            namespace: None,
            name: Some(name.into()),
            resource_version: Some("1".into()),
            annotations: Vec::new(),
        }
    }

    #[test]
    fn own_and_system_namespaces_are_never_in_scope_and_a_relist_opts_out_the_missing() {
        let mut scope = NamespaceScope::new("configsum".into(), "configsum.dev/roll-window".into());
        let mut watch = Watch::default();
        watch.handle(&mut scope, Event::Init);
        for name in ["a", "b", "configsum", "kube-system"] {
            watch.handle(&mut scope, Event::InitApply(namespace(name)));
        }
        watch.handle(&mut scope, Event::InitDone);
        assert!(scope.contains("a") && scope.contains("b"));
        assert!(!scope.contains("configsum") && !scope.contains("kube-system"));
        assert!(scope.newly_in_scope());
        scope.workload_watches_started();
        assert!(!scope.newly_in_scope());
        assert!(scope.take_opted_out().is_empty());

        // Relisted without b: b opted out, once.
        watch.handle(&mut scope, Event::Init);
        watch.handle(&mut scope, Event::InitApply(namespace("a")));
        watch.handle(&mut scope, Event::InitDone);
        assert_eq!(scope.take_opted_out(), ["b"]);
        assert!(scope.take_opted_out().is_empty());
        assert!(!scope.newly_in_scope(), "a was in scope already");
        watch.handle(&mut scope, Event::Apply(namespace("c")));
        assert!(scope.newly_in_scope());
        watch.handle(&mut scope, Event::Delete(namespace("a")));
        assert_eq!(scope.take_opted_out(), ["a"]);
    }

    /// Three shards, one namespace watch each: every opted-in namespace is in exactly one
    /// shard's scope, and a namespace another shard owns is never opted out of this one.
    #[test]
    fn a_shard_scopes_only_the_namespaces_it_owns() {
        let names: Vec<String> = (0..30).map(|n| format!("team-{n}")).collect();
        let mut in_scopes = vec![0; names.len()];
        for index in 0..3 {
            let shard = Shard::parse(&format!("{index}/3")).expect("shard");
            let mut scope = NamespaceScope::new("configsum".into(), "k".into()).sharded(shard);
            let mut watch = Watch::default();
            watch.handle(&mut scope, Event::Init);
            for name in &names {
                watch.handle(&mut scope, Event::InitApply(namespace(name)));
            }
            watch.handle(&mut scope, Event::InitDone);
            for (n, name) in names.iter().enumerate() {
                assert_eq!(scope.contains(name), shard.owns(name), "{name} in {shard}");
                in_scopes[n] += usize::from(scope.contains(name));
            }
            let owned = names.iter().filter(|n| shard.owns(n)).count();
            assert!(owned > 0, "30 namespaces leave no shard of 3 empty");
            watch.handle(&mut scope, Event::Init);
            watch.handle(&mut scope, Event::InitDone);
            assert_eq!(scope.take_opted_out().len(), owned, "only its own namespaces leave");
        }
        assert!(in_scopes.iter().all(|&n| n == 1), "{in_scopes:?}");
    }
}
