//! The ownership graph's memory and speed for 100,000 synthetic objects (10,000 owners with 9
//! dependents each), measured as the growth of the process's resident memory while the graph
//! is built, next to the size of the node structure itself.
//!
//! Run with `cargo bench --bench graph`.

use std::hint::black_box;
use std::time::Instant;

use syncgc::graph::{Coordinates, Flags, Graph, Mode, Node, Observed, OwnerLink, ResourceId, Uid};

/// Resident memory of this process, in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn object(n: u128, owner: Option<u128>) -> Observed {
    Observed {
        uid: Uid::from_u128(n),
        coordinates: Coordinates::of("v1", "ConfigMap", &format!("object-{n:06}")),
        namespace: Some(format!("namespace-{}", n % 50)),
        resource_version: 1000 + n as u64,
        name: format!("object-{n:06}"),
        owners: owner
            .map(|o| OwnerLink {
                uid: Uid::from_u128(o),
                coordinates: Coordinates::of("v1", "ConfigMap", &format!("object-{o:06}")),
                block_owner_deletion: true,
            })
            .into_iter()
            .collect(),
        flags: Flags::empty(),
    }
}

fn objects() -> impl Iterator<Item = Observed> {
    (0..OWNERS).flat_map(|o| {
        std::iter::once(object(o, None))
            .chain((0..PER_OWNER).map(move |d| object(OWNERS + o * PER_OWNER + d, Some(o))))
    })
}

const OWNERS: u128 = 10_000;
const PER_OWNER: u128 = 9;

fn main() {
    let count = objects().count();

    // Memory: objects are made one at a time, so what stays is the graph's.
    let before = rss();
    let mut graph = Graph::new(Mode::Standalone);
    for object in objects() {
        black_box(graph.apply(ResourceId(0), object));
    }
    let after = rss();
    drop(graph);

    // Speed: the objects are made first.
    let prepared: Vec<Observed> = objects().collect();
    let started = Instant::now();
    let mut graph = Graph::new(Mode::Standalone);
    for object in prepared {
        black_box(graph.apply(ResourceId(0), object));
    }
    let built = started.elapsed();

    let started = Instant::now();
    let mut total = 0;
    for o in 0..OWNERS {
        total += graph.transitive_dependents(Uid::from_u128(o));
    }
    let walked = started.elapsed();
    assert_eq!(total, (OWNERS * PER_OWNER) as usize);

    println!("graph: {count} objects ({OWNERS} owners × {PER_OWNER} dependents)");
    println!(
        "  node struct: {} bytes (+ 16-byte uid key and map overhead)",
        std::mem::size_of::<Node>()
    );
    println!(
        "  resident memory: {:.1} MiB, {} bytes per object, names and owner lists included",
        (after - before) as f64 / (1 << 20) as f64,
        (after - before) / count
    );
    println!(
        "  apply: {:.0} ns per object; transitive dependents: {:.0} ns per owner",
        built.as_nanos() as f64 / count as f64,
        walked.as_nanos() as f64 / OWNERS as f64
    );
    black_box(graph);
}
