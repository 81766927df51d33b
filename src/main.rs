#![deny(unsafe_code)]

use std::cell::Cell;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// mimalloc: the webhook allocates and frees on whichever worker thread polls a request, where
/// glibc's per-thread arenas contend on their locks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often at most a worker thread that goes idle hands freed memory back.
const RELEASE_EVERY: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(release_freed_memory)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(syncgc::cli::main(collector_runtime)),
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The garbage collector's runtime: one thread (see `syncgc::app`), handing freed memory back
/// as the others do.
fn collector_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(release_freed_memory)
        .build()
}

/// Keeps the kernel from backing the heap with 2 MiB pages (transparent huge pages): each would
/// be zeroed whole when first touched and counted whole in resident memory, for a heap whose
/// live data is mostly small objects spread thin (the graph). Without it an idle collector is
/// a third larger, and listing 100,000 objects spends a quarter of its time zeroing pages.
fn disable_transparent_huge_pages() {
    #[allow(unsafe_code)]
    // SAFETY: prctl(PR_SET_THP_DISABLE) only sets a flag of this process.
    let failed = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0;
    if failed {
        eprintln!(
            "warning: could not turn transparent huge pages off: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Called when a worker thread has nothing to do: at most every [`RELEASE_EVERY`], hands the
/// memory this thread freed back to the system. mimalloc returns freed pages only when later
/// allocations come by, so without this the burst of the watches' first lists (tens of
/// megabytes for 100,000 objects) would stay resident in an idle collector.
fn release_freed_memory() {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    LAST.with(|last| {
        if last.get().is_some_and(|at| at.elapsed() < RELEASE_EVERY) {
            return;
        }
        last.set(Some(Instant::now()));
        #[allow(unsafe_code)]
        // SAFETY: mi_collect only frees what this thread's heap no longer uses.
        unsafe {
            libmimalloc_sys::mi_collect(false);
        }
    });
}
