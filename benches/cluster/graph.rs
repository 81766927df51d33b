//! The ownership graph's memory and speed for 100,000 synthetic objects (10,000 owners with 9
//! dependents each). Memory is what the graph holds on the heap, counted by a global allocator
//! that keeps the number of live bytes: exact, and free of the allocator's caching that makes
//! resident memory drift.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use syncgc::graph::{
    Coordinates, FinalizerPlaces, Flags, Graph, Mode, Observed, OwnerLink, ResourceId, Uid,
};

/// syncgc's allocator (mimalloc), counting the bytes allocated and not yet freed. The bare
/// webhook server runs with it too, so that it stands for the same stack as syncgc.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to mimalloc; the counter is only
// arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

const OWNERS: u128 = 10_000;
const PER_OWNER: u128 = 9;
pub const OBJECTS: usize = (OWNERS * (1 + PER_OWNER)) as usize;

/// A ConfigMap as a watch reports it: names as long as generated ones, 50 namespaces.
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
        places: FinalizerPlaces::default(),
        order: Default::default(),
        deleted_at: None,
    }
}

fn objects() -> impl Iterator<Item = Observed> {
    (0..OWNERS).flat_map(|o| {
        std::iter::once(object(o, None))
            .chain((0..PER_OWNER).map(move |d| object(OWNERS + o * PER_OWNER + d, Some(o))))
    })
}

pub struct GraphMeasurement {
    /// Heap bytes the graph holds per object: nodes, uid index, names, owner and dependent
    /// lists.
    pub bytes_per_node: f64,
    pub apply: Duration,
    pub transitive_dependents: Duration,
}

pub fn measure() -> GraphMeasurement {
    // Memory: objects are made one at a time, so what stays allocated is the graph's.
    let before = live();
    let mut graph = Graph::new(Mode::Standalone);
    for object in objects() {
        black_box(graph.apply(ResourceId::new(0), object));
    }
    let bytes_per_node = (live() - before) as f64 / OBJECTS as f64;
    drop(graph);

    // Speed: the objects are made first.
    let prepared: Vec<Observed> = objects().collect();
    let started = Instant::now();
    let mut graph = Graph::new(Mode::Standalone);
    for object in prepared {
        black_box(graph.apply(ResourceId::new(0), object));
    }
    let apply = started.elapsed() / OBJECTS as u32;

    let started = Instant::now();
    let mut total = 0;
    for o in 0..OWNERS {
        total += graph.transitive_dependents(Uid::from_u128(o));
    }
    let transitive_dependents = started.elapsed() / OWNERS as u32;
    assert_eq!(total, (OWNERS * PER_OWNER) as usize);
    GraphMeasurement {
        bytes_per_node,
        apply,
        transitive_dependents,
    }
}
