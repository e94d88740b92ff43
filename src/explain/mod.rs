//! `configsum explain`: which workloads roll when a ConfigMap or Secret changes, or what a
//! workload tracks and whether its pods run its template; why or why not, answered by the
//! core's own plan (`core::diagnosis`). The inputs come from YAML streams such as a Helm render
//! (`files`), or from the cluster, read-only (`cluster`). The answer goes to stdout, as text
//! or versioned JSON.

mod cluster;
mod files;
mod images;
mod output;
mod source;

use std::collections::BTreeMap;

use crate::config::ExplainArgs;
use crate::core::diagnosis::workload::plan_of;
use crate::core::diagnosis::{
    ControllerEvent, Gates, Halts, Holds, NamespaceView, ReadWorkload, explain_workload, trackers,
};
use crate::core::model::kinds::WorkloadKind;
use crate::core::{Digester, LookupKey, ObjectRef, Settings};
use crate::process::load_digest_keys;

use cluster::ReadObject;
pub use output::{Explanation, WorkloadExplanation, Written};
use source::Source;

/// Exit codes: 0 answered; 1 the object does not exist (the answer is still given); 2 usage,
/// or no answer can be given (the cluster cannot be read).
pub const EXIT_MISSING: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

/// Runs the command; errors go to stderr. Returns the exit code.
pub fn run(args: &ExplainArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("configsum explain: cannot start the async runtime: {e}");
            return EXIT_USAGE;
        }
    };
    match runtime.block_on(explain(args)) {
        Ok((text, exists)) => {
            print!("{text}");
            if exists { 0 } else { EXIT_MISSING }
        }
        Err(message) => {
            eprintln!("configsum explain: {message}");
            EXIT_USAGE
        }
    }
}

/// What is asked about.
enum Subject {
    Object(ObjectRef),
    Workload { kind: WorkloadKind, name: String },
}

impl Subject {
    fn parse(text: &str) -> Result<Subject, String> {
        if let Some(object) = ObjectRef::parse(text) {
            return Ok(Subject::Object(object));
        }
        let workload = text.split_once('/').and_then(|(word, name)| {
            let kind = WorkloadKind::from_kubectl_word(word)?;
            let valid = !name.is_empty() && name.len() <= 253 && !name.contains('/');
            valid.then(|| Subject::Workload { kind, name: name.to_owned() })
        });
        workload.ok_or_else(|| {
            format!(
                "{text:?} is not configmap/<name>, secret/<name> or a workload kind/<name> (deployment/web, sts/db)"
            )
        })
    }
}

/// The answer as written, and whether what was asked about exists.
async fn explain(args: &ExplainArgs) -> Result<(String, bool), String> {
    let subject = Subject::parse(&args.object)?;
    let mut unread = Vec::new();
    let mut digester = match &args.digest_key_file {
        Some(path) => {
            Some(Digester::new(load_digest_keys(Some(path), false).map_err(|e| e.to_string())?))
        }
        None => None,
    };
    let domain = &args.annotations.annotation_domain;
    let settings = Settings {
        domain: domain.clone(),
        object_selector: args.annotations.object_selector.clone(),
        ..Settings::default()
    };
    let scope = settings.object_scope();
    let (source, namespace, workloads, events, namespace_window) = if args.files.is_empty() {
        let cluster = cluster::Cluster::connect(args.context.as_deref(), scope.clone()).await?;
        let namespace = args.namespace.clone().unwrap_or_else(|| cluster.default_namespace.clone());
        valid_namespace(&namespace)?;
        let workloads = cluster.workloads(&namespace, &mut unread).await;
        if digester.is_none() {
            match cluster.digest_key(&args.digest_key_secret).await {
                Ok(installed) => digester = Some(installed),
                Err(why) => unread.push(format!("the installed digest key: {why}")),
            }
        }
        let events = cluster.events(&namespace).await.unwrap_or_else(|why| {
            unread.push(format!("configsum's Events (for held and halted): {why}"));
            Vec::new()
        });
        // Without it, only the workloads' own windows are judged.
        let window = cluster.namespace_window(&namespace, &domain.roll_window()).await;
        let window = window.unwrap_or_else(|why| {
            unread.push(format!("namespace {namespace} (for its roll-window): {why}"));
            None
        });
        (Source::Cluster(cluster), namespace, workloads, events, window)
    } else {
        let namespace = args.namespace.clone().unwrap_or_else(|| "default".to_owned());
        valid_namespace(&namespace)?;
        let mut inputs = files::read(&args.files, &namespace, &domain.roll_window(), &scope)?;
        let workloads = std::mem::take(&mut inputs.workloads);
        let window = inputs.namespace_window.take();
        (Source::Files(inputs), namespace, workloads, Vec::<ControllerEvent>::new(), window)
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let holds = Holds::from_events(&events, now);
    let halts = Halts::from_events(&events, now);
    // The gates are complete once the sources' `resume` has been read.
    let gates_with = |resumes| Gates { halts, namespace_window, resumes, now };
    let resume_key = domain.resume();
    let read: Vec<ReadWorkload<'_>> =
        workloads.iter().map(|(kind, json)| ReadWorkload { kind: *kind, json }).collect();
    let view_with = |gates| NamespaceView {
        namespace: &namespace,
        workloads: &read,
        digester: digester.as_ref(),
        holds: &holds,
        gates,
        settings: &settings,
    };
    match subject {
        Subject::Object(object) => {
            let found = source
                .object(&namespace, &object, &resume_key)
                .await
                .map_err(|why| format!("cannot read {object} in {namespace}: {why}"))?;
            let resume = found.as_ref().and_then(|found| found.resume.clone());
            let gates = gates_with(resume.map(|id| (object.to_string(), id)).into_iter().collect());
            let view = view_with(&gates);
            let content = found.as_ref().map(|found| found.content.as_ref());
            let answer = trackers(&view, &object, args.key.as_deref(), Ok(content));
            let explanation = Explanation {
                object: object.to_string(),
                namespace: namespace.clone(),
                key: args.key.clone(),
                exists: found.is_some(),
                digest_key: digester.is_some(),
                workloads: answer,
                unread,
            };
            Ok((explanation.written(args.output), explanation.exists))
        }
        Subject::Workload { kind, name } => {
            let workload = read.iter().find(|w| w.kind == kind && w.name() == name);
            let mut explanation = WorkloadExplanation {
                workload: format!("{}/{name}", kind.word()),
                namespace: namespace.clone(),
                exists: workload.is_some(),
                digest_key: digester.is_some(),
                verdict: None,
                inputs: Vec::new(),
                rollout: None,
                unread,
            };
            if let Some(workload) = workload {
                // The plan reads no gate.
                let none = Gates::default();
                let plan = plan_of(&view_with(&none), workload);
                let mut objects = BTreeMap::new();
                let mut resumes = BTreeMap::new();
                let planned =
                    plan.iter().flat_map(|plan| plan.targets.iter().map(move |t| (plan, t)));
                for (plan, target) in planned {
                    let Some(LookupKey { namespace: lives_in, object }) = plan.lookup_key(target)
                    else {
                        objects.insert(target.object.clone(), Ok(None));
                        continue;
                    };
                    let found = source.object(lives_in, &object, &resume_key).await;
                    if let Ok(Some(ReadObject { resume: Some(resume), .. })) = &found {
                        resumes.insert(target.object.to_string(), resume.clone());
                    }
                    objects.insert(target.object.clone(), found);
                }
                let gates = gates_with(resumes);
                let images = match &plan {
                    Some(plan) if !args.no_registry => {
                        images::resolve(args, &source, plan, &mut explanation.unread).await?
                    }
                    _ => Vec::new(),
                };
                let lookup = |object: &ObjectRef| match objects.get(object) {
                    Some(Ok(found)) => Ok(found.as_ref().map(|found| found.content.as_ref())),
                    Some(Err(why)) => Err(why.clone()),
                    None => Err("not read".to_owned()),
                };
                let answer = explain_workload(&view_with(&gates), workload, &lookup, &images);
                for (object, found) in &objects {
                    if let Err(why) = found {
                        explanation.unread.push(format!("{object}: {why}"));
                    }
                }
                explanation.verdict = Some(answer.verdict);
                explanation.inputs = answer.inputs;
                explanation.rollout = Some(answer.rollout);
            }
            Ok((explanation.written(args.output), explanation.exists))
        }
    }
}

/// A namespace name is a DNS label; anything else is a usage error, not a request path.
fn valid_namespace(namespace: &str) -> Result<(), String> {
    if crate::core::model::object_ref::is_namespace_name(namespace) {
        Ok(())
    } else {
        Err(format!("{namespace:?} is not a namespace name"))
    }
}
