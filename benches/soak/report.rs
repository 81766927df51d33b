//! The results: what the run created, deleted and collected, the observer's counts, the faults
//! injected, the replicas' memory and the violations, in Markdown, printed and written to one
//! results file.

use std::fmt::Write as _;
use std::time::Duration;

use crate::faults::FAULTS;
use crate::observer::{
    COLLECTED_WITHIN, LEAK, LEAK_AFTER, Observer, STEADY_AFTER, STEADY_GROWTH, STEADY_JUDGED,
    steady_growth,
};
use crate::workload::Counts;
use crate::{Options, Tally};

/// The shortest life whose memory the results list.
const MEMORY_REPORTED: Duration = Duration::from_secs(300);

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn percentile(values: &mut [Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort();
    let at = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[at]
}

pub fn report(
    options: &Options,
    took: Duration,
    observer: &Observer,
    counts: &Counts,
    tally: &Tally,
) -> String {
    let mut out = String::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name\t: ").map(str::to_owned))
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(out, "# Soak");
    let _ = writeln!(
        out,
        "\n{} on {cpu} ({cores} cores), Kubernetes v1.20.2, syncgc at commit {}; \
         `hack/soak.sh {}{}` ran {:.0} minutes: two replicas, {}.\n",
        jiff::Timestamp::now().strftime("%Y-%m-%d"),
        env!("SYNCGC_COMMIT"),
        syncgc::duration::format(options.duration),
        if options.steady { " --steady" } else { "" },
        took.as_secs_f64() / 60.0,
        if options.steady {
            "standalone throughout; the first never faulted (it takes the lease first, and the \
             faults aimed at a replica strike the other)"
        } else {
            "cooperative for the first half and standalone for the second"
        }
    );
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| trees created and deleted | {} |", counts.trees);
    let _ = writeln!(out, "| objects in them | {} |", counts.objects);
    for (how, n) in &counts.deletes {
        let _ = writeln!(out, "| owners deleted {how} | {n} |");
    }
    let mut collected = counts.collected.clone();
    let _ = writeln!(
        out,
        "| trees collected, p50 / p99 / max after the owner's DELETE | {} / {:.1}s / {:.1}s / {:.1}s |",
        collected.len(),
        percentile(&mut collected, 0.5).as_secs_f64(),
        percentile(&mut collected, 0.99).as_secs_f64(),
        percentile(&mut collected, 1.0).as_secs_f64()
    );
    let mut releases = observer.releases.clone();
    let _ = writeln!(
        out,
        "| armed owners released, p50 / p99 / max from the last of their tree seen gone to their own DELETED event | {} / {:.0}ms / {:.0}ms / {:.0}ms |",
        releases.len(),
        percentile(&mut releases, 0.5).as_secs_f64() * 1000.0,
        percentile(&mut releases, 0.99).as_secs_f64() * 1000.0,
        percentile(&mut releases, 1.0).as_secs_f64() * 1000.0
    );
    let _ = writeln!(
        out,
        "| objects deleted by the workload once the tree they stayed from was collected | {} |",
        counts.retired
    );
    let _ = writeln!(
        out,
        "| trees kube-controller-manager collected after {}s or not by the half's end (cooperative, unarmed: not syncgc's) | {} |",
        COLLECTED_WITHIN.as_secs(),
        counts.late_by_kcm
    );
    let _ = writeln!(
        out,
        "| deletions checked in the apiserver's order (early release, waves, survivors) | {} |",
        observer.checked
    );
    let _ = writeln!(
        out,
        "| deletions only a relist showed (survivors checked) | {} |",
        observer.unordered
    );
    let _ = writeln!(out, "| observer relists | {} |", observer.relists);
    let _ = writeln!(
        out,
        "| owners released by their deadline with dependents left | {} |",
        observer.released_by_deadline
    );
    let _ = writeln!(
        out,
        "| owners armed by the collector as their unarmed DELETE ran (not synchronous) | {} |",
        observer.armed_as_deleted
    );
    let _ = writeln!(out, "| webhook probes | {} |", tally.webhook_probes);
    let mut handovers = tally.handovers.clone();
    let _ = writeln!(
        out,
        "| lease handovers, p50 / max | {} / {:.1}s / {:.1}s |",
        handovers.len(),
        percentile(&mut handovers, 0.5).as_secs_f64(),
        percentile(&mut handovers, 1.0).as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| 429s the replicas met while squeezed (items queued again) | {} |",
        tally.throttled
    );
    let _ = writeln!(
        out,
        "| watches listed again after 410 Gone, behind a compaction | {} |",
        tally.relisted
    );
    let _ = writeln!(
        out,
        "| **violations** | **{}** |",
        observer.violations.len() + tally.webhook_failures.len()
    );
    let _ = writeln!(out, "\n| fault | injected |\n|---|---|");
    for fault in FAULTS {
        let _ = writeln!(
            out,
            "| {fault:?} | {} |",
            tally.faults.get(&fault).copied().unwrap_or(0)
        );
    }
    let lives = &tally.memory;
    let _ = writeln!(
        out,
        "\n{} replica processes; resident memory of those that lived {} minutes or more \
         (a leak: over {} minutes, growth by more than {} MiB and {:.0}%):\n\n\
         | half | replica | life min | MiB at 1 min | max MiB | MiB at end | growth MiB/h |\n\
         |---|---|---|---|---|---|---|",
        lives.len(),
        MEMORY_REPORTED.as_secs() / 60,
        LEAK_AFTER.as_secs() / 60,
        LEAK.0 >> 20,
        LEAK.1 * 100.0
    );
    for life in lives {
        let (Some((_, from)), Some((age, to)), Some((growth, over))) =
            (life.settled(), life.last(), life.growth())
        else {
            continue;
        };
        if age < MEMORY_REPORTED {
            continue;
        }
        let max = life.samples.iter().map(|(_, b)| *b).max().unwrap_or(0);
        let per_hour = growth as f64 / 1048576.0 / over.as_secs_f64().max(1.0) * 3600.0;
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {per_hour:+.1} |",
            life.half,
            life.replica,
            age.as_secs_f64() / 60.0,
            mib(from),
            mib(max),
            mib(to)
        );
    }
    if options.steady {
        match steady_growth(lives) {
            Some((life, per_hour)) => {
                let _ = writeln!(
                    out,
                    "\nThe never-faulted replica ({}, pid {}, {} samples over {:.0} minutes): \
                     **{:+.2} MiB per hour** after its first {} minutes (least-squares slope; \
                     target ≤ {:.0} MiB per hour, judged over {} minutes or more).",
                    life.replica,
                    life.pid,
                    life.samples.len(),
                    life.last().map_or(0.0, |(age, _)| age.as_secs_f64() / 60.0),
                    per_hour / 1048576.0,
                    STEADY_AFTER.as_secs() / 60,
                    STEADY_GROWTH / 1048576.0,
                    STEADY_JUDGED.as_secs() / 60
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "\nThe never-faulted replica lived less than {} minutes: no growth to report.",
                    STEADY_AFTER.as_secs() / 60
                );
            }
        }
    }
    if !observer.violations.is_empty() || !tally.webhook_failures.is_empty() {
        let _ = writeln!(out, "\n## Violations\n");
        for v in observer.violations.iter().chain(&tally.webhook_failures) {
            let _ = writeln!(out, "- {v}");
        }
    }
    if !tally.fault_errors.is_empty() {
        let _ = writeln!(out, "\n## Faults that could not be injected\n");
        for e in &tally.fault_errors {
            let _ = writeln!(out, "- {e}");
        }
    }
    out
}
