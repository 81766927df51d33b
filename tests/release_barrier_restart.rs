//! The release barrier while watches fail: a watch that keeps failing (a conversion webhook
//! that does not answer), and kube-apiserver restarting while owners wait; in both modes, one
//! after the other (they need kube-controller-manager with and without its GC). Alone in its
//! binary: a failing watch holds every release in its scope, and no other test can run while
//! the apiserver is down.

mod support;

use support::TestNamespace;
use support::barrier::{self, Wait};
use support::process::{Syncgc, WEBHOOK_LABEL};

#[tokio::test]
async fn owners_wait_while_watches_fail_and_recover() {
    let cooperative = tokio::task::spawn_blocking(|| {
        Syncgc::start(
            &format!("syncgc-barrier-restart-{}", std::process::id()),
            &["--timeout-base", "120s"],
        )
    })
    .await
    .unwrap();
    let client = support::client().await;
    for test in ["barrier-failing", "barrier-restart"] {
        let ns =
            TestNamespace::with_labels(&client, test, &[(WEBHOOK_LABEL, &cooperative.name)]).await;
        match test {
            "barrier-failing" => {
                barrier::a_failing_watch_holds_the_owner(&ns, Wait::Synchronous).await
            }
            _ => {
                barrier::an_apiserver_restart_does_not_release_the_owner(&ns, Wait::Synchronous)
                    .await
            }
        }
    }
    drop(cooperative);
    let standalone = tokio::task::spawn_blocking(|| {
        Syncgc::start(
            &format!("syncgc-barrier-restart-standalone-{}", std::process::id()),
            &["--mode", "standalone"],
        )
    })
    .await
    .unwrap();
    let client = support::client().await;
    for test in ["barrier-failing-standalone", "barrier-restart-standalone"] {
        let ns = TestNamespace::new(&client, test).await;
        support::gc::service_account_ready(&ns).await;
        match test {
            "barrier-failing-standalone" => {
                barrier::a_failing_watch_holds_the_owner(&ns, Wait::Foreground).await
            }
            _ => {
                barrier::an_apiserver_restart_does_not_release_the_owner(&ns, Wait::Foreground)
                    .await
            }
        }
    }
    drop(standalone);
}
