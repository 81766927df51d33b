//! The ownership graph's memory and speed for synthetic objects (owners with 9 dependents each),
//! at three sizes up to ten million, so that what grows faster than the objects shows. Memory
//! is what the graph holds on the heap, counted by a global allocator that keeps the number of
//! live bytes: exact, and free of the allocator's caching that makes resident memory drift.
//! The largest pause is the longest single apply or removal: what a watch event or a worker
//! waits for the graph's lock at worst (an index growing).

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

const PER_OWNER: u128 = 9;
/// The sizes measured: 100,000, 1,000,000 and 10,000,000 objects.
pub const SIZES: [usize; 3] = [100_000, 1_000_000, 10_000_000];

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
                served: true,
            })
            .into_iter()
            .collect(),
        flags: Flags::empty(),
        places: FinalizerPlaces::default(),
        order: Default::default(),
        deleted_at: None,
        guards: Default::default(),
    }
}

fn objects(owners: u128) -> impl Iterator<Item = Observed> {
    (0..owners).flat_map(move |o| {
        std::iter::once(object(o, None))
            .chain((0..PER_OWNER).map(move |d| object(owners + o * PER_OWNER + d, Some(o))))
    })
}

pub struct GraphMeasurement {
    /// Heap bytes the graph holds per object: nodes, uid index, names, owner and dependent
    /// lists.
    pub bytes_per_node: f64,
    pub apply: Duration,
    pub transitive_dependents: Duration,
    /// Each object's removal (its watch's DELETED event), dependents after their owners.
    pub remove: Duration,
    /// The longest single apply or removal.
    pub largest_pause: Duration,
    /// The memory system's part: the same objects inserted into a bare map of uids to boxed
    /// 64-byte records, each also reaching its owner's record, per object.
    pub bare_index: Duration,
}

/// The least an apply of the graph's objects touches: its uid's slot and record, and its
/// owner's, in a map as large as the graph's index; per object.
fn bare_index(owners: u128) -> Duration {
    let uids: Vec<(Uid, Option<Uid>)> = objects(owners)
        .map(|o| (o.uid, o.owners.first().map(|l| l.uid)))
        .collect();
    let mut index: std::collections::HashMap<Uid, Box<[u64; 8]>, syncgc::graph::UidHash> =
        Default::default();
    let took = timed(|| {
        for (uid, owner) in &uids {
            index.entry(*uid).or_insert_with(|| Box::new([0; 8]))[0] += 1;
            if let Some(record) = owner.and_then(|o| index.get_mut(&o)) {
                record[1] += 1;
            }
        }
    });
    black_box(&index);
    took / uids.len() as u32
}

/// Runs `f`, returning how long it took.
fn timed(f: impl FnOnce()) -> Duration {
    let started = Instant::now();
    f();
    started.elapsed()
}

/// The graph of `n` objects (a tenth of them owners).
pub fn measure(n: usize) -> GraphMeasurement {
    let owners = (n / (1 + PER_OWNER as usize)) as u128;
    let objects = || objects(owners);
    // Memory and the largest pause: objects are made one at a time, so what stays allocated
    // is the graph's.
    let before = live();
    let mut graph = Graph::new(Mode::Standalone);
    let mut largest_pause = Duration::ZERO;
    for object in objects() {
        let pause = timed(|| drop(black_box(graph.apply(ResourceId::new(0), object))));
        largest_pause = largest_pause.max(pause);
    }
    let bytes_per_node = (live() - before) as f64 / n as f64;
    drop(graph);

    // Speed: the objects are made first.
    let prepared: Vec<Observed> = objects().collect();
    let uids: Vec<Uid> = prepared.iter().map(|o| o.uid).collect();
    let mut graph = Graph::new(Mode::Standalone);
    let apply = timed(|| {
        for object in prepared {
            black_box(graph.apply(ResourceId::new(0), object));
        }
    }) / n as u32;

    let mut total = 0;
    let transitive_dependents = timed(|| {
        for o in 0..owners {
            total += graph.transitive_dependents(Uid::from_u128(o));
        }
    }) / owners as u32;
    assert_eq!(total, (owners * PER_OWNER) as usize);

    let remove = timed(|| {
        for &uid in &uids {
            let pause = timed(|| drop(black_box(graph.delete(uid))));
            largest_pause = largest_pause.max(pause);
        }
    }) / n as u32;
    assert_eq!(graph.counts().0, 0, "every object removed");
    drop(graph);
    let bare_index = bare_index(owners);
    GraphMeasurement {
        bare_index,
        bytes_per_node,
        apply,
        transitive_dependents,
        remove,
        largest_pause,
    }
}
