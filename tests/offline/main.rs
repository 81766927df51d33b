//! The tests that need no cluster, side by side: the crate's layout (`layout`), the
//! documentation against the binary (`docs`), `syncgc certs` (`certs`), the webhook's HTTPS
//! server on its own (`webhook_http`), the Helm chart rendered (`chart`), and a release built
//! in a copy of the checkout (`release`).

#[path = "../support/mod.rs"]
mod support;

mod certs;
mod chart;
mod docs;
mod layout;
mod release;
mod webhook_http;
