#![forbid(unsafe_code)]

use std::process::ExitCode;

/// mimalloc: the webhook allocates and frees on whichever worker thread polls a request, where
/// glibc's per-thread arenas contend on their locks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    syncgc::cli::main().await
}
