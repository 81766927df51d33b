//! The metadata the collector reads from lists and watch events, and nothing else: name,
//! namespace, uid, resourceVersion, deletionTimestamp, ownerReferences, finalizers, and of the
//! labels and annotations only syncgc's own (`syncgc.io/…`). Everything else an object's
//! metadata carries — managedFields above all, and annotations such as
//! `kubectl.kubernetes.io/last-applied-configuration` — is skipped as it is parsed, never
//! allocated: a list of 100,000 objects costs what the graph keeps of them.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::null_is_empty;

/// The prefix of the labels and annotations that are kept.
const OWN: &str = "syncgc.io/";

/// An object of a metadata list or watch event (`PartialObjectMetadata`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Item {
    #[serde(default)]
    pub metadata: Meta,
}

/// An object's metadata, as far as the collector needs it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    pub name: String,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub deletion_timestamp: Option<Time>,
    #[serde(deserialize_with = "own")]
    pub labels: Own,
    #[serde(deserialize_with = "own")]
    pub annotations: Own,
    #[serde(deserialize_with = "null_is_empty")]
    pub owner_references: Vec<Reference>,
    #[serde(deserialize_with = "null_is_empty")]
    pub finalizers: Vec<String>,
}

/// An ownerReference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Reference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub block_owner_deletion: Option<bool>,
}

/// The `syncgc.io/` entries of a label or annotation map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own(Vec<(String, String)>);

impl Own {
    /// Keeps `key` when it is one of syncgc's.
    pub fn keep(&mut self, key: &str, value: &str) {
        if key.starts_with(OWN) {
            self.0.push((key.to_owned(), value.to_owned()));
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Reads a map of strings (or null), keeping the `syncgc.io/` entries.
fn own<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Own, D::Error> {
    struct Entries;

    impl<'de> Visitor<'de> for Entries {
        type Value = Own;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of strings")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Own, E> {
            Ok(Own::default())
        }

        fn visit_none<E: de::Error>(self) -> Result<Own, E> {
            Ok(Own::default())
        }

        fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Own, D::Error> {
            deserializer.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Own, A::Error> {
            let mut kept = Vec::new();
            while let Some(Key(key)) = map.next_key()? {
                match key {
                    Some(key) => kept.push((key, map.next_value()?)),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Own(kept))
        }
    }

    deserializer.deserialize_option(Entries)
}

/// A map key, kept (`Some`) only when it is one of syncgc's.
struct Key(Option<String>);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;

        impl Visitor<'_> for Text {
            type Value = Key;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(Key(key.starts_with(OWN).then(|| key.to_owned())))
            }
        }

        deserializer.deserialize_str(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::names::{
        ARMED_LABEL, FOREGROUND_FINALIZER, SYNCHRONOUS_ANNOTATION, SYNCHRONOUS_FINALIZER,
    };

    #[test]
    fn what_the_collector_does_not_need_is_skipped_and_the_rest_read_as_in_full() {
        let metadata = json!({
            "name": "cm", "namespace": "ns", "uid": "6c0b3a56-0b1b-4e0e-9a43-5b1bb4a7e3a1",
            "resourceVersion": "42", "deletionTimestamp": "2026-11-23T10:00:00Z",
            "labels": { "app": "x", ARMED_LABEL: "true" },
            "annotations": { SYNCHRONOUS_ANNOTATION: "true",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}" },
            "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "o",
                "uid": "1", "blockOwnerDeletion": true, "controller": true }],
            "finalizers": [SYNCHRONOUS_FINALIZER, FOREGROUND_FINALIZER],
            "managedFields": [{ "manager": "kubectl", "fieldsV1": { "f:data": { ".": {} } } }],
            "generation": 3,
        });
        let meta: Meta = serde_json::from_value(metadata.clone()).unwrap();
        assert_eq!(
            meta.labels,
            Own(vec![(ARMED_LABEL.into(), "true".into())]),
            "only syncgc's labels are kept"
        );
        assert_eq!(meta.annotations.get(SYNCHRONOUS_ANNOTATION), Some("true"));
        assert_eq!(meta.owner_references[0].block_owner_deletion, Some(true));
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
    }
}
