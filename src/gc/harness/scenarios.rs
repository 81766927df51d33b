//! The workers' scenarios, each in the upstream step shape: the graph as the watches show it,
//! the apiserver's scripted answers, one item processed, then what was sent, said and queued.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::graph::{Flags, Mode, Observed, Order, Work};
use crate::names::{DEADLINE_ANNOTATION, ORPHAN_FINALIZER, Reason, SYNCHRONOUS_FINALIZER};

#[tokio::test(start_paused = true)]
async fn a_dependent_with_dependents_is_armed_under_the_deadline_of_the_owner_that_waits() {
    let h = Harness::new(Mode::Cooperative);
    h.watched([
        observed(1, &[], WAITING, &[Flags::ARMED]),
        observed(2, &[1], Flags::empty(), &[]),
        observed(3, &[2], Flags::empty(), &[]),
    ]);
    let deadline = at("2026-11-24T12:00:00Z");
    h.collector.deadlines.fix(uid(1), deadline);
    h.script("GET", &path(2), [(200, object(2, &[1], json!({})))]);
    h.script("PATCH", &path(2), [(200, object(2, &[1], json!({})))]);

    h.step(Work::AttemptToDelete(uid(2))).await.unwrap();

    assert_eq!(
        h.sent(),
        [
            format!("GET {}", path(2)),
            format!("GET {}", path(2)),
            format!("PATCH {}", path(2))
        ],
        "read, read again to add the finalizer under a precondition, patch"
    );
    let patch = &h.bodies("PATCH", &path(2))[0]["metadata"];
    assert_eq!(patch["finalizers"], json!([SYNCHRONOUS_FINALIZER]));
    assert_eq!(patch["resourceVersion"], "7");
    assert_eq!(
        patch["annotations"][DEADLINE_ANNOTATION],
        deadline.to_string(),
        "the owner's deadline"
    );
    assert_eq!(
        h.collector.deadlines.within_bounds(
            uid(2),
            at("2026-11-24T11:00:00Z"),
            Duration::from_secs(3600)
        ),
        Some(deadline),
        "kept in memory too"
    );
    assert_eq!(
        h.queued(),
        BTreeSet::from([Work::AttemptToDelete(uid(2))]),
        "looked at again: it waits for its own dependent now"
    );
}

#[tokio::test(start_paused = true)]
async fn at_the_deadline_an_ordered_owner_abandons_its_order_and_every_wave_is_queued() {
    let ordered = |n, order: Option<&str>| Observed {
        order: Order::of(order),
        ..Observed::config_map(n, &[1], Flags::empty())
    };
    let past = waiting_owner(at("2026-01-01T00:00:00Z"), Some(at("2026-01-01T00:00:10Z")));
    Harness::run(
        Mode::Cooperative,
        vec![
            Act::Watch(vec![
                observed(1, &[], WAITING, &[Flags::ARMED]),
                ordered(2, Some("2")),
                ordered(3, Some("1")),
                ordered(4, None),
            ]),
            Act::Answer("GET", path(1), vec![(200, past)]),
            Act::Process(Work::SyncOwner(uid(1))),
            // The stored deadline is kept; every wave goes at once, the owner behind them.
            Act::Expect(Expected {
                sent: vec![format!("GET {}", path(1))],
                events: vec![Reason::OrderAbandoned.as_str().into()],
                queued: BTreeSet::from([
                    Work::SyncOwner(uid(1)),
                    Work::AttemptToDelete(uid(2)),
                    Work::AttemptToDelete(uid(3)),
                    Work::AttemptToDelete(uid(4)),
                ]),
            }),
        ],
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn orphaning_a_fan_out_drops_each_reference_then_the_finalizer() {
    let h = Harness::new(Mode::Standalone);
    let orphaning = Flags::ORPHAN.with(Flags::DELETING, true);
    h.watched(
        [observed(1, &[], orphaning, &[Flags::ORPHAN])]
            .into_iter()
            .chain((2..=4).map(|n| observed(n, &[1], Flags::empty(), &[]))),
    );
    for n in 2..=4 {
        h.script("GET", &path(n), [(200, object(n, &[1], json!({})))]);
        h.script("PATCH", &path(n), [(200, object(n, &[], json!({})))]);
    }
    h.script("PATCH", &path(1), [(200, object(1, &[], json!({})))]);

    h.step(Work::Orphan(uid(1))).await.unwrap();

    let sent = h.sent();
    for n in 2..=4 {
        assert!(sent.contains(&format!("GET {}", path(n))), "{sent:?}");
        let patch = &h.bodies("PATCH", &path(n))[0];
        assert_eq!(
            patch,
            &json!([
                { "op": "test", "path": "/metadata/uid", "value": uid(n).to_string() },
                { "op": "test", "path": "/metadata/ownerReferences/0/uid", "value": uid(1).to_string() },
                { "op": "remove", "path": "/metadata/ownerReferences/0" }
            ]),
            "{patch}"
        );
    }
    assert_eq!(
        sent.last().map(String::as_str),
        Some(format!("PATCH {}", path(1)).as_str()),
        "the finalizer last"
    );
    let patch = &h.bodies("PATCH", &path(1))[0];
    assert_eq!(
        patch[1],
        json!({ "op": "test", "path": "/metadata/finalizers/0", "value": ORPHAN_FINALIZER })
    );
    assert_eq!(
        patch[2],
        json!({ "op": "remove", "path": "/metadata/finalizers/0" })
    );
}

#[tokio::test(start_paused = true)]
async fn a_release_meeting_a_conflict_reads_again_and_an_owner_gone_meanwhile_is_released() {
    let h = Harness::run(
        Mode::Cooperative,
        vec![
            Act::Watch(vec![observed(1, &[], WAITING, &[Flags::ARMED])]),
            Act::Answer(
                "GET",
                path(1),
                vec![(200, waiting_owner(crate::api::clock::now(), None))],
            ),
            Act::Answer(
                "PATCH",
                path(1),
                vec![(200, json!({})), (409, json!({})), (404, json!({}))],
            ),
            Act::Process(Work::SyncOwner(uid(1))),
            // The deadline stored; the finalizer removed where the watch saw it: 409; read
            // where it is now: 404, gone meanwhile.
            Act::Expect(Expected {
                sent: vec![
                    format!("GET {}", path(1)),
                    format!("PATCH {}", path(1)),
                    format!("PATCH {}", path(1)),
                    format!("GET {}", path(1)),
                    format!("PATCH {}", path(1)),
                ],
                events: vec!["SyncGCWaiting".into(), "SyncGCReleased".into()],
                queued: BTreeSet::new(),
            }),
        ],
    )
    .await;
    let removals = h.bodies("PATCH", &path(1));
    assert!(removals[0]["metadata"]["annotations"][DEADLINE_ANNOTATION].is_string());
    assert_eq!(
        removals[1][2],
        json!({ "op": "remove", "path": "/metadata/finalizers/0" })
    );
}

#[tokio::test(start_paused = true)]
async fn the_release_barrier_holds_an_owner_while_a_read_finds_a_dependent_and_then_lets_it_go() {
    let h = Harness::with_barrier(Mode::Cooperative, true);
    h.watched([observed(1, &[], WAITING, &[Flags::ARMED])]);
    let deleted = crate::api::clock::now();
    let deadline = deleted + jiff::SignedDuration::from_secs(50);
    h.script(
        "GET",
        &path(1),
        [(200, waiting_owner(deleted, Some(deadline)))],
    );
    // A dependent the watches have not delivered: the first read finds it, the next does not.
    let unseen = object(9, &[1], json!({}));
    let collection = format!("/api/v1/namespaces/{NS}/configmaps");
    h.script(
        "GET",
        &collection,
        [(200, list(&[unseen])), (200, list(&[]))],
    );
    h.script("PATCH", &path(1), [(200, json!({}))]);

    let mut steps = 0;
    while h.bodies("PATCH", &path(1)).is_empty() {
        steps += 1;
        assert!(steps < 10, "released within ten steps: {:?}", h.sent());
        if steps > 1 {
            let work = h.next(Duration::from_secs(5)).await;
            assert_eq!(work, Some(Work::SyncOwner(uid(1))), "{:?}", h.sent());
        }
        h.step(Work::SyncOwner(uid(1))).await.unwrap();
    }

    let reads = h
        .sent()
        .iter()
        .filter(|s| **s == format!("GET {collection}"))
        .count();
    assert_eq!(reads, 2, "a round that holds it, a round that lets it go");
    assert_eq!(h.events(), [Reason::Barrier.as_str(), "SyncGCReleased"]);
    let held = h
        .requests()
        .into_iter()
        .find(|s| s.body["reason"] == Reason::Barrier.as_str())
        .unwrap();
    let note = held.body["note"].as_str().unwrap_or_default();
    assert!(note.contains("o9"), "names what holds it: {note}");
    assert_eq!(
        h.bodies("PATCH", &path(1))[0][2],
        json!({ "op": "remove", "path": "/metadata/finalizers/0" })
    );
}

#[tokio::test(start_paused = true)]
async fn the_release_barrier_holds_an_owner_it_cannot_prove_free_until_its_deadline() {
    let h = Harness::with_barrier(Mode::Cooperative, true);
    h.watched([observed(1, &[], WAITING, &[Flags::ARMED])]);
    let deleted = crate::api::clock::now();
    let deadline = deleted + jiff::SignedDuration::from_secs(30);
    h.script(
        "GET",
        &path(1),
        [(200, waiting_owner(deleted, Some(deadline)))],
    );
    // Every read finds a dependent the watches never deliver.
    let collection = format!("/api/v1/namespaces/{NS}/configmaps");
    h.script(
        "GET",
        &collection,
        [(200, list(&[object(9, &[1], json!({}))]))],
    );
    h.script("PATCH", &path(1), [(200, json!({}))]);
    let started = tokio::time::Instant::now();

    h.step(Work::SyncOwner(uid(1))).await.unwrap();
    while h.bodies("PATCH", &path(1)).is_empty() {
        let work = h.next(Duration::from_secs(60)).await;
        assert_eq!(work, Some(Work::SyncOwner(uid(1))), "{:?}", h.sent());
        h.step(Work::SyncOwner(uid(1))).await.unwrap();
    }

    assert!(
        started.elapsed() >= Duration::from_secs(29),
        "not before its deadline: {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "not long after it: {:?}",
        started.elapsed()
    );
    let reads = h
        .sent()
        .iter()
        .filter(|s| **s == format!("GET {collection}"))
        .count();
    assert!(reads >= 3, "looked at again while held: {reads} rounds");
    assert_eq!(
        h.events(),
        [Reason::Barrier.as_str(), Reason::TimedOut.as_str()],
        "held once (the hold did not change), then released by its timeout"
    );
    let released = h
        .requests()
        .into_iter()
        .find(|s| s.body["reason"] == Reason::TimedOut.as_str())
        .unwrap();
    let note = released.body["note"].as_str().unwrap_or_default();
    assert!(note.contains("release barrier could not confirm"), "{note}");
}

#[tokio::test(start_paused = true)]
async fn a_reference_to_an_owner_living_in_another_namespace_is_reported_and_not_followed() {
    let elsewhere = Observed {
        namespace: Some("other".into()),
        ..Observed::config_map(1, &[], Flags::empty())
    };
    let not_found = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404 });
    Harness::run(
        Mode::Standalone,
        vec![
            Act::Watch(vec![elsewhere, observed(2, &[1], Flags::empty(), &[])]),
            Act::Answer("GET", path(2), vec![(200, object(2, &[1], json!({})))]),
            // The owner as named from the dependent's namespace: not there.
            Act::Answer("GET", path(1), vec![(404, not_found)]),
            Act::Answer("DELETE", path(2), vec![(200, json!({}))]),
            Act::Process(Work::AttemptToDelete(uid(2))),
            // Looked up in the dependent's namespace, found absent: the dependent goes.
            Act::Expect(Expected {
                sent: vec![
                    format!("GET {}", path(2)),
                    format!("GET {}", path(1)),
                    format!("DELETE {}", path(2)),
                ],
                events: vec![Reason::OwnerRefInvalidNamespace.as_str().into()],
                queued: BTreeSet::new(),
            }),
        ],
    )
    .await;
}

/// The collector judges its own DELETEs as the webhook would (from 1.28 they skip it): while
/// objects carrying a finalizer handler's finalizer are being deleted, the handler's Pods stay
/// though their owner waits for them; the DELETE is tried again, and sent once nothing is
/// left to finalize.
#[tokio::test(start_paused = true)]
async fn a_collector_s_delete_held_by_a_finalizer_handler_is_not_sent_until_the_hold_ends() {
    use crate::graph::{Guards, Handles};
    let h = Harness::with_guards(Mode::Standalone);
    let now = crate::api::clock::now().as_second();
    let handler = Observed {
        guards: Guards {
            handles: Some(Handles::parse("example.com/a", None).unwrap()),
            ..Guards::default()
        },
        deleted_at: Some(now - 5),
        ..observed(
            1,
            &[],
            Flags::DELETING | Flags::FOREGROUND,
            &[Flags::FOREGROUND],
        )
    };
    let carrying = |deleting: bool| Observed {
        guards: Guards {
            foreign: vec!["example.com/a".into()],
            ..Guards::default()
        },
        deleted_at: deleting.then_some(now - 5),
        ..observed(
            9,
            &[],
            if deleting {
                Flags::DELETING
            } else {
                Flags::empty()
            },
            &[],
        )
    };
    h.watched([
        handler,
        observed(2, &[1], Flags::empty(), &[]),
        carrying(true),
    ]);
    let deleted = json!({ "deletionTimestamp": Timestamp::from_second(now - 5).unwrap().to_string(),
                          "finalizers": ["foregroundDeletion"] });
    h.script("GET", &path(1), [(200, object(1, &[], deleted))]);
    h.script("GET", &path(2), [(200, object(2, &[1], json!({})))]);
    h.script("DELETE", &path(2), [(200, json!({}))]);

    let err = h.step(Work::AttemptToDelete(uid(2))).await.unwrap_err();
    assert!(matches!(err, crate::api::ApiError::Held { .. }), "{err}");
    assert!(err.is_retryable(), "queued again with backoff");
    assert!(err.to_string().contains("handles example.com/a"), "{err}");
    assert!(
        !h.sent().iter().any(|s| s.starts_with("DELETE")),
        "{:?}",
        h.sent()
    );

    // Finalized: nothing left to hold for.
    h.watched([carrying(false)]);
    h.step(Work::AttemptToDelete(uid(2))).await.unwrap();
    assert!(
        h.sent().contains(&format!("DELETE {}", path(2))),
        "{:?}",
        h.sent()
    );
}

/// A dependent whose owner is absent (no cascade admitted its DELETE) with a protected object
/// below it is not deleted: the guards refuse that DELETE in the process as the webhook does.
#[tokio::test(start_paused = true)]
async fn a_collector_s_delete_that_would_reach_a_protected_object_is_not_sent() {
    use crate::graph::Guards;
    let h = Harness::with_guards(Mode::Standalone);
    let protected = Observed {
        guards: Guards {
            protected: true,
            ..Guards::default()
        },
        ..observed(3, &[2], Flags::empty(), &[])
    };
    h.watched([observed(2, &[1], Flags::empty(), &[]), protected]);
    let not_found = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404 });
    h.script("GET", &path(2), [(200, object(2, &[1], json!({})))]);
    h.script("GET", &path(1), [(404, not_found)]);
    h.script("DELETE", &path(2), [(200, json!({}))]);

    let err = h.step(Work::AttemptToDelete(uid(2))).await.unwrap_err();
    assert!(matches!(err, crate::api::ApiError::Held { .. }), "{err}");
    assert!(err.to_string().contains("which is protected"), "{err}");
    assert!(
        !h.sent().iter().any(|s| s.starts_with("DELETE")),
        "{:?}",
        h.sent()
    );
}

#[tokio::test(start_paused = true)]
async fn an_owner_of_a_kind_nobody_serves_is_retried_and_nothing_is_deleted() {
    let h = Harness::new(Mode::Standalone);
    let widget = Observed {
        owners: vec![crate::graph::OwnerLink {
            uid: uid(1),
            coordinates: crate::graph::Coordinates::of("example.com/v1", "Widget", "w"),
            block_owner_deletion: false,
            served: false,
        }],
        ..Observed::config_map(2, &[], Flags::empty())
    };
    h.watched([widget]);
    let mut answer = object(2, &[], json!({}));
    answer["metadata"]["ownerReferences"] = json!([{ "apiVersion": "example.com/v1",
        "kind": "Widget", "name": "w", "uid": uid(1).to_string() }]);
    h.script("GET", &path(2), [(200, answer)]);

    let err = h.step(Work::AttemptToDelete(uid(2))).await.unwrap_err();

    assert!(
        matches!(err, crate::api::ApiError::UnknownKind { .. }),
        "{err}"
    );
    assert!(
        err.is_retryable(),
        "queued again with backoff, never dropped"
    );
    assert_eq!(h.sent(), [format!("GET {}", path(2))], "nothing deleted");
}

#[tokio::test(start_paused = true)]
async fn arming_with_a_deadline_the_apiserver_refuses_arms_without_it_and_keeps_it_in_memory() {
    let h = Harness::new(Mode::Cooperative);
    h.watched([
        observed(1, &[], WAITING, &[Flags::ARMED]),
        observed(2, &[1], Flags::empty(), &[]),
        observed(3, &[2], Flags::empty(), &[]),
    ]);
    let deadline = at("2026-11-24T12:00:00Z");
    h.collector.deadlines.fix(uid(1), deadline);
    h.script("GET", &path(2), [(200, object(2, &[1], json!({})))]);
    h.script(
        "PATCH",
        &path(2),
        [(422, json!({})), (200, object(2, &[1], json!({})))],
    );

    h.step(Work::AttemptToDelete(uid(2))).await.unwrap();

    let patches = h.bodies("PATCH", &path(2));
    assert_eq!(patches.len(), 2, "{:?}", h.sent());
    assert_eq!(
        patches[0]["metadata"]["annotations"][DEADLINE_ANNOTATION],
        deadline.to_string()
    );
    assert!(
        patches[1]["metadata"].get("annotations").is_none(),
        "the second write without the annotation: {}",
        patches[1]
    );
    assert_eq!(
        patches[1]["metadata"]["finalizers"],
        json!([SYNCHRONOUS_FINALIZER])
    );
    assert_eq!(
        h.collector.deadlines.within_bounds(
            uid(2),
            at("2026-11-24T11:00:00Z"),
            Duration::from_secs(3600)
        ),
        Some(deadline),
        "kept in memory"
    );
    assert_eq!(h.queued(), BTreeSet::from([Work::AttemptToDelete(uid(2))]));
}

/// Leader election ends only after the collector has (a leader renews while its workers finish
/// their items), so a worker of a replica that does not lead must stop at the shutdown itself;
/// a leading one stops once the queue has shut down.
#[tokio::test(start_paused = true)]
async fn at_shutdown_every_worker_stops_whether_or_not_its_replica_leads() {
    for leads in [false, true] {
        let h = Harness::new(Mode::Standalone);
        let (_leading_tx, leading) = tokio::sync::watch::channel(leads);
        let shutdown = tokio_util::sync::CancellationToken::new();
        let worker = tokio::spawn(crate::gc::collector::work(
            h.collector.clone(),
            leading,
            shutdown.clone(),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !worker.is_finished(),
            "leads: {leads}: works until shutdown"
        );

        shutdown.cancel();
        h.collector.cx.queue.shut_down();
        tokio::time::timeout(Duration::from_secs(5), worker)
            .await
            .unwrap_or_else(|_| panic!("leads: {leads}: the worker did not stop"))
            .unwrap();
    }
}
