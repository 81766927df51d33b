//! Events: what syncgc did and why, recorded on the objects it acted on.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::runtime::events::{Event, EventType};

use super::{Cluster, Target, Verb};
use crate::names::Reason;

/// The longest note an Event may carry.
const MAX_NOTE: usize = 1024;

/// The controller named in syncgc's Events.
pub const EVENT_REPORTER: &str = "syncgc";

impl Cluster {
    /// Records an Event about `regarding` (through the rate limit, with the timeout, counted
    /// like every call). Events are advisory: a failure is logged, never returned. Events of
    /// one object with the same reason make one series, which keeps the first note; a note
    /// that says something new goes through [`Cluster::new_event`].
    pub async fn event(&self, regarding: &Target, type_: EventType, reason: Reason, note: String) {
        self.record(regarding, type_, reason, note, true).await;
    }

    /// [`Cluster::event`] as an Event of its own, whatever came before: for a note that tells
    /// the next step of the same thing (a wave that starts, what the release barrier waits for).
    pub async fn new_event(
        &self,
        regarding: &Target,
        type_: EventType,
        reason: Reason,
        note: String,
    ) {
        self.record(regarding, type_, reason, note, false).await;
    }

    async fn record(
        &self,
        regarding: &Target,
        type_: EventType,
        reason: Reason,
        mut note: String,
        series: bool,
    ) {
        // The apiserver refuses notes over 1 kB.
        if note.len() > MAX_NOTE {
            let mut end = MAX_NOTE - 3;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
            note.push_str("...");
        }
        let reference = ObjectReference {
            api_version: Some(regarding.resource.api_version.clone()),
            kind: Some(regarding.resource.kind.clone()),
            name: Some(regarding.name.clone()),
            namespace: regarding.namespace.clone(),
            uid: Some(regarding.uid.clone()),
            resource_version: None,
            field_path: None,
        };
        let event = Event {
            type_,
            reason: reason.as_str().to_owned(),
            note: Some(note),
            action: reason.action().to_owned(),
            secondary: None,
        };
        let published = if series && reference.namespace.is_some() {
            self.call(
                Verb::Create,
                regarding,
                self.recorder.publish(&event, &reference),
            )
            .await
        } else {
            self.call(Verb::Create, regarding, self.create_event(event, reference))
                .await
        };
        if let Err(err) = published {
            tracing::debug!(%err, %reason, "could not record an event");
        }
    }

    /// An Event of its own, in the namespace of the object it is about; for a cluster-scoped
    /// object in `kube-system`: the events.k8s.io API of Kubernetes before 1.22 only takes
    /// those there, where the recorder does not put them.
    async fn create_event(
        &self,
        event: Event,
        regarding: ObjectReference,
    ) -> Result<(), kube::Error> {
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let now = jiff::Timestamp::now();
        let namespace = (regarding.namespace.clone()).unwrap_or_else(|| "kube-system".into());
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(EVENT_REPORTER),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            action: Some(event.action),
            reason: Some(event.reason),
            note: event.note,
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            metadata: ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            reporting_controller: Some(EVENT_REPORTER.to_owned()),
            reporting_instance: Some(
                std::env::var("POD_NAME").unwrap_or_else(|_| EVENT_REPORTER.to_owned()),
            ),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..Default::default()
        };
        Api::<K8sEvent>::namespaced(self.client.clone(), &namespace)
            .create(&Default::default(), &event)
            .await
            .map(drop)
    }
}
