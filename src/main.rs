#![deny(unsafe_code)]

use std::process::ExitCode;

/// mimalloc: the webhook allocates and frees on whichever worker thread polls a request, where
/// glibc's per-thread arenas contend on their locks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h (2.x and 3.x), which libmimalloc-sys does not name:
/// between `mi_option_eager_commit_delay` (14) and `mi_option_use_numa_nodes` (16).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // Freed memory goes back to the system at once rather than after a delay that only later
    // allocations would notice: the watches' first lists free in one burst tens of megabytes
    // that an idle collector would otherwise keep resident.
    #[allow(unsafe_code)]
    // SAFETY: sets a process-wide allocator option; mimalloc allows it at any time.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(syncgc::cli::main()),
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            ExitCode::FAILURE
        }
    }
}
