//! The bits of an object's state the graph keeps ([`Flags`]), where its finalizers stand in
//! its list ([`FinalizerPlaces`]), and how both are read from its metadata.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::meta::Meta;
use crate::names::{
    ARMED_LABEL, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, SYNCHRONOUS_ANNOTATION,
    SYNCHRONOUS_FINALIZER,
};

/// Bits of an object's state, packed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// Referenced as an owner but not (or no longer) seen by any watch.
    pub const VIRTUAL: Self = Self(1);
    /// Has a `deletionTimestamp`.
    pub const DELETING: Self = Self(1 << 1);
    /// Carries `syncgc.io/synchronous`.
    pub const ARMED: Self = Self(1 << 2);
    /// Annotated `syncgc.io/synchronous: "true"`.
    pub const OPTED_IN: Self = Self(1 << 3);
    /// Carries `foregroundDeletion`.
    pub const FOREGROUND: Self = Self(1 << 4);
    /// Carries `orphan`.
    pub const ORPHAN: Self = Self(1 << 5);
    /// A virtual node for an object a watch saw deleted: its uid will never exist again.
    pub const GONE: Self = Self(1 << 6);
    /// Labelled `syncgc.io/armed: "true"`.
    pub const LABELLED: Self = Self(1 << 7);

    pub const fn empty() -> Self {
        Self(0)
    }

    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    #[must_use]
    pub const fn with(self, other: Self, on: bool) -> Self {
        if on {
            Self(self.0 | other.0)
        } else {
            Self(self.0 & !other.0)
        }
    }

    /// Opted in, without the finalizer or its label, and not being deleted (created while the
    /// webhook was away, or armed before the label existed): to be armed.
    pub const fn needs_arming(self) -> bool {
        self.contains(Self::OPTED_IN)
            && !(self.contains(Self::ARMED) && self.contains(Self::LABELLED))
            && !self.contains(Self::DELETING)
    }

    /// The names of the bits set, for people.
    pub fn names(self) -> Vec<&'static str> {
        [
            (Self::VIRTUAL, "virtual"),
            (Self::DELETING, "deleting"),
            (Self::ARMED, "armed"),
            (Self::OPTED_IN, "opted-in"),
            (Self::FOREGROUND, "foreground"),
            (Self::ORPHAN, "orphan"),
            (Self::GONE, "gone"),
            (Self::LABELLED, "labelled"),
        ]
        .into_iter()
        .filter(|(flag, _)| self.contains(*flag))
        .map(|(_, name)| name)
        .collect()
    }

    /// The flags of an object's metadata from a list or a watch event.
    pub fn of(meta: &Meta) -> Self {
        Self::from_parts(
            meta.finalizers.iter().map(String::as_str),
            meta.annotations.get(SYNCHRONOUS_ANNOTATION),
            meta.labels.get(ARMED_LABEL),
            meta.deletion_timestamp.is_some(),
        )
    }

    /// The flags of an object read in full (a GET).
    pub fn of_object(meta: &ObjectMeta) -> Self {
        fn get<'a>(map: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
            map.as_ref()?.get(key).map(String::as_str)
        }
        Self::from_parts(
            meta.finalizers.iter().flatten().map(String::as_str),
            get(&meta.annotations, SYNCHRONOUS_ANNOTATION),
            get(&meta.labels, ARMED_LABEL),
            meta.deletion_timestamp.is_some(),
        )
    }

    /// The flags of the finalizers the garbage collectors remove: syncgc's, `foregroundDeletion`
    /// and `orphan`. Every other finalizer is another controller's.
    pub const COLLECTORS: [Self; 3] = [Self::ARMED, Self::FOREGROUND, Self::ORPHAN];

    /// The finalizer this flag of [`Flags::COLLECTORS`] stands for.
    pub fn finalizer(self) -> Option<&'static str> {
        match self {
            Self::ARMED => Some(SYNCHRONOUS_FINALIZER),
            Self::FOREGROUND => Some(FOREGROUND_FINALIZER),
            Self::ORPHAN => Some(ORPHAN_FINALIZER),
            _ => None,
        }
    }

    /// Whether `finalizer` is another controller's: none of [`Flags::COLLECTORS`].
    pub fn foreign(finalizer: &str) -> bool {
        Self::of_finalizer(finalizer) == Self::empty()
    }

    /// The flag that stands for the finalizer `finalizer` (empty for the finalizers of others).
    pub fn of_finalizer(finalizer: &str) -> Self {
        match finalizer {
            SYNCHRONOUS_FINALIZER => Self::ARMED,
            FOREGROUND_FINALIZER => Self::FOREGROUND,
            ORPHAN_FINALIZER => Self::ORPHAN,
            _ => Self::empty(),
        }
    }

    /// From an object's finalizers, opt-in annotation, armed label and whether it is being
    /// deleted.
    fn from_parts<'a>(
        finalizers: impl Iterator<Item = &'a str>,
        opt_in: Option<&str>,
        armed_label: Option<&str>,
        deleting: bool,
    ) -> Self {
        finalizers
            .map(Self::of_finalizer)
            .fold(Self::empty(), |flags, f| flags.with(f, true))
            .with(Self::LABELLED, armed_label == Some("true"))
            .with(Self::DELETING, deleting)
            .with(Self::OPTED_IN, opt_in == Some("true"))
    }
}

/// Where the finalizers that [`Flags::ARMED`], [`Flags::FOREGROUND`] and [`Flags::ORPHAN`]
/// stand for are in an object's list, when among its first three: so that the collector can
/// remove one by its index without reading the object first. Two bits each, the index plus
/// one; 0 when it is not there, or further down. One bit more says whether the list holds
/// finalizers of others (for what a cascade waits on: [`crate::gc::cascade`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FinalizerPlaces(u8);

impl FinalizerPlaces {
    const FINALIZERS: [Flags; 3] = Flags::COLLECTORS;
    const OTHERS: u8 = 1 << 6;

    /// The places of the finalizers of an object's metadata from a list or a watch event.
    pub fn of(meta: &Meta) -> Self {
        Self::of_list(meta.finalizers.iter().map(|f| Flags::of_finalizer(f)))
    }

    /// The places in a list whose finalizers are `list` (each the flag it stands for, or
    /// none).
    pub fn of_list(list: impl IntoIterator<Item = Flags>) -> Self {
        let mut places = 0u8;
        for (index, finalizer) in list.into_iter().enumerate() {
            match Self::slot(finalizer) {
                Some(slot) if index < 3 => places |= (index as u8 + 1) << (2 * slot),
                Some(_) => {}
                None => places |= Self::OTHERS,
            }
        }
        Self(places)
    }

    /// Whether the object carries finalizers of others: not the garbage collector's.
    pub fn others(self) -> bool {
        self.0 & Self::OTHERS != 0
    }

    fn slot(finalizer: Flags) -> Option<usize> {
        Self::FINALIZERS.iter().position(|f| *f == finalizer)
    }

    /// The index of the finalizer `finalizer` stands for, when known.
    pub fn of_finalizer(self, finalizer: Flags) -> Option<usize> {
        let place = (self.0 >> (2 * Self::slot(finalizer)?)) & 0b11;
        (place != 0).then(|| usize::from(place) - 1)
    }
}

impl std::ops::BitOr for Flags {
    type Output = Self;
    fn bitor(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_list_s_metadata_and_an_object_read_in_full_have_the_same_flags() {
        let metadata = json!({
            "name": "cm", "namespace": "ns", "deletionTimestamp": "2026-11-23T10:00:00Z",
            "labels": { "app": "x", ARMED_LABEL: "true" },
            "annotations": { SYNCHRONOUS_ANNOTATION: "true" },
            "finalizers": [SYNCHRONOUS_FINALIZER, FOREGROUND_FINALIZER],
        });
        let meta: Meta = serde_json::from_value(metadata.clone()).unwrap();
        let full: ObjectMeta = serde_json::from_value(metadata).unwrap();
        assert_eq!(Flags::of(&meta), Flags::of_object(&full));
        assert_eq!(
            Flags::of(&meta).names(),
            ["deleting", "armed", "opted-in", "foreground", "labelled"]
        );
    }

    #[test]
    fn nulls_and_absences_are_empty() {
        let meta: Meta = serde_json::from_value(json!({ "name": "a", "labels": null,
            "annotations": null, "ownerReferences": null, "finalizers": null }))
        .unwrap();
        assert_eq!(Flags::of(&meta), Flags::empty());
    }

    #[test]
    fn the_collector_s_finalizers_are_found_in_the_first_three_places() {
        let meta: Meta = serde_json::from_value(json!({ "name": "a",
            "finalizers": ["example.com/x", FOREGROUND_FINALIZER, SYNCHRONOUS_FINALIZER, ORPHAN_FINALIZER] }))
        .unwrap();
        let places = FinalizerPlaces::of(&meta);
        assert_eq!(places.of_finalizer(Flags::FOREGROUND), Some(1));
        assert_eq!(places.of_finalizer(Flags::ARMED), Some(2));
        assert_eq!(
            places.of_finalizer(Flags::ORPHAN),
            None,
            "fourth: read first"
        );
        assert_eq!(places.of_finalizer(Flags::DELETING), None);
        let first: Meta =
            serde_json::from_value(json!({ "name": "a", "finalizers": [ORPHAN_FINALIZER] }))
                .unwrap();
        let first = FinalizerPlaces::of(&first);
        assert_eq!(first.of_finalizer(Flags::ORPHAN), Some(0));
        assert_eq!(first.of_finalizer(Flags::FOREGROUND), None);
        assert!(places.others(), "example.com/x");
        assert!(!first.others());
        let late: Meta = serde_json::from_value(json!({ "name": "a",
            "finalizers": [ORPHAN_FINALIZER, FOREGROUND_FINALIZER, SYNCHRONOUS_FINALIZER, "example.com/x"] }))
        .unwrap();
        assert!(
            FinalizerPlaces::of(&late).others(),
            "found further down too"
        );
    }
}
