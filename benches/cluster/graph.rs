//! The ownership graph's memory and speed for synthetic objects (owners with 9 dependents each),
//! at three sizes up to ten million, so that what grows faster than the objects shows. Memory
//! is what the graph holds on the heap, counted by a global allocator that keeps the number of
//! live bytes: exact, and free of the allocator's caching that makes resident memory drift.
//! The largest pause is the longest single apply or removal: what a watch event or a worker
//! waits for the graph's lock at worst (an index growing).
//!
//! Then the price of hashing uids with the process's key ([`hashing`]): the same graph with the
//! unkeyed mix it replaced, kept here only as that baseline ([`Unkeyed`]), and a flood of uids
//! made to collide under that mix against random uids.

use std::alloc::{GlobalAlloc, Layout};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use syncgc::graph::{
    Coordinates, FinalizerPlaces, Flags, Graph, Mode, Observed, OwnerLink, ResourceId, Uid, UidHash,
};

use crate::report::{Goal, Report, round};
use crate::thousands;

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

/// A ConfigMap as a watch reports it: names as long as generated ones, 50 namespaces; its uid
/// and its owner's `uid(n)`.
fn object(n: u128, owner: Option<u128>, uid: Uids) -> Observed {
    Observed {
        uid: uid(n),
        coordinates: Coordinates::of("v1", "ConfigMap", &format!("object-{n:06}")),
        namespace: Some(format!("namespace-{}", n % 50)),
        resource_version: 1000 + n as u64,
        name: format!("object-{n:06}"),
        owners: owner
            .map(|o| OwnerLink {
                uid: uid(o),
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

/// The uid of the `n`th object.
type Uids = fn(u128) -> Uid;

fn objects(owners: u128) -> impl Iterator<Item = Observed> {
    objects_with(owners, Uid::from_u128)
}

fn objects_with(owners: u128, uid: Uids) -> impl Iterator<Item = Observed> {
    (0..owners).flat_map(move |o| {
        std::iter::once(object(o, None, uid))
            .chain((0..PER_OWNER).map(move |d| object(owners + o * PER_OWNER + d, Some(o), uid)))
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
    bare_index_of::<UidHash>(&uids, wall)
}

/// [`bare_index`] of these uids and owners, hashed with `S`.
fn bare_index_of<S: BuildHasher + Default>(uids: &[(Uid, Option<Uid>)], clock: Clock) -> Duration {
    let mut index: std::collections::HashMap<Uid, Box<[u64; 8]>, S> = Default::default();
    let took = clock(&mut || {
        for (uid, owner) in uids {
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

/// How long something took, by [`wall`] or [`cpu`] time.
type Clock = fn(&mut dyn FnMut()) -> Duration;

fn wall(f: &mut dyn FnMut()) -> Duration {
    timed(f)
}

/// The time this thread spent on the CPU running `f`: what the comparisons of two cases in
/// turns measure, so that other work on the machine taking the CPU away (compiles, on a
/// shared machine) does not count.
fn cpu(f: &mut dyn FnMut()) -> Duration {
    fn now() -> Duration {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec to write into.
        let done = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        assert_eq!(done, 0, "the thread's CPU clock");
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }
    let started = now();
    f();
    now() - started
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

/// The mix the graph hashed uids with before its key (`(h <<< 29 ^ word) × K` over the two
/// halves, from 0): anyone can run it backwards, so it is here only as the baseline of
/// [`hashing`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Unkeyed(u64);

const K: u64 = 0x9e3779b97f4a7c15;

impl Hasher for Unkeyed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x100000001b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(K);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

type UnkeyedHash = BuildHasherDefault<Unkeyed>;

/// The `n`th uid of a flood made for [`Unkeyed`] as a tenant would make it (security review,
/// finding 3): every one hashes to 0x0123456789abcdef, so lands in one shard and one bucket.
fn colliding(n: u128) -> Uid {
    let inverse = (0..6).fold(K, |x, _| {
        x.wrapping_mul(2u64.wrapping_sub(K.wrapping_mul(x)))
    });
    let target = 0x0123456789abcdefu64.wrapping_mul(inverse);
    let hi = n as u64 + 1;
    let lo = target ^ hi.wrapping_mul(K).rotate_left(29);
    Uid::from_u128((u128::from(hi) << 64) | u128::from(lo))
}

/// The `n`th of a sequence of random uids (SplitMix64 of `2n` and `2n + 1`).
fn random(n: u128) -> Uid {
    let mix = |x: u64| {
        let mut z = x.wrapping_add(0x9e3779b97f4a7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    };
    let n = n as u64;
    Uid::from_u128((u128::from(mix(2 * n)) << 64) | u128::from(mix(2 * n + 1)))
}

/// Objects applied, or removed, from one graph before the other's turn.
const BATCH: usize = 2_000;

/// Two graphs built and torn down in turns, a [`BATCH`] of objects at a time (A then B, then B
/// then A, ...): `a` applied to an empty graph hashing with `A`, `b` to one hashing with `B`,
/// then each object removed. Apply and removal per object of each, in [`cpu`] time. In turns
/// so finely, whatever else the machine does weighs on both alike.
fn graphs_in_turns<A, B>(a: &[Observed], b: &[Observed]) -> [(Duration, Duration); 2]
where
    A: BuildHasher + Default + Clone,
    B: BuildHasher + Default + Clone,
{
    let mut graph_a = Graph::<A>::hashed_with(Mode::Standalone);
    let mut graph_b = Graph::<B>::hashed_with(Mode::Standalone);
    let (mut apply, mut remove) = ([Duration::ZERO; 2], [Duration::ZERO; 2]);
    let batches = a.len().max(b.len()).div_ceil(BATCH);
    let batch = |objects: &[Observed], i: usize| -> Vec<Observed> {
        objects
            .iter()
            .skip(i * BATCH)
            .take(BATCH)
            .cloned()
            .collect()
    };
    for i in 0..batches {
        if i % 2 == 0 {
            apply[0] += apply_batch(&mut graph_a, batch(a, i));
            apply[1] += apply_batch(&mut graph_b, batch(b, i));
        } else {
            apply[1] += apply_batch(&mut graph_b, batch(b, i));
            apply[0] += apply_batch(&mut graph_a, batch(a, i));
        }
    }
    let uids = |objects: &[Observed], i: usize| -> Vec<Uid> {
        let batch = objects.iter().skip(i * BATCH).take(BATCH);
        batch.map(|o| o.uid).collect()
    };
    for i in 0..batches {
        if i % 2 == 0 {
            remove[0] += remove_batch(&mut graph_a, &uids(a, i));
            remove[1] += remove_batch(&mut graph_b, &uids(b, i));
        } else {
            remove[1] += remove_batch(&mut graph_b, &uids(b, i));
            remove[0] += remove_batch(&mut graph_a, &uids(a, i));
        }
    }
    assert_eq!(graph_a.counts().0, 0, "every object removed");
    assert_eq!(graph_b.counts().0, 0, "every object removed");
    let per = |d: Duration, n: usize| d / n as u32;
    [
        (per(apply[0], a.len()), per(remove[0], a.len())),
        (per(apply[1], b.len()), per(remove[1], b.len())),
    ]
}

/// How long applying `batch` to `graph` took, in [`cpu`] time.
fn apply_batch<S>(graph: &mut Graph<S>, batch: Vec<Observed>) -> Duration
where
    S: BuildHasher + Default + Clone,
{
    let mut batch = batch.into_iter();
    cpu(&mut || {
        for object in batch.by_ref() {
            black_box(graph.apply(ResourceId::new(0), object));
        }
    })
}

/// How long removing `uids` from `graph` took, in [`cpu`] time.
fn remove_batch<S>(graph: &mut Graph<S>, uids: &[Uid]) -> Duration
where
    S: BuildHasher + Default + Clone,
{
    cpu(&mut || {
        for uid in uids {
            black_box(graph.delete(*uid));
        }
    })
}

/// Runs `a` and `b` `rounds` times each, in turns (A B, then B A, ...): what each returned.
fn in_turns<T>(
    rounds: usize,
    mut a: impl FnMut() -> T,
    mut b: impl FnMut() -> T,
) -> (Vec<T>, Vec<T>) {
    let (mut of_a, mut of_b) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 0 {
            of_a.push(a());
            of_b.push(b());
        } else {
            of_b.push(b());
            of_a.push(a());
        }
    }
    (of_a, of_b)
}

/// Two cases measured in the same rounds: each one's median per object, and the median of the
/// rounds' A ÷ B.
#[derive(Debug, Clone, Copy)]
pub struct Paired {
    pub a: Duration,
    pub b: Duration,
    pub ratio: f64,
}

impl Paired {
    fn of(a: &[Duration], b: &[Duration]) -> Self {
        let median = |v: &[Duration]| {
            let mut v = v.to_vec();
            v.sort();
            v[v.len() / 2]
        };
        let mut ratios: Vec<f64> = a
            .iter()
            .zip(b)
            .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
            .collect();
        ratios.sort_by(f64::total_cmp);
        Self {
            a: median(a),
            b: median(b),
            ratio: ratios[ratios.len() / 2],
        }
    }
}

/// What keyed hashing costs and what it stops, at one size.
pub struct Hashing {
    pub n: usize,
    /// Keyed ÷ unkeyed, the same objects, per object: with sequential uids (as in [`measure`],
    /// which the unkeyed mix spreads perfectly: its low bits are a permutation of theirs) and
    /// with random uids (as the apiserver's are).
    pub apply: Paired,
    pub remove: Paired,
    pub random_apply: Paired,
    pub random_remove: Paired,
    pub bare_index: Paired,
    /// Keyed: uids colliding under [`Unkeyed`] ÷ random uids, apply and removal per object.
    pub flood_apply: Paired,
    pub flood_remove: Paired,
}

/// Objects whose uids collide under [`Unkeyed`] in the unkeyed graph: each lookup compares
/// with every uid before it, so this many only.
pub const UNKEYED_FLOOD: usize = 10_000;

/// Apply and removal per object of `a` in a graph hashing with `A` and of `b` in one hashing
/// with `B`, built in turns ([`graphs_in_turns`]) `rounds` times.
fn compared<A, B>(rounds: usize, a: &[Observed], b: &[Observed]) -> (Paired, Paired)
where
    A: BuildHasher + Default + Clone,
    B: BuildHasher + Default + Clone,
{
    let (mut apply, mut remove) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for _ in 0..rounds {
        for (i, (a, r)) in graphs_in_turns::<A, B>(a, b).into_iter().enumerate() {
            apply[i].push(a);
            remove[i].push(r);
        }
    }
    (
        Paired::of(&apply[0], &apply[1]),
        Paired::of(&remove[0], &remove[1]),
    )
}

/// Keyed against unkeyed, and colliding against random uids, with `n` objects.
fn hashing_at(n: usize, rounds: usize) -> Hashing {
    let owners = (n / (1 + PER_OWNER as usize)) as u128;
    let n = owners as usize * (1 + PER_OWNER as usize);
    eprintln!("graph: hashing, {n} objects, {rounds} rounds");
    let sequential: Vec<Observed> = objects(owners).collect();
    let (apply, remove) = compared::<UidHash, UnkeyedHash>(rounds, &sequential, &sequential);
    let uids: Vec<(Uid, Option<Uid>)> = sequential
        .iter()
        .map(|o| (o.uid, o.owners.first().map(|l| l.uid)))
        .collect();
    drop(sequential);
    let (bare_keyed, bare_unkeyed) = in_turns(
        rounds,
        || bare_index_of::<UidHash>(&uids, cpu),
        || bare_index_of::<UnkeyedHash>(&uids, cpu),
    );
    drop(uids);

    let randomly: Vec<Observed> = objects_with(owners, random).collect();
    let (random_apply, random_remove) =
        compared::<UidHash, UnkeyedHash>(rounds, &randomly, &randomly);
    let flooding: Vec<Observed> = objects_with(owners, colliding).collect();
    let (flood_apply, flood_remove) = compared::<UidHash, UidHash>(rounds, &flooding, &randomly);
    Hashing {
        n,
        apply,
        remove,
        random_apply,
        random_remove,
        bare_index: Paired::of(&bare_keyed, &bare_unkeyed),
        flood_apply,
        flood_remove,
    }
}

/// The unkeyed graph under the flood: apply per object of [`UNKEYED_FLOOD`] colliding uids ÷
/// random ones (one round each: it is what keyed hashing stops, not what it costs).
fn unkeyed_flood() -> Paired {
    let owners = (UNKEYED_FLOOD / (1 + PER_OWNER as usize)) as u128;
    let flooding: Vec<Observed> = objects_with(owners, colliding).collect();
    let randomly: Vec<Observed> = objects_with(owners, random).collect();
    compared::<UnkeyedHash, UnkeyedHash>(1, &flooding, &randomly).0
}

/// The sizes of the hashing comparison: `SYNCGC_BENCH_GRAPH_HASHING` (numbers separated by
/// commas), 100,000 and 1,000,000 objects by default; `SYNCGC_BENCH_GRAPH_ROUNDS` rounds of
/// each case, 7 by default.
fn hashing_settings() -> (Vec<usize>, usize) {
    let sizes = std::env::var("SYNCGC_BENCH_GRAPH_HASHING")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("SYNCGC_BENCH_GRAPH_HASHING: numbers separated by commas")
        })
        .collect();
    let rounds = std::env::var("SYNCGC_BENCH_GRAPH_ROUNDS")
        .map(|r| r.parse().expect("SYNCGC_BENCH_GRAPH_ROUNDS: a number"))
        .unwrap_or(7usize)
        .max(1);
    (sizes, rounds)
}

/// Keyed hashing's table and targets: at each size, apply and removal with the process's key ÷
/// with the unkeyed mix (the same objects, the same run), and a flood of uids colliding under
/// that mix ÷ random uids.
pub fn hashing(report: &mut Report) {
    let (sizes, rounds) = hashing_settings();
    let measured: Vec<Hashing> = sizes.iter().map(|n| hashing_at(*n, rounds)).collect();
    let unkeyed = unkeyed_flood();
    let header: Vec<&'static str> = std::iter::once("")
        .chain(
            measured
                .iter()
                .map(|h| -> &'static str { format!("{} objects", thousands(h.n)).leak() }),
        )
        .collect();
    let table = report.table(
        format!(
            "Uids hashed with the process's key: the graph against the same graph hashing with \
             the unkeyed mix it replaced (kept in the bench as the baseline), with the \
             sequential uids of the table above (which that mix spreads perfectly) and with \
             random uids (as the apiserver's are); and uids made to collide under that mix (one \
             hash, so one shard and one bucket: security review, finding 3) against random uids, \
             both with the key. A tenth owners with 9 dependents each; per object, in the \
             thread's CPU time, the median of {rounds} rounds; in each, the two graphs built \
             and torn down in turns, 2,000 objects at a time (A B, B A, ...); each ratio is \
             the median of the rounds' ratios, with the two medians after it"
        ),
        header,
    );
    let ns = |d: Duration| format!("{} ns", d.as_nanos());
    let row = |name: &str, each: &dyn Fn(&Hashing) -> String| {
        std::iter::once(name.to_owned())
            .chain(measured.iter().map(each))
            .collect::<Vec<_>>()
    };
    let times = |p: &Paired| format!("{} × ({} ÷ {})", round(p.ratio), ns(p.a), ns(p.b));
    table.rows.extend([
        row("apply, keyed", &|h| ns(h.apply.a)),
        row("apply, unkeyed", &|h| ns(h.apply.b)),
        row("apply, keyed ÷ unkeyed", &|h| {
            format!("{} ×", round(h.apply.ratio))
        }),
        row("removal, keyed ÷ unkeyed", &|h| times(&h.remove)),
        row("apply, random uids, keyed ÷ unkeyed", &|h| {
            times(&h.random_apply)
        }),
        row("removal, random uids, keyed ÷ unkeyed", &|h| {
            times(&h.random_remove)
        }),
        row("the bare uid map (above), keyed ÷ unkeyed", &|h| {
            times(&h.bare_index)
        }),
        row("apply, keyed, colliding ÷ random uids", &|h| {
            times(&h.flood_apply)
        }),
        row("removal, keyed, colliding ÷ random uids", &|h| {
            times(&h.flood_remove)
        }),
    ]);
    // What the key stops, at one size: a row of its own.
    let mut stops = vec![
        format!(
            "what the key stops: apply, unkeyed, colliding ÷ random uids, {} objects (one \
             round)",
            thousands(UNKEYED_FLOOD)
        ),
        format!(
            "{} × ({} ÷ {})",
            round(unkeyed.ratio),
            ns(unkeyed.a),
            ns(unkeyed.b)
        ),
    ];
    stops.resize(measured.len() + 1, String::new());
    table.rows.push(stops);
    for h in &measured {
        let n = thousands(h.n);
        report.target(
            format!("graph: apply per object, keyed ÷ unkeyed hash, {n} objects"),
            h.apply.ratio,
            Goal::AtMost(1.05),
            "×",
        );
        report.target(
            format!("graph: apply per object, random uids, keyed ÷ unkeyed hash, {n} objects"),
            h.random_apply.ratio,
            Goal::AtMost(1.05),
            "×",
        );
        report.target(
            format!("graph: apply per object, colliding ÷ random uids, {n} objects"),
            h.flood_apply.ratio,
            Goal::AtMost(1.05),
            "×",
        );
    }
}
