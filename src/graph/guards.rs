//! What an object says to the webhook's guards, read from its metadata: whether it is
//! protected, which finalizers it handles (a workload whose Pods remove them), and which
//! finalizers of others it carries. The graph keeps it beside the nodes, only for the objects
//! that say something.

use crate::api::meta::Meta;
use crate::names::{
    GUARDED_LABEL, HANDLES_FINALIZERS_ANNOTATION, HANDLES_FINALIZERS_SCOPE_ANNOTATION,
    MAX_CASCADE_ANNOTATION, PROTECTED_ANNOTATION,
};

/// An object's part in the guards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guards {
    /// Annotated `syncgc.io/protected: "true"`.
    pub protected: bool,
    /// What it handles, when it is a finalizer handler.
    pub handles: Option<Handles>,
    /// Its finalizers other than the collectors' (`syncgc.io/synchronous`,
    /// `foregroundDeletion`, `orphan`), by name.
    pub foreign: Vec<Box<str>>,
    /// Annotated `syncgc.io/max-cascade` (any value: a malformed one falls back to the
    /// cluster's limit, which its DELETE must still be judged by).
    pub limited: bool,
    /// Labelled `syncgc.io/guarded`: its DELETE reaches the guards.
    pub selected: bool,
}

/// The finalizers a workload's Pods remove (`syncgc.io/handles-finalizers`), and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handles {
    pub finalizers: Vec<Box<str>>,
    /// The whole cluster (`syncgc.io/handles-finalizers-scope: cluster`), not only the
    /// workload's namespace.
    pub cluster_wide: bool,
}

/// Whether `syncgc.io/protected: value` protects: `"true"`, exactly.
pub fn protects(value: Option<&str>) -> bool {
    value == Some("true")
}

impl Guards {
    /// What `meta` says.
    pub fn of(meta: &Meta) -> Self {
        Self {
            limited: meta.annotations.get(MAX_CASCADE_ANNOTATION).is_some(),
            selected: meta.labels.get(GUARDED_LABEL).is_some(),
            ..Self::from_parts(
                meta.annotations.get(PROTECTED_ANNOTATION),
                meta.annotations.get(HANDLES_FINALIZERS_ANNOTATION),
                meta.annotations.get(HANDLES_FINALIZERS_SCOPE_ANNOTATION),
                meta.finalizers.iter().map(String::as_str),
            )
        }
    }

    /// From the values of `syncgc.io/protected`, `syncgc.io/handles-finalizers` and its scope,
    /// and the finalizers.
    pub fn from_parts<'a>(
        protected: Option<&str>,
        handles: Option<&str>,
        scope: Option<&str>,
        finalizers: impl Iterator<Item = &'a str>,
    ) -> Self {
        Self {
            protected: protects(protected),
            handles: handles.and_then(|value| Handles::parse(value, scope).ok()),
            foreign: finalizers
                .filter(|f| super::Flags::foreign(f))
                .map(Box::from)
                .collect(),
            limited: false,
            selected: false,
        }
    }

    /// Says nothing: not kept.
    pub fn is_empty(&self) -> bool {
        !self.protected
            && self.handles.is_none()
            && self.foreign.is_empty()
            && !self.limited
            && !self.selected
    }

    /// Whether its own metadata makes a guard judge its DELETE: protected, limited, or a
    /// finalizer handler.
    pub fn guards_itself(&self) -> bool {
        self.protected || self.limited || self.handles.is_some()
    }

    /// Whether it carries one of `finalizers`.
    pub fn carries_any(&self, finalizers: &[Box<str>]) -> bool {
        self.foreign.iter().any(|f| finalizers.contains(f))
    }
}

impl Handles {
    /// `example.com/a,example.com/b` (spaces around the commas allowed) with the scope
    /// annotation's value (`cluster` or, by default, `namespace`). An error says what is wrong
    /// with the list: empty, or an entry that is not a finalizer's name.
    pub fn parse(value: &str, scope: Option<&str>) -> Result<Self, String> {
        let finalizers: Vec<Box<str>> = value
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(Box::from)
            .collect();
        if finalizers.is_empty() {
            return Err("names no finalizer".to_owned());
        }
        if let Some(bad) = finalizers.iter().find(|f| !finalizer_name(f)) {
            return Err(format!(
                "holds {bad:?}, which is not a finalizer's name such as example.com/cleanup"
            ));
        }
        Ok(Self {
            finalizers,
            cluster_wide: scope == Some("cluster"),
        })
    }
}

/// A finalizer's name as the apiserver takes it: `[prefix/]name`, the prefix a DNS
/// subdomain, the name letters, digits, `-`, `_` and `.`, starting and ending alphanumeric.
fn finalizer_name(text: &str) -> bool {
    let (prefix, name) = text.rsplit_once('/').unwrap_or(("", text));
    let alphanumeric_ends = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let prefix_ok = prefix.is_empty()
        || (prefix.len() <= 253
            && prefix.split('.').all(|label| {
                alphanumeric_ends(label)
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            }));
    prefix_ok
        && name.len() <= 63
        && alphanumeric_ends(name)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handled_finalizers_are_read_as_a_list_of_names() {
        let handles = Handles::parse(" example.com/a ,example.com/b,", Some("cluster")).unwrap();
        assert_eq!(
            handles.finalizers,
            vec![Box::from("example.com/a"), Box::from("example.com/b")]
        );
        assert!(handles.cluster_wide);
        assert!(!Handles::parse("cleanup", None).unwrap().cluster_wide);
        for bad in [
            "",
            " , ",
            "example.com/",
            "Example.com/a",
            "a b",
            "a/b/c",
            "-a",
        ] {
            assert!(Handles::parse(bad, None).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_what_an_object_says_is_kept() {
        let guards = Guards::from_parts(
            Some("true"),
            Some("example.com/a"),
            None,
            [
                "syncgc.io/synchronous",
                "example.com/b",
                "foregroundDeletion",
            ]
            .into_iter(),
        );
        assert!(guards.protected);
        assert_eq!(guards.foreign, vec![Box::from("example.com/b")]);
        assert!(guards.carries_any(&[Box::from("example.com/b")]));
        assert!(!guards.carries_any(&[Box::from("example.com/a")]));
        let nothing = Guards::from_parts(Some("yes"), Some(""), None, ["orphan"].into_iter());
        assert!(nothing.is_empty(), "{nothing:?}");
    }
}
