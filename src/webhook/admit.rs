//! The admission decision: a pure function of the request and the configuration.
//!
//! - CREATE/UPDATE of an opted-in object that is not armed (and not being deleted): a patch
//!   that adds the synchronous finalizer and the `syncgc.io/armed` label. UPDATE that removes
//!   the opt-in: a patch that removes both.
//! - DELETE never gets a patch (the apiserver refuses patches on DELETE). An armed object whose
//!   DELETE names no propagation policy gets the default its `syncgc.io/propagation` annotation
//!   asks for, as a side effect. An opted-in object that is not armed is let go, or denied and
//!   armed, as configured.

use std::fmt::Write as _;

use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation};
use jsonptr::PointerBuf;
use serde_json::Value;

use super::review::{Metadata, Operation, Request};
use crate::annotations::{Timeouts, annotation_problems};
use crate::api::{Claims, Marks, Propagation};
use crate::gc::cascade::Preview;
use crate::gc::guard::Guard;
use crate::names::{
    ARMED_LABEL, FOREGROUND_FINALIZER, GUARDED_LABEL, HANDLES_FINALIZERS_ANNOTATION,
    MAX_CASCADE_ANNOTATION, ORPHAN_FINALIZER, PROPAGATION_ANNOTATION, PROTECTED_ANNOTATION,
    SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER, TIMEOUT_ANNOTATION,
};

/// What to do with a DELETE of an opted-in object that does not carry the finalizer yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UnarmedDelete {
    /// Let the deletion go ahead (it cannot be synchronous) and count it.
    #[default]
    Allow,
    /// Deny it with a message and arm the object, so that a retry is synchronous.
    Deny,
}

/// The configuration the decision depends on.
#[derive(Debug, Clone, Copy, Default)]
pub struct Policy {
    pub unarmed_delete: UnarmedDelete,
    /// The collector's timeouts: a `syncgc.io/timeout` longer than their max is warned about,
    /// and a DELETE's warning says how long the owner may wait.
    pub timeouts: Option<Timeouts>,
    /// The cascade limit of objects without `syncgc.io/max-cascade` (`None`: no limit).
    pub max_cascade: Option<usize>,
    /// The guards on DELETE are on: an object whose own metadata names a guard is labelled
    /// [`GUARDED_LABEL`] as it is written.
    pub guards: bool,
}

impl Policy {
    /// The bounds the guards keep.
    pub fn bounds(&self) -> crate::gc::guard::Bounds {
        crate::gc::guard::Bounds {
            max_cascade: self.max_cascade,
            timeouts: self.timeouts,
        }
    }
}

/// Which case of a review's decision applied, [`admit`]'s or the guards'; a closed set, used
/// as the metric label and in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Not an object syncgc looks at: a subresource, a CONNECT, or an object without metadata.
    Ignored,
    /// The object has not opted in (or nothing needs to change).
    Untouched,
    /// The object is being deleted; no finalizer can be added.
    Terminating,
    Arm,
    Disarm,
    /// An object that names a guard (protected, limited, a finalizer handler) gets
    /// `syncgc.io/guarded`, so that its DELETEs reach the guards.
    Select,
    /// DELETE of an armed object; nothing to add.
    DeleteArmed,
    /// DELETE of an armed object with a default propagation from its annotation.
    DeleteDefaultPropagation,
    DeleteUnarmedAllowed,
    DeleteUnarmedDenied,
    /// Through the guards: a DELETE they let through.
    PassedGuards,
    /// Through the guards: an eviction they let through.
    Eviction,
    /// Through the guards: refused by this guard.
    Refused(Guard),
}

impl Case {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ignored => "ignored",
            Self::Untouched => "untouched",
            Self::Terminating => "terminating",
            Self::Arm => "arm",
            Self::Disarm => "disarm",
            Self::Select => "select",
            Self::DeleteArmed => "delete_armed",
            Self::DeleteDefaultPropagation => "delete_default_propagation",
            Self::DeleteUnarmedAllowed => "delete_unarmed_allowed",
            Self::DeleteUnarmedDenied => "delete_unarmed_denied",
            Self::PassedGuards => "passed_guards",
            Self::Eviction => "eviction",
            Self::Refused(guard) => guard.as_str(),
        }
    }
}

/// A change to make to the object through the API before answering, because a DELETE cannot be
/// answered with a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddFinalizer {
    pub finalizer: &'static str,
    /// The object's uid, a precondition of the change.
    pub uid: String,
    /// What the review said of the object that the change rests on: the live object must
    /// still say so, or nothing is written (a review may come from anyone).
    pub claims: Claims,
}

impl AddFinalizer {
    /// What the write sets besides the finalizer: the synchronous finalizer comes with
    /// [`ARMED_LABEL`].
    pub fn marks(&self) -> Marks<'static> {
        Marks {
            label: (self.finalizer == SYNCHRONOUS_FINALIZER).then_some((ARMED_LABEL, "true")),
            annotation: None,
        }
    }
}

/// The outcome of [`admit`].
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub reason: Case,
    /// `Some` denies the request with this message.
    pub denial: Option<String>,
    pub patch: Option<Patch>,
    pub side_effect: Option<AddFinalizer>,
    pub warnings: Vec<String>,
}

impl Decision {
    /// Whether the request is the DELETE of an armed object, going ahead.
    pub fn deletes_armed(&self) -> bool {
        matches!(
            self.reason,
            Case::DeleteArmed | Case::DeleteDefaultPropagation
        )
    }

    fn allow(reason: Case) -> Self {
        Self {
            reason,
            denial: None,
            patch: None,
            side_effect: None,
            warnings: Vec::new(),
        }
    }
}

/// Whether `meta` has opted in to synchronous deletion.
pub fn opted_in(meta: &Metadata) -> bool {
    meta.annotation(SYNCHRONOUS_ANNOTATION) == Some("true")
}

/// Decides what to answer to `request`. `dependents` is how many objects the ownership graph
/// knows to depend on the object, directly or not; a DELETE of an armed object says so.
pub fn admit(request: &Request, policy: &Policy, dependents: usize) -> Decision {
    if request
        .sub_resource
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return Decision::allow(Case::Ignored);
    }
    match request.operation {
        Operation::Create | Operation::Update => {
            let mut decision = admit_write(request, policy);
            if decision.reason != Case::Ignored
                && let Some(meta) = request.object.as_ref().and_then(|o| o.metadata.as_ref())
            {
                let annotations = meta.annotations.iter().flatten();
                decision.warnings.extend(
                    annotation_problems(
                        annotations.map(|(k, v)| (k.as_str(), v.as_str())),
                        policy.timeouts.map(|t| t.max),
                    )
                    .into_iter()
                    .map(|problem| format!("syncgc: {}: {problem}", describe(request))),
                );
            }
            decision
        }
        Operation::Delete => {
            let mut decision = admit_delete(request, policy);
            if decision.deletes_armed() && dependents > 0 && !dry_run(request) {
                decision
                    .warnings
                    .push(waiting_warning(request, policy, dependents));
            }
            decision
        }
        Operation::Connect => Decision::allow(Case::Ignored),
    }
}

fn admit_write(request: &Request, policy: &Policy) -> Decision {
    let Some(meta) = request.object.as_ref().and_then(|o| o.metadata.as_ref()) else {
        return Decision::allow(Case::Ignored);
    };
    if meta.deletion_timestamp.is_some() {
        return Decision::allow(Case::Terminating);
    }
    let mut decision = arm_or_disarm(request, meta);
    if policy.guards && names_guard(meta) && meta.label(GUARDED_LABEL).is_none() {
        decision.patch = Some(with_guarded_label(decision.patch.take(), meta));
        if decision.reason == Case::Untouched {
            decision.reason = Case::Select;
        }
    }
    decision
}

/// Whether `meta` names a guard itself: protected, limited, or a finalizer handler (as
/// [`crate::graph::Guards::guards_itself`] reads it from a watch).
pub fn names_guard(meta: &Metadata) -> bool {
    crate::graph::protects(meta.annotation(PROTECTED_ANNOTATION))
        || meta.annotation(MAX_CASCADE_ANNOTATION).is_some()
        || meta
            .annotation(HANDLES_FINALIZERS_ANNOTATION)
            .is_some_and(|value| crate::graph::Handles::parse(value, None).is_ok())
}

/// `patch` with an op that adds [`GUARDED_LABEL`] to `meta`.
fn with_guarded_label(patch: Option<Patch>, meta: &Metadata) -> Patch {
    let mut ops = patch.map(|p| p.0).unwrap_or_default();
    let labels_added = ops
        .iter()
        .any(|op| matches!(op, PatchOperation::Add(add) if add.path == labels_pointer()));
    ops.push(if meta.labels.is_some() || labels_added {
        add(
            labels_pointer().with_trailing_token(GUARDED_LABEL),
            Value::from("true"),
        )
    } else {
        add(
            labels_pointer(),
            serde_json::json!({ GUARDED_LABEL: "true" }),
        )
    });
    Patch(ops)
}

/// Arms an object that opted in, disarms one that no longer does.
fn arm_or_disarm(request: &Request, meta: &Metadata) -> Decision {
    if opted_in(meta) {
        return match arm_patch(meta) {
            Some(patch) => Decision {
                patch: Some(patch),
                ..Decision::allow(Case::Arm)
            },
            None => Decision::allow(Case::Untouched),
        };
    }
    let was_opted_in = request.old_meta().is_some_and(opted_in);
    if request.operation == Operation::Update
        && was_opted_in
        && let Some(patch) = disarm_patch(meta)
    {
        return Decision {
            patch: Some(patch),
            ..Decision::allow(Case::Disarm)
        };
    }
    Decision::allow(Case::Untouched)
}

fn admit_delete(request: &Request, policy: &Policy) -> Decision {
    let Some(meta) = request.old_meta() else {
        return Decision::allow(Case::Ignored);
    };
    if !opted_in(meta) {
        return Decision::allow(Case::Untouched);
    }
    if meta.deletion_timestamp.is_some() {
        return Decision::allow(Case::Terminating);
    }
    let dry_run = dry_run(request);
    let uid = meta.uid.clone().unwrap_or_default();

    if !meta.has_finalizer(SYNCHRONOUS_FINALIZER) {
        return match policy.unarmed_delete {
            UnarmedDelete::Allow => Decision {
                warnings: vec![format!(
                    "{} was not armed with {SYNCHRONOUS_FINALIZER}: its deletion is not synchronous",
                    describe(request)
                )],
                ..Decision::allow(Case::DeleteUnarmedAllowed)
            },
            UnarmedDelete::Deny => Decision {
                denial: Some(format!(
                    "syncgc: {} opted in to synchronous deletion but is not armed with the \
                     finalizer {SYNCHRONOUS_FINALIZER} yet; {}",
                    describe(request),
                    if dry_run {
                        "a real deletion would arm it; retry it then"
                    } else {
                        "it is armed now: retry the deletion"
                    }
                )),
                side_effect: (!dry_run && !uid.is_empty()).then(|| AddFinalizer {
                    finalizer: SYNCHRONOUS_FINALIZER,
                    uid: uid.clone(),
                    claims: Claims {
                        annotations: vec![(SYNCHRONOUS_ANNOTATION, "true".to_owned())],
                        finalizers: Vec::new(),
                    },
                }),
                ..Decision::allow(Case::DeleteUnarmedDenied)
            },
        };
    }

    let default = meta.annotation(PROPAGATION_ANNOTATION);
    if names_propagation(request) || default.is_none() {
        return Decision::allow(Case::DeleteArmed);
    }
    let default = default.unwrap_or_default();
    let finalizer = match Propagation::from_annotation(default) {
        Some(Propagation::Foreground) => FOREGROUND_FINALIZER,
        Some(Propagation::Orphan) => ORPHAN_FINALIZER,
        Some(Propagation::Background) => return Decision::allow(Case::DeleteArmed),
        None => {
            return Decision {
                warnings: annotation_problems([(PROPAGATION_ANNOTATION, default)], None),
                ..Decision::allow(Case::DeleteArmed)
            };
        }
    };
    if meta.has_finalizer(finalizer) || dry_run || uid.is_empty() {
        return Decision::allow(Case::DeleteArmed);
    }
    Decision {
        side_effect: Some(AddFinalizer {
            finalizer,
            uid,
            claims: Claims {
                annotations: vec![
                    (SYNCHRONOUS_ANNOTATION, "true".to_owned()),
                    (PROPAGATION_ANNOTATION, default.to_owned()),
                ],
                finalizers: vec![SYNCHRONOUS_FINALIZER],
            },
        }),
        ..Decision::allow(Case::DeleteDefaultPropagation)
    }
}

/// Whether the DELETE names its propagation (`propagationPolicy` or `orphanDependents`).
pub fn names_propagation(request: &Request) -> bool {
    request.options.as_ref().is_some_and(|o| {
        o.propagation_policy
            .as_deref()
            .is_some_and(|p| !p.is_empty())
            || o.orphan_dependents.is_some()
    })
}

/// Whether the request is a dry run (`dryRun` in the review, or in the DELETE's options).
pub fn dry_run(request: &Request) -> bool {
    request.dry_run == Some(true)
        || request
            .options
            .as_ref()
            .and_then(|o| o.dry_run.as_ref())
            .is_some_and(|d| !d.is_empty())
}

/// The propagation the DELETE gets: the one it names, else the object's
/// `syncgc.io/propagation`, else background.
pub fn propagation(request: &Request) -> Propagation {
    let options = request.options.as_ref();
    let named = options.and_then(|o| {
        let named = o.propagation_policy.as_deref();
        named.and_then(Propagation::from_annotation).or_else(|| {
            o.orphan_dependents.map(|orphan| match orphan {
                true => Propagation::Orphan,
                false => Propagation::Background,
            })
        })
    });
    let default = || {
        request
            .old_meta()
            .and_then(|m| m.annotation(PROPAGATION_ANNOTATION))
            .and_then(Propagation::from_annotation)
    };
    named.or_else(default).unwrap_or(Propagation::Background)
}

/// The longest warning syncgc gives: the apiserver may cut longer ones.
pub const MAX_WARNING: usize = 256;

/// `warning`, cut to [`MAX_WARNING`] bytes (on a character boundary, marked `…`).
fn fit(mut warning: String) -> String {
    crate::gc::causes::cut(&mut warning, MAX_WARNING);
    warning
}

/// The `syncgc COMMAND` line for the object of `request` (`explain`, `plan`), with `rest`.
fn command(verb: &str, request: &Request, rest: &str) -> String {
    let kind = request.kind.kind.to_ascii_lowercase();
    let kind = if request.kind.group.is_empty() {
        kind
    } else {
        format!("{kind}.{}", request.kind.group)
    };
    let namespace = match request.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!(" -n {ns}"),
        _ => String::new(),
    };
    format!("syncgc {verb} {kind}/{}{namespace}{rest}", request.name)
}

/// How long an armed owner with `dependents` may wait at most, with the collector's timeouts.
fn at_most(request: &Request, policy: &Policy, dependents: usize) -> Option<String> {
    let meta = request.old_meta();
    let timeouts = policy.timeouts?;
    let most = timeouts.for_owner(
        dependents,
        meta.and_then(|m| m.annotation(TIMEOUT_ANNOTATION)),
    );
    Some(crate::duration::format(most))
}

/// What a DELETE of an armed owner with `dependents` is told: first how to follow it, then
/// that it waits, and for how long at most.
fn waiting_warning(request: &Request, policy: &Policy, dependents: usize) -> String {
    let mut warning = format!(
        "syncgc: follow it with: {}; {} stays until its {dependents} dependent(s) are gone",
        command("explain", request, " --watch"),
        describe(request)
    );
    if let Some(most) = at_most(request, policy, dependents) {
        let _ = write!(warning, ", for at most {most}");
    }
    fit(warning)
}

/// What a dry-run DELETE of an armed owner with `dependents` is told: what the DELETE would
/// take down, by the collector's plan of it (`preview`), each warning short enough that the
/// apiserver never cuts it.
pub fn dry_run_warnings(
    request: &Request,
    policy: &Policy,
    dependents: usize,
    preview: &Preview,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let deleted: usize = preview.deleted.values().sum();
    let mut kinds: Vec<(&String, &usize)> = preview.deleted.iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    warnings.push(format!(
        "syncgc: dry run; in full: {}. {} ({}) would delete {deleted} object(s) in {} wave(s){}{}",
        command("plan", request, ""),
        describe(request),
        propagation(request).as_str(),
        preview.waves,
        if kinds.is_empty() { "" } else { ": " },
        kinds.join(", "),
    ));
    let others: Vec<String> = [
        (preview.kept, "would live on with other owners"),
        (preview.orphaned, "would be orphaned"),
        (
            preview.waiting,
            "would stay Terminating, held by finalizers",
        ),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if !others.is_empty() {
        warnings.push(format!("syncgc: dry run: {}", others.join(", ")));
    }
    let most = at_most(request, policy, dependents);
    let until = match (&most, preview.gone) {
        (Some(most), true) => format!("would stay until they are gone, for at most {most}"),
        (Some(most), false) => format!(
            "would stay {most}, until syncgc releases it: what it waits for waits on another controller"
        ),
        (None, _) => "would stay until they are gone".to_owned(),
    };
    warnings.push(format!("syncgc: dry run: {} {until}", describe(request)));
    warnings.into_iter().map(fit).collect()
}

fn describe(request: &Request) -> String {
    crate::api::described(
        &request.kind.kind,
        request.namespace.as_deref(),
        &request.name,
    )
}

fn finalizers_pointer() -> PointerBuf {
    PointerBuf::from_tokens(["metadata", "finalizers"])
}

fn labels_pointer() -> PointerBuf {
    PointerBuf::from_tokens(["metadata", "labels"])
}

/// Whether `meta` carries [`ARMED_LABEL`].
pub fn labelled(meta: &Metadata) -> bool {
    meta.label(ARMED_LABEL) == Some("true")
}

/// A JSON patch that arms `meta`: adds the synchronous finalizer (leaving other finalizers
/// alone) and [`ARMED_LABEL`], whichever it lacks; `None` when it has both.
pub fn arm_patch(meta: &Metadata) -> Option<Patch> {
    let mut ops = Vec::new();
    if !meta.has_finalizer(SYNCHRONOUS_FINALIZER) {
        ops.push(if meta.finalizers.is_some() {
            add(
                finalizers_pointer().with_trailing_token("-"),
                Value::from(SYNCHRONOUS_FINALIZER),
            )
        } else {
            add(
                finalizers_pointer(),
                Value::from(vec![SYNCHRONOUS_FINALIZER]),
            )
        });
    }
    if !labelled(meta) {
        ops.push(if meta.labels.is_some() {
            add(
                labels_pointer().with_trailing_token(ARMED_LABEL),
                Value::from("true"),
            )
        } else {
            add(labels_pointer(), serde_json::json!({ ARMED_LABEL: "true" }))
        });
    }
    (!ops.is_empty()).then_some(Patch(ops))
}

/// A JSON patch that disarms `meta`: removes the synchronous finalizer, guarded by a `test`
/// that it is still at the index it was seen at, and [`ARMED_LABEL`]; `None` when it has
/// neither.
pub fn disarm_patch(meta: &Metadata) -> Option<Patch> {
    let mut ops = Vec::new();
    if let Some(index) = meta
        .finalizers()
        .iter()
        .position(|f| f == SYNCHRONOUS_FINALIZER)
    {
        let path = finalizers_pointer().with_trailing_token(index.to_string());
        ops.push(PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: Value::from(SYNCHRONOUS_FINALIZER),
        }));
        ops.push(PatchOperation::Remove(RemoveOperation { path }));
    }
    if meta.label(ARMED_LABEL).is_some() {
        ops.push(PatchOperation::Remove(RemoveOperation {
            path: labels_pointer().with_trailing_token(ARMED_LABEL),
        }));
    }
    (!ops.is_empty()).then_some(Patch(ops))
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::review::{Options, ReviewedObject};
    use serde_json::json;
    use std::time::Duration;

    const DENY: Policy = Policy {
        unarmed_delete: UnarmedDelete::Deny,
        timeouts: None,
        max_cascade: None,
        guards: false,
    };

    /// With the collector's timeouts: a minute, 100 ms per dependent, an hour at most.
    const TIMED: Policy = Policy {
        unarmed_delete: UnarmedDelete::Allow,
        timeouts: Some(Timeouts {
            base: Duration::from_secs(60),
            per_dependent: Duration::from_millis(100),
            max: Duration::from_secs(3600),
        }),
        max_cascade: None,
        guards: false,
    };

    fn meta(annotations: &[(&str, &str)], finalizers: Option<&[&str]>) -> Metadata {
        Metadata {
            name: Some("cm".into()),
            uid: Some("uid-1".into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            finalizers: finalizers.map(|f| f.iter().map(|s| (*s).to_owned()).collect()),
            ..Default::default()
        }
    }

    fn request(operation: Operation, object: Option<Metadata>, old: Option<Metadata>) -> Request {
        let wrap = |m: Option<Metadata>| m.map(|m| ReviewedObject { metadata: Some(m) });
        Request {
            uid: "r".into(),
            name: "cm".into(),
            namespace: Some("ns".into()),
            operation,
            object: wrap(object),
            old_object: wrap(old),
            ..Default::default()
        }
    }

    fn delete(old: Metadata, options: Options) -> Request {
        Request {
            options: Some(options),
            ..request(Operation::Delete, None, Some(old))
        }
    }

    /// Applies the decision's patch to a document holding `meta`'s finalizers and labels.
    fn patched(meta: &Metadata, decision: &Decision) -> Value {
        let mut doc = json!({ "metadata": { "name": "cm" } });
        if let Some(f) = &meta.finalizers {
            doc["metadata"]["finalizers"] = json!(f);
        }
        if let Some(l) = &meta.labels {
            doc["metadata"]["labels"] = json!(l);
        }
        json_patch::patch(&mut doc, decision.patch.as_ref().unwrap()).unwrap();
        doc
    }

    fn patched_finalizers(meta: &Metadata, decision: &Decision) -> Option<Vec<String>> {
        serde_json::from_value(patched(meta, decision)["metadata"]["finalizers"].clone()).ok()
    }

    fn with_labels(meta: Metadata, labels: &[(&str, &str)]) -> Metadata {
        Metadata {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..meta
        }
    }

    const ARMED: (&str, &str) = (ARMED_LABEL, "true");

    const OPT_IN: (&str, &str) = (SYNCHRONOUS_ANNOTATION, "true");

    #[test]
    fn create_of_an_opted_in_object_arms_it() {
        for finalizers in [None, Some(&[][..]), Some(&["other"][..])] {
            let m = meta(&[OPT_IN], finalizers);
            let d = admit(&request(Operation::Create, Some(m.clone()), None), &DENY, 0);
            assert_eq!(d.reason, Case::Arm);
            let mut expected: Vec<String> = finalizers
                .unwrap_or_default()
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            expected.push(SYNCHRONOUS_FINALIZER.into());
            assert_eq!(patched_finalizers(&m, &d), Some(expected));
            assert_eq!(
                patched(&m, &d)["metadata"]["labels"],
                json!({ ARMED_LABEL: "true" })
            );
        }
        let m = with_labels(meta(&[OPT_IN], None), &[("app", "a")]);
        let d = admit(&request(Operation::Create, Some(m.clone()), None), &DENY, 0);
        assert_eq!(
            patched(&m, &d)["metadata"]["labels"],
            json!({ "app": "a", ARMED_LABEL: "true" })
        );
    }

    #[test]
    fn objects_that_did_not_opt_in_are_untouched() {
        for value in ["false", "True", "yes", ""] {
            let m = meta(&[(SYNCHRONOUS_ANNOTATION, value)], None);
            let d = admit(&request(Operation::Create, Some(m), None), &DENY, 0);
            assert_eq!((d.reason, d.patch), (Case::Untouched, None), "{value:?}");
        }
        let d = admit(
            &request(Operation::Create, Some(meta(&[], None)), None),
            &DENY,
            0,
        );
        assert_eq!((d.reason, d.patch), (Case::Untouched, None));
    }

    #[test]
    fn armed_objects_are_not_patched_again() {
        let m = with_labels(meta(&[OPT_IN], Some(&[SYNCHRONOUS_FINALIZER])), &[ARMED]);
        let d = admit(
            &request(Operation::Update, Some(m.clone()), Some(m)),
            &DENY,
            0,
        );
        assert_eq!((d.reason, d.patch), (Case::Untouched, None));
    }

    #[test]
    fn an_armed_object_without_the_label_gets_the_label_only() {
        let m = meta(&[OPT_IN], Some(&[SYNCHRONOUS_FINALIZER]));
        let d = admit(
            &request(Operation::Update, Some(m.clone()), Some(m.clone())),
            &DENY,
            0,
        );
        assert_eq!(d.reason, Case::Arm);
        let doc = patched(&m, &d);
        assert_eq!(
            doc["metadata"]["finalizers"],
            json!([SYNCHRONOUS_FINALIZER])
        );
        assert_eq!(doc["metadata"]["labels"], json!({ ARMED_LABEL: "true" }));
    }

    #[test]
    fn update_that_adds_the_annotation_arms() {
        let old = meta(&[], None);
        let new = meta(&[OPT_IN], None);
        let d = admit(&request(Operation::Update, Some(new), Some(old)), &DENY, 0);
        assert_eq!(d.reason, Case::Arm);
    }

    #[test]
    fn update_that_removes_the_annotation_disarms_leaving_other_finalizers() {
        let old = meta(&[OPT_IN], Some(&["a", SYNCHRONOUS_FINALIZER, "b"]));
        let new = with_labels(
            meta(&[], Some(&["a", SYNCHRONOUS_FINALIZER, "b"])),
            &[("app", "a"), ARMED],
        );
        let d = admit(
            &request(Operation::Update, Some(new.clone()), Some(old)),
            &DENY,
            0,
        );
        assert_eq!(d.reason, Case::Disarm);
        assert_eq!(
            patched_finalizers(&new, &d),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(
            patched(&new, &d)["metadata"]["labels"],
            json!({ "app": "a" })
        );
    }

    #[test]
    fn objects_being_deleted_are_never_patched() {
        let mut m = meta(&[OPT_IN], None);
        m.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
        let d = admit(
            &request(Operation::Update, Some(m.clone()), Some(m.clone())),
            &DENY,
            0,
        );
        assert_eq!((d.reason, d.patch), (Case::Terminating, None));
        let mut old = meta(&[OPT_IN], Some(&[SYNCHRONOUS_FINALIZER]));
        old.deletion_timestamp = m.deletion_timestamp.clone();
        let mut new = meta(&[], Some(&[SYNCHRONOUS_FINALIZER]));
        new.deletion_timestamp = m.deletion_timestamp.clone();
        let d = admit(&request(Operation::Update, Some(new), Some(old)), &DENY, 0);
        assert_eq!((d.reason, d.patch), (Case::Terminating, None));
    }

    #[test]
    fn subresources_connect_and_objects_without_metadata_are_ignored() {
        let mut r = request(Operation::Update, Some(meta(&[OPT_IN], None)), None);
        r.sub_resource = Some("status".into());
        assert_eq!(admit(&r, &DENY, 0).reason, Case::Ignored);
        let r = request(Operation::Connect, None, None);
        assert_eq!(admit(&r, &DENY, 0).reason, Case::Ignored);
        let mut r = request(Operation::Create, None, None);
        r.object = Some(ReviewedObject { metadata: None });
        assert_eq!(admit(&r, &DENY, 0).reason, Case::Ignored);
        let r = request(Operation::Delete, None, None);
        assert_eq!(admit(&r, &DENY, 0).reason, Case::Ignored);
    }

    #[test]
    fn delete_never_patches_and_injects_the_annotated_default() {
        for (default, finalizer) in [
            ("Foreground", FOREGROUND_FINALIZER),
            ("Orphan", ORPHAN_FINALIZER),
        ] {
            let old = meta(
                &[OPT_IN, (PROPAGATION_ANNOTATION, default)],
                Some(&[SYNCHRONOUS_FINALIZER]),
            );
            let d = admit(&delete(old, Options::default()), &DENY, 0);
            assert_eq!(d.reason, Case::DeleteDefaultPropagation);
            assert_eq!(d.patch, None);
            assert_eq!(
                d.side_effect,
                Some(AddFinalizer {
                    finalizer,
                    uid: "uid-1".into(),
                    claims: Claims {
                        annotations: vec![
                            (SYNCHRONOUS_ANNOTATION, "true".into()),
                            (PROPAGATION_ANNOTATION, default.into()),
                        ],
                        finalizers: vec![SYNCHRONOUS_FINALIZER],
                    },
                })
            );
        }
    }

    #[test]
    fn a_named_policy_or_a_dry_run_wins_over_the_default() {
        let old = meta(
            &[OPT_IN, (PROPAGATION_ANNOTATION, "Foreground")],
            Some(&[SYNCHRONOUS_FINALIZER]),
        );
        let named = [
            Options {
                propagation_policy: Some("Background".into()),
                ..Default::default()
            },
            Options {
                orphan_dependents: Some(false),
                ..Default::default()
            },
            Options {
                dry_run: Some(vec!["All".into()]),
                ..Default::default()
            },
        ];
        for options in named {
            let d = admit(&delete(old.clone(), options.clone()), &DENY, 0);
            assert_eq!(
                (d.reason, d.side_effect),
                (Case::DeleteArmed, None),
                "{options:?}"
            );
        }
        let mut dry = delete(old, Options::default());
        dry.dry_run = Some(true);
        assert_eq!(admit(&dry, &DENY, 0).side_effect, None);
    }

    #[test]
    fn background_an_unknown_default_or_an_existing_finalizer_add_nothing() {
        for (default, warns) in [("Background", false), ("Sideways", true)] {
            let old = meta(
                &[OPT_IN, (PROPAGATION_ANNOTATION, default)],
                Some(&[SYNCHRONOUS_FINALIZER]),
            );
            let d = admit(&delete(old, Options::default()), &DENY, 0);
            assert_eq!(
                (d.reason, d.side_effect.is_none()),
                (Case::DeleteArmed, true)
            );
            assert_eq!(!d.warnings.is_empty(), warns, "{default}");
        }
        let old = meta(
            &[OPT_IN, (PROPAGATION_ANNOTATION, "Orphan")],
            Some(&[SYNCHRONOUS_FINALIZER, ORPHAN_FINALIZER]),
        );
        assert_eq!(
            admit(&delete(old, Options::default()), &DENY, 0).side_effect,
            None
        );
    }

    #[test]
    fn unarmed_delete_is_allowed_or_denied_and_armed() {
        let old = meta(&[OPT_IN], None);
        let allow = Policy::default();
        let d = admit(&delete(old.clone(), Options::default()), &allow, 0);
        assert_eq!(d.reason, Case::DeleteUnarmedAllowed);
        assert_eq!((d.denial, d.side_effect), (None, None));

        let d = admit(&delete(old.clone(), Options::default()), &DENY, 0);
        assert_eq!(d.reason, Case::DeleteUnarmedDenied);
        assert!(d.denial.unwrap().contains("armed now"));
        assert_eq!(
            d.side_effect,
            Some(AddFinalizer {
                finalizer: SYNCHRONOUS_FINALIZER,
                uid: "uid-1".into(),
                claims: Claims {
                    annotations: vec![(SYNCHRONOUS_ANNOTATION, "true".into())],
                    finalizers: Vec::new(),
                },
            })
        );

        let mut dry = delete(old, Options::default());
        dry.dry_run = Some(true);
        let d = admit(&dry, &DENY, 0);
        assert!(d.denial.is_some());
        assert_eq!(d.side_effect, None);
    }

    #[test]
    fn delete_of_an_armed_owner_says_how_many_dependents_it_waits_for() {
        let old = meta(&[OPT_IN], Some(&[SYNCHRONOUS_FINALIZER]));
        let d = admit(&delete(old.clone(), Options::default()), &DENY, 3);
        assert_eq!(d.reason, Case::DeleteArmed);
        assert!(
            d.warnings[0].contains("its 3 dependent(s)"),
            "{:?}",
            d.warnings
        );
        assert!(
            admit(&delete(old.clone(), Options::default()), &DENY, 0)
                .warnings
                .is_empty()
        );
        // With the collector's timeouts: how long at most, and how to follow it.
        let mut request = delete(old, Options::default());
        request.kind.kind = "ConfigMap".into();
        let d = admit(&request, &TIMED, 400);
        assert_eq!(
            d.warnings,
            [
                "syncgc: follow it with: syncgc explain configmap/cm -n ns --watch; \
                 ConfigMap ns/cm stays until its 400 dependent(s) are gone, for at most 1m40s"
            ]
        );
        // A dry run is told the plan by the handler instead.
        let mut dry = request.clone();
        dry.dry_run = Some(true);
        assert!(admit(&dry, &TIMED, 400).warnings.is_empty());
    }

    /// The policy with `syncgc run`'s timeouts by default, as its flags parse them.
    fn defaults() -> Policy {
        #[derive(clap::Parser)]
        struct Run {
            #[command(flatten)]
            collector: crate::gc::config::CollectorArgs,
        }
        let run = <Run as clap::Parser>::parse_from(["syncgc"]);
        Policy {
            timeouts: Some(run.collector.timeouts()),
            guards: true,
            ..TIMED
        }
    }

    /// The DELETE of the armed `kind` (of `group`) `namespace/name`.
    fn armed_delete(group: &str, kind: &str, namespace: &str, name: &str) -> Request {
        let old = meta(&[OPT_IN], Some(&[SYNCHRONOUS_FINALIZER]));
        let mut request = delete(old, Options::default());
        request.kind.group = group.into();
        request.kind.kind = kind.into();
        request.namespace = Some(namespace.into());
        request.name = name.into();
        request
    }

    /// Every `kubectl delete` warning the docs show is what the webhook says, with syncgc's
    /// default timeouts, for the owner and the dependents of its sample. kubectl's own last
    /// line of the dry run is kubectl 1.34's, written here.
    #[test]
    fn the_docs_warnings_are_what_the_webhook_says() {
        use crate::report::samples;
        let warned = |group, kind, namespace, name, dependents| {
            let request = armed_delete(group, kind, namespace, name);
            let decision = admit(&request, &defaults(), dependents);
            format!("Warning: {}", decision.warnings.join("\nWarning: "))
        };
        let shop = warned("apps", "Deployment", "shop", "web", 4);
        let demo = warned("", "ConfigMap", "demo", "shop", 2);
        let team = warned("", "ConfigMap", "team-a", "owner", 20);
        for (page, printed) in [
            ("README.md", [shop, demo].as_slice()),
            ("docs/commands.md", std::slice::from_ref(&team)),
            ("docs/troubleshooting.md", std::slice::from_ref(&team)),
        ] {
            for line in samples::lines(page, "Warning: syncgc: follow it with:") {
                assert!(
                    printed.contains(&line),
                    "{page}: {line}\nis not what the webhook says; it says one of:\n{}",
                    printed.join("\n")
                );
            }
        }
        // The dry run of docs/commands.md: an owner whose ConfigMap goes, whose Secret stays
        // held by another controller's finalizer, and whose third dependent has another owner.
        let request = armed_delete("", "ConfigMap", "team-a", "owner");
        let preview = Preview {
            deleted: [("ConfigMap".to_owned(), 1), ("Secret".to_owned(), 1)].into(),
            waves: 1,
            kept: 1,
            waiting: 1,
            gone: false,
            ..Preview::default()
        };
        let mut printed =
            String::from("$ kubectl delete configmap owner -n team-a --dry-run=server\n");
        for warning in dry_run_warnings(&request, &defaults(), 3, &preview) {
            printed.push_str(&format!("Warning: {warning}\n"));
        }
        printed.push_str("configmap \"owner\" deleted from team-a namespace (server dry run)\n");
        let page = "docs/commands.md";
        let sample = samples::block(
            page,
            "$ kubectl delete configmap owner -n team-a --dry-run=server\n",
        );
        samples::assert_printed(page, &sample, &printed);
    }

    #[test]
    fn the_longest_name_leaves_the_command_to_follow_it_whole_and_the_warning_uncut() {
        let old = meta(&[OPT_IN], Some(&[SYNCHRONOUS_FINALIZER]));
        let mut request = delete(old, Options::default());
        request.kind.kind = "ConfigMap".into();
        request.name = "n".repeat(200);
        request.namespace = Some("é".repeat(30));
        let d = admit(&request, &TIMED, 400);
        let warning = &d.warnings[0];
        assert!(warning.len() <= MAX_WARNING, "{} bytes", warning.len());
        assert!(warning.ends_with('…'), "{warning}");
        assert!(warning.starts_with("syncgc: follow it with: syncgc explain configmap/nnn"));
        assert_eq!(fit("short".into()), "short");
    }

    #[test]
    fn the_propagation_is_the_named_one_else_the_annotation_else_background() {
        let annotated = meta(
            &[OPT_IN, (PROPAGATION_ANNOTATION, "Foreground")],
            Some(&[SYNCHRONOUS_FINALIZER]),
        );
        let plain = meta(&[OPT_IN], Some(&[SYNCHRONOUS_FINALIZER]));
        let named = |policy: &str| Options {
            propagation_policy: Some(policy.into()),
            ..Default::default()
        };
        let orphaning = Options {
            orphan_dependents: Some(true),
            ..Default::default()
        };
        for (old, options, want) in [
            (&annotated, Options::default(), Propagation::Foreground),
            (&annotated, named("Orphan"), Propagation::Orphan),
            (&annotated, named("Background"), Propagation::Background),
            (&plain, orphaning, Propagation::Orphan),
            (&plain, Options::default(), Propagation::Background),
        ] {
            let request = delete(old.clone(), options.clone());
            assert_eq!(propagation(&request), want, "{options:?}");
        }
    }

    #[test]
    fn a_dry_run_is_told_what_the_delete_would_take_down() {
        let old = meta(&[OPT_IN], Some(&[SYNCHRONOUS_FINALIZER]));
        let mut request = delete(old, Options::default());
        request.kind.kind = "Deployment".into();
        request.kind.group = "apps".into();
        let preview = Preview {
            deleted: [("Pod".to_owned(), 3), ("ReplicaSet".to_owned(), 1)].into(),
            waves: 2,
            kept: 1,
            waiting: 2,
            gone: true,
            ..Preview::default()
        };
        assert_eq!(
            dry_run_warnings(&request, &TIMED, 5, &preview),
            [
                "syncgc: dry run; in full: syncgc plan deployment.apps/cm -n ns. \
                 Deployment ns/cm (background) would delete 4 object(s) in 2 wave(s): 3 Pod, 1 ReplicaSet",
                "syncgc: dry run: 1 would live on with other owners, \
                 2 would stay Terminating, held by finalizers",
                "syncgc: dry run: Deployment ns/cm would stay until they are gone, for at most 1m0.5s",
            ]
        );
        let stuck = Preview {
            gone: false,
            ..Preview::default()
        };
        let warnings = dry_run_warnings(&request, &TIMED, 0, &stuck);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].ends_with("would delete 0 object(s) in 0 wave(s)"));
        assert!(warnings[1].contains("would stay 1m, until syncgc releases it"));
        let many = Preview {
            deleted: (0..100).map(|n| (format!("Kind{n}"), 1)).collect(),
            ..Preview::default()
        };
        for warning in dry_run_warnings(&request, &TIMED, 100, &many) {
            assert!(warning.len() <= MAX_WARNING, "{warning}");
        }
    }

    #[test]
    fn delete_of_an_object_not_opted_in_or_terminating_is_untouched() {
        let d = admit(&delete(meta(&[], None), Options::default()), &DENY, 0);
        assert_eq!((d.reason, d.denial), (Case::Untouched, None));
        let mut m = meta(&[OPT_IN], None);
        m.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
        let d = admit(&delete(m, Options::default()), &DENY, 0);
        assert_eq!((d.reason, d.denial), (Case::Terminating, None));
    }

    #[test]
    fn writes_of_misconfigured_annotations_are_answered_with_warnings() {
        let policy = TIMED;
        let typo = meta(
            &[
                ("syncgc.io/synchronous", "True"),
                ("syncgc.io/timout", "5m"),
            ],
            None,
        );
        for operation in [Operation::Create, Operation::Update] {
            let decision = admit(&request(operation, Some(typo.clone()), None), &policy, 0);
            assert_eq!(decision.reason, Case::Untouched);
            assert!(decision.patch.is_none());
            assert_eq!(decision.warnings.len(), 2, "{:?}", decision.warnings);
            assert!(
                decision.warnings[0].starts_with("syncgc: ")
                    && decision.warnings[0].contains("ns/cm: syncgc.io/synchronous: \"True\""),
                "{:?}",
                decision.warnings
            );
            assert!(decision.warnings[1].contains("syncgc.io/timout is not an annotation"));
        }
        // Armed all the same, and told that its timeout is capped.
        let long = meta(
            &[
                ("syncgc.io/synchronous", "true"),
                ("syncgc.io/timeout", "2h"),
            ],
            None,
        );
        let decision = admit(&request(Operation::Create, Some(long), None), &policy, 0);
        assert_eq!(decision.reason, Case::Arm);
        assert_eq!(decision.warnings.len(), 1);
        assert!(
            decision.warnings[0].contains("capped"),
            "{:?}",
            decision.warnings
        );
        // A well-formed object gets none.
        let fine = meta(
            &[
                ("syncgc.io/synchronous", "true"),
                ("syncgc.io/timeout", "5m"),
            ],
            None,
        );
        let decision = admit(&request(Operation::Create, Some(fine), None), &policy, 0);
        assert!(decision.warnings.is_empty(), "{:?}", decision.warnings);
    }
}
