//! A review as the core reads it: which requests are configsum's to mutate (kind, subresource,
//! operation), the typed workload and its image pass ([`plan_review`]), and the whole decision
//! with objects from memory ([`review`], for render and the tests).

use super::inputs::image::PodImages;
use super::mutate::Observed;
use super::workload::{Operation, ParseError, WorkloadKind};
use super::{Decision, Digester, Found, ObjectRef, Plan, Settings, Skip, plan};

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
    match plan(workload, &old_annotations, settings) {
        Plan::Mutate(mutation) => {
            match mutation.with_pod_images(settings, || Some(PodImages::of(kind, object))) {
                Ok(mutation) => Plan::Mutate(mutation),
                Err(e) => unparsable(&format!(
                    "its containers do not parse (line {}, column {})",
                    e.line(),
                    e.column()
                )),
            }
        }
        other => other,
    }
}

/// The whole decision with objects from memory and no registry: plan, digest, decide. The
/// webhook and the controller observe through `crate::lookup::observe` in between.
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
            let objects = mutation
                .targets
                .iter()
                .map(|t| mutation.observe(t, digester, lookup(&mutation.namespace, &t.object)))
                .collect();
            mutation.decide(Observed { objects, images: Vec::new() }, settings)
        }
    }
}
