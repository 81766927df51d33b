//! syncgc installed, checked, upgraded and uninstalled: the manifests with their own RBAC
//! (`manifests`), the self-managed webhook configuration and certificate (`self_managed`),
//! `syncgc check` (`check`), `syncgc disarm` (`disarm`), the chart's uninstall hook
//! (`uninstall`) and `helm upgrade` (`upgrade`), and syncgc's image on the real node,
//! installed by the chart and by the kustomization (`in_cluster`).
//!
//! The tests run one at a time, each holding `support::process::alone()` for its whole run:
//! they install cluster-wide objects under the same names (the release `syncgc`, its
//! ClusterRole, webhook configuration and Secret), and each syncgc they start acts in every
//! namespace.

#[path = "../support/mod.rs"]
mod support;

mod check;
mod disarm;
mod in_cluster;
mod manifests;
mod self_managed;
mod uninstall;
mod upgrade;
