//! The admission webhooks: arm opted-in objects on CREATE/UPDATE and intercept their DELETEs
//! (`/mutate`), and judge the DELETEs and evictions a guard can apply to (`/guard`, the rules
//! in [`crate::gc::guard`]).
//!
//! - [`review`]: the AdmissionReview wire format, read leanly, answered in the version asked.
//! - [`skim`]: the objects' unread parts of a review found and dropped before it is parsed.
//! - [`admit`]: the pure decision (`request → patch | denial | side effect`), and the closed
//!   set of a review's cases.
//! - [`decision`]: one review decided from the request and one read of the graph: the
//!   guards' verdict or `admit`'s decision, and what the record of causes keeps.
//! - [`handler`]: `POST /mutate` and `POST /guard`: body → parse → decision → effects →
//!   answer; no decision of its own.
//! - [`server`]: HTTPS (HTTP/1.1 and HTTP/2) with bounds and graceful shutdown.
//! - [`tls`]: the serving certificate, reloaded when its files change.
//! - [`registration`]: the MutatingWebhookConfiguration pointing at it.
//! - [`managed`]: `--manage-webhook`, that configuration kept by syncgc itself.
//! - [`served`]: the versions of the apiservers answering, which it is written for.
//! - [`certificate`]: `--tls-secret`, the CA and serving certificate kept in a Secret.

pub mod admit;
pub mod certificate;
pub mod decision;
pub mod handler;
pub mod managed;
pub mod registration;
pub mod review;
pub mod served;
pub mod server;
mod skim;
pub mod tls;
