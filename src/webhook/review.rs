//! The AdmissionReview adapter: which requests are the webhook's to mutate
//! (kind, subresource, operation), and the typed workload it hands the core.

use crate::core::inputs::image::PodImages;
use crate::core::workload::{Operation, ParseError, WorkloadKind};
use crate::core::{Decision, Digester, Found, ObjectRef, Plan, Settings, Skip, plan};

/// The parts of an AdmissionReview request the decision reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub sub_resource: Option<&'a str>,
    pub operation: &'a str,
    pub namespace: Option<&'a str>,
    /// `request.object` and `request.oldObject` as raw JSON.
    pub object: Option<&'a str>,
    pub old_object: Option<&'a str>,
}

/// Reads the request: is it ours, and which objects does its pod template consume?
pub fn plan_review(request: &Request<'_>, settings: &Settings) -> Plan {
    let Some(kind) = WorkloadKind::from_gvk(request.group, request.version, request.kind) else {
        return Plan::Skip(Skip::Kind);
    };
    if request.sub_resource.is_some_and(|s| !s.is_empty()) {
        return Plan::Skip(Skip::Subresource);
    }
    if !Operation::parse(request.operation).is_some_and(|op| kind.mutates(op)) {
        return Plan::Skip(Skip::Operation);
    }
    let unparsable = |why: &str| {
        Plan::Unparsable(format!("configsum: the {} was not changed: {why}", kind.as_str()))
    };
    let Some(object) = request.object else {
        return unparsable("the request has no object");
    };
    let mut workload = match kind.parse(object) {
        Ok(workload) => workload,
        Err(e @ (ParseError::NoPodSpec | ParseError::WrongKind { .. })) => {
            return unparsable(&e.to_string());
        }
        // serde's message may quote the object's values: give only the position.
        Err(ParseError::Json(e)) => {
            return unparsable(&format!(
                "it does not parse (line {}, column {})",
                e.line(),
                e.column()
            ));
        }
    };
    // The request's namespace wins: a Pod being created may not carry one yet.
    if let Some(namespace) = request.namespace.filter(|n| !n.is_empty()) {
        workload.namespace = Some(namespace.to_owned());
    }
    let old_annotations =
        request.old_object.map(|old| kind.annotations_of(old)).unwrap_or_default();
    let mut plan = plan(workload, &old_annotations, settings);
    if let Plan::Mutate(mutation) = &mut plan {
        // The image pass: only for workloads that track images or carry their digests.
        if mutation.wants_pod_images(settings) {
            match PodImages::of(kind, object) {
                Ok(pod) => mutation.read_pod_images(pod, settings),
                Err(e) => {
                    return unparsable(&format!(
                        "its containers do not parse (line {}, column {})",
                        e.line(),
                        e.column()
                    ));
                }
            }
        }
    }
    plan
}

/// The whole decision with objects from memory: plan, digest, decide. The
/// webhook does the same with concurrent lookups in between.
pub fn review<'a>(
    request: &Request<'_>,
    settings: &Settings,
    digester: &Digester,
    lookup: impl Fn(&str, &ObjectRef) -> Found<'a>,
) -> Decision {
    match plan_review(request, settings) {
        Plan::Skip(_) => Decision::default(),
        Plan::Unparsable(warning) => Decision::warn(warning),
        Plan::Mutate(mutation) => {
            let observations = mutation
                .targets
                .iter()
                .map(|t| mutation.observe(t, digester, lookup(&mutation.namespace, &t.object)))
                .collect();
            mutation.decide(observations, settings)
        }
    }
}
