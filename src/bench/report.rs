//! Reading a benchmark job's output (every rank's result, rank 0's progress and allreduce
//! timings), and the report built from all slot counts: speed-up and scaling efficiency
//! against the smallest count, as a table and as the `--json` document.

use std::fmt::Write as _;

use serde::Serialize;

use super::plan::{Placed, Step};
use super::{Framework, Settings, IMAGE_SIZE};
use crate::check::Bandwidth;
use crate::input::shown;

/// A job whose output does not prove that every planned rank trained.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bench at {slots} slot(s): {detail}")]
pub struct JobError {
    pub slots: u32,
    pub detail: String,
}

/// One rank's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankResult {
    pub rank: u32,
    pub host: String,
    pub images_per_sec: f64,
    /// Wall time of the timed steps.
    pub seconds: f64,
}

/// One slot count's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub slots: u32,
    pub hosts: Vec<Placed>,
    pub images_per_sec: f64,
    pub images_per_sec_per_slot: f64,
    /// Images/s against the smallest slot count's.
    pub speedup: f64,
    /// Per-slot images/s against the smallest slot count's, 1.0 = perfect.
    pub efficiency: f64,
    pub ranks: Vec<RankResult>,
    /// Rank 0's allreduce timings on the same ranks (none with a single rank).
    pub allreduce: Vec<Bandwidth>,
}

/// The whole benchmark, as printed and as `--json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub cluster: String,
    pub framework: Framework,
    pub model: String,
    pub image_size: u32,
    /// Images per slot per step.
    pub batch_size: u32,
    pub warmup_steps: u32,
    pub steps: u32,
    /// The slot count speed-up and efficiency are measured against.
    pub baseline_slots: u32,
    pub rows: Vec<Row>,
    /// The SVG chart written to the cluster's folder.
    pub chart: Option<String>,
}

/// Rank 0's progress line: `HVD_BENCH_STEP phase=measure step=3 steps=10 elapsed=12.5`.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub warmup: bool,
    pub step: u32,
    pub steps: u32,
    pub elapsed: f64,
}

/// The words after `marker` in a line (horovodrun prefixes `[rank]<stdout>:`).
fn marked<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let at = line.find(marker)?;
    let rest = &line[at + marker.len()..];
    // `HVD_BENCH_RANKX` is not the marker.
    (rest.is_empty() || rest.starts_with(' ')).then_some(rest)
}

fn field<'a>(words: &'a str, key: &str) -> Option<&'a str> {
    words
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// A finite, non-negative decimal.
fn figure(words: &str, key: &str) -> Option<f64> {
    field(words, key)?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

fn whole(words: &str, key: &str) -> Option<u32> {
    let v = field(words, key)?;
    v.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| v.parse().ok())
        .flatten()
}

/// Rank 0's progress, from one output line (anything else: `None`).
pub fn progress_line(line: &str) -> Option<Progress> {
    let w = marked(line, "HVD_BENCH_STEP")?;
    Some(Progress {
        warmup: field(w, "phase")? == "warmup",
        step: whole(w, "step")?,
        steps: whole(w, "steps")?,
        elapsed: figure(w, "elapsed")?,
    })
}

/// Reads one job's output: every planned rank must report once, from the host the plan put
/// it on, in a world of the planned size. Lines without a marker are ignored; a marked line
/// that cannot be read is an error that shows it (shortened, escaped).
pub fn read_job(step: &Step, out: &str) -> Result<Row, JobError> {
    let fail = |detail: String| JobError {
        slots: step.slots,
        detail,
    };
    let mut ranks: Vec<RankResult> = Vec::new();
    let mut allreduce = Vec::new();
    for line in out.lines() {
        if let Some(w) = marked(line, "HVD_BENCH_RANK") {
            let unreadable = || {
                fail(format!(
                    "an unreadable result line `{}`",
                    shown(line.trim())
                ))
            };
            let (Some(rank), Some(size), Some(host), Some(ips), Some(seconds)) = (
                whole(w, "rank"),
                whole(w, "size"),
                field(w, "host"),
                figure(w, "images_per_sec"),
                figure(w, "seconds"),
            ) else {
                return Err(unreadable());
            };
            if size != step.slots {
                return Err(fail(format!(
                    "rank {rank} ran in a world of {size} rank(s), not {}",
                    step.slots
                )));
            }
            let Some(planned) = step.host_of(rank) else {
                return Err(fail(format!(
                    "a result from rank {rank}, beyond the {} planned",
                    step.slots
                )));
            };
            if host != planned {
                return Err(fail(format!(
                    "rank {rank} ran on `{}`, not on {planned} as planned",
                    shown(host)
                )));
            }
            if ranks.iter().any(|r| r.rank == rank) {
                return Err(fail(format!("rank {rank} reported twice")));
            }
            ranks.push(RankResult {
                rank,
                host: host.to_string(),
                images_per_sec: ips,
                seconds,
            });
        } else if let Some(w) = marked(line, "HVD_BW") {
            let (Some(size), Some(ms), Some(alg), Some(bus)) = (
                whole(w, "size_mib"),
                figure(w, "ms"),
                figure(w, "algbw_mibps"),
                figure(w, "busbw_mibps"),
            ) else {
                return Err(fail(format!(
                    "an unreadable allreduce line `{}`",
                    shown(line.trim())
                )));
            };
            if field(w, "ok") != Some("True") {
                return Err(fail(format!("allreduce of {size} MiB gave a wrong sum")));
            }
            allreduce.push(Bandwidth {
                size_mib: size,
                ms,
                algbw_mibps: alg,
                busbw_mibps: bus,
            });
        }
    }
    let missing: Vec<String> = (0..step.slots)
        .filter(|r| !ranks.iter().any(|x| x.rank == *r))
        .map(|r| format!("rank {r} (on {})", step.host_of(r).unwrap_or("-")))
        .collect();
    if !missing.is_empty() {
        return Err(fail(format!(
            "{} of {} rank(s) reported no result: {}",
            missing.len(),
            step.slots,
            missing.join(", ")
        )));
    }
    ranks.sort_by_key(|r| r.rank);
    let total: f64 = ranks.iter().map(|r| r.images_per_sec).sum();
    Ok(Row {
        slots: step.slots,
        hosts: step.hosts.clone(),
        images_per_sec: total,
        images_per_sec_per_slot: total / f64::from(step.slots.max(1)),
        speedup: 1.0,
        efficiency: 1.0,
        ranks,
        allreduce,
    })
}

/// Speed-up and efficiency of every row against the first (the smallest slot count).
pub fn relate(rows: &mut [Row]) {
    let Some(base) = rows.first().map(|r| r.images_per_sec_per_slot) else {
        return;
    };
    let base_total = rows[0].images_per_sec;
    for r in rows.iter_mut() {
        (r.speedup, r.efficiency) = if base > 0.0 && base_total > 0.0 {
            (
                r.images_per_sec / base_total,
                r.images_per_sec_per_slot / base,
            )
        } else {
            (0.0, 0.0)
        };
    }
}

impl Report {
    pub fn new(cluster: &str, framework: Framework, s: &Settings, mut rows: Vec<Row>) -> Report {
        rows.sort_by_key(|r| r.slots);
        relate(&mut rows);
        Report {
            cluster: cluster.to_string(),
            framework,
            model: s.model.to_string(),
            image_size: IMAGE_SIZE,
            batch_size: s.batch_size,
            warmup_steps: s.warmup,
            steps: s.steps,
            baseline_slots: rows.first().map_or(1, |r| r.slots),
            rows,
            chart: None,
        }
    }

    /// The table people read.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "bench `{}`: {}, {} on {s}x{s} synthetic images, batch {} per slot, {} step(s) timed after {} warm-up",
            self.cluster,
            self.framework,
            self.model,
            self.batch_size,
            self.steps,
            self.warmup_steps,
            s = self.image_size,
        );
        if self.baseline_slots != 1 {
            let _ = writeln!(
                t,
                "speed-up and efficiency against {} slot(s), the smallest count run",
                self.baseline_slots
            );
        }
        let _ = writeln!(
            t,
            "{:>5}  {:>5}  {:>10}  {:>10}  {:>8}  {:>10}",
            "slots", "hosts", "images/s", "per slot", "speed-up", "efficiency"
        );
        for r in &self.rows {
            let _ = writeln!(
                t,
                "{:>5}  {:>5}  {:>10.1}  {:>10.1}  {:>7.2}x  {:>9.1}%",
                r.slots,
                r.hosts.len(),
                r.images_per_sec,
                r.images_per_sec_per_slot,
                r.speedup,
                r.efficiency * 100.0
            );
        }
        let mut sizes: Vec<u32> = self
            .rows
            .iter()
            .flat_map(|r| r.allreduce.iter().map(|b| b.size_mib))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        if !sizes.is_empty() {
            let _ = writeln!(
                t,
                "allreduce bus bandwidth, MiB/s (rank 0, on the same slots):"
            );
            let mut head = format!("{:>5}", "slots");
            for s in &sizes {
                let _ = write!(head, "  {:>10}", format!("{s} MiB"));
            }
            let _ = writeln!(t, "{head}");
            for r in &self.rows {
                let mut line = format!("{:>5}", r.slots);
                for s in &sizes {
                    match r.allreduce.iter().find(|b| b.size_mib == *s) {
                        Some(b) => {
                            let _ = write!(line, "  {:>10.1}", b.busbw_mibps);
                        }
                        None => {
                            let _ = write!(line, "  {:>10}", "-");
                        }
                    }
                }
                let _ = writeln!(t, "{line}");
            }
        }
        if let Some(chart) = &self.chart {
            let _ = writeln!(t, "chart: {chart}");
        }
        t
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::plan::plan;
    use crate::bench::Raw;
    use crate::render::HostSlots;
    use std::net::IpAddr;

    fn two_nodes() -> Vec<Step> {
        let hosts = [
            HostSlots::new("c-master", IpAddr::from([10, 0, 0, 1]), 1).unwrap(),
            HostSlots::new("c-worker-1", IpAddr::from([10, 0, 0, 2]), 2).unwrap(),
        ];
        plan(&hosts, None).unwrap()
    }

    fn rank_line(rank: u32, size: u32, host: &str, ips: f64) -> String {
        format!(
            "[{rank}]<stdout>:HVD_BENCH_RANK rank={rank} size={size} host={host} framework=tensorflow images_per_sec={ips} seconds=2.5\n"
        )
    }

    #[test]
    fn reads_every_rank_with_noise_around() {
        let steps = two_nodes();
        let three = &steps[2];
        let out = format!(
            "Warning: something\n[1]<stderr>:2026-11-23 tensorflow noise HVD_BENCH_RANKS\n{}{}\ngarbage \u{1b}[31m\n{}[0]<stdout>:HVD_BENCH_STEP phase=measure step=2 steps=10 elapsed=3.5\n[0]<stdout>:HVD_BW size_mib=16 ms=80.0 algbw_mibps=200.0 busbw_mibps=266.7 ok=True\n",
            rank_line(2, 3, "c-worker-1", 30.0),
            rank_line(0, 3, "c-master", 40.0),
            rank_line(1, 3, "c-worker-1", 30.5),
        );
        let row = read_job(three, &out).unwrap();
        assert_eq!(
            row.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!((row.images_per_sec - 100.5).abs() < 1e-9);
        assert!((row.images_per_sec_per_slot - 33.5).abs() < 1e-9);
        assert_eq!(row.allreduce.len(), 1);
        assert_eq!(row.allreduce[0].busbw_mibps, 266.7);
    }

    #[test]
    fn a_missing_rank_is_named_with_its_host() {
        let steps = two_nodes();
        let out = rank_line(0, 3, "c-master", 40.0) + &rank_line(1, 3, "c-worker-1", 30.0);
        let e = read_job(&steps[2], &out).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bench at 3 slot(s): 1 of 3 rank(s) reported no result: rank 2 (on c-worker-1)"
        );
        let e = read_job(&steps[2], "nothing at all\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("3 of 3 rank(s) reported no result: rank 0 (on c-master), rank 1 (on c-worker-1), rank 2 (on c-worker-1)"),
            "{e}"
        );
    }

    #[test]
    fn results_that_do_not_match_the_plan_are_refused() {
        let steps = two_nodes();
        let two = &steps[1];
        let cases = [
            (
                rank_line(0, 2, "c-master", 1.0) + &rank_line(1, 2, "c-master", 1.0),
                "rank 1 ran on `c-master`, not on c-worker-1 as planned",
            ),
            (
                rank_line(0, 2, "c-master", 1.0) + &rank_line(0, 2, "c-master", 1.0),
                "rank 0 reported twice",
            ),
            (
                rank_line(0, 1, "c-master", 1.0),
                "a world of 1 rank(s), not 2",
            ),
            (
                rank_line(5, 2, "c-master", 1.0),
                "rank 5, beyond the 2 planned",
            ),
            (
                rank_line(0, 2, "c-master\u{1b}]0;x", 1.0),
                "ran on `c-master\\u{1b}]0;x`",
            ),
        ];
        for (out, says) in cases {
            let e = read_job(two, &out).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn garbage_in_marked_lines_is_an_error_not_a_number() {
        let steps = two_nodes();
        for bad in [
            "HVD_BENCH_RANK rank=0 size=1 host=c-master images_per_sec=nan seconds=1",
            "HVD_BENCH_RANK rank=0 size=1 host=c-master images_per_sec=inf seconds=1",
            "HVD_BENCH_RANK rank=0 size=1 host=c-master images_per_sec=1e999 seconds=1",
            "HVD_BENCH_RANK rank=0 size=1 host=c-master images_per_sec=-3 seconds=1",
            "HVD_BENCH_RANK rank=+0 size=1 host=c-master images_per_sec=3 seconds=1",
            "HVD_BENCH_RANK rank=0 size=1 images_per_sec=3 seconds=1",
            "HVD_BENCH_RANK",
            "HVD_BW size_mib=x ms=1 algbw_mibps=1 busbw_mibps=1 ok=True",
        ] {
            let e = read_job(&steps[0], bad).unwrap_err().to_string();
            assert!(e.contains("unreadable"), "{bad}: {e}");
        }
        let e = read_job(
            &steps[0],
            &format!(
                "{}HVD_BW size_mib=1 ms=1 algbw_mibps=1 busbw_mibps=1 ok=False",
                rank_line(0, 1, "c-master", 1.0)
            ),
        )
        .unwrap_err();
        assert!(e.to_string().contains("wrong sum"), "{e}");
        let long = format!("HVD_BENCH_RANK {}", "x".repeat(10_000));
        let e = read_job(&steps[0], &long).unwrap_err().to_string();
        assert!(e.len() < 200, "{e}");
    }

    #[test]
    fn progress_lines() {
        assert_eq!(
            progress_line("[0]<stdout>:HVD_BENCH_STEP phase=warmup step=1 steps=2 elapsed=9.25"),
            Some(Progress {
                warmup: true,
                step: 1,
                steps: 2,
                elapsed: 9.25
            })
        );
        assert_eq!(progress_line("HVD_BENCH_STEP phase=measure step=x"), None);
        assert_eq!(progress_line("HVD_BENCH_RANK rank=0"), None);
    }

    /// A row with only slots and images/s set (also for the chart's tests).
    pub(crate) fn row(slots: u32, ips: f64) -> Row {
        Row {
            slots,
            hosts: vec![],
            images_per_sec: ips,
            images_per_sec_per_slot: ips / f64::from(slots),
            speedup: 0.0,
            efficiency: 0.0,
            ranks: vec![],
            allreduce: vec![],
        }
    }

    #[test]
    fn speedup_and_efficiency_like_the_notebook() {
        // ~1,300 img/s on 1 GPU, ~5,800 on 4, ~15,300 on 12.
        let s = Settings::parse(&Raw::default()).unwrap();
        let r = Report::new(
            "c",
            Framework::Tensorflow,
            &s,
            vec![row(12, 15_300.0), row(1, 1_300.0), row(4, 5_800.0)],
        );
        assert_eq!(r.baseline_slots, 1);
        let got: Vec<(u32, String, String)> = r
            .rows
            .iter()
            .map(|x| {
                (
                    x.slots,
                    format!("{:.2}", x.speedup),
                    format!("{:.3}", x.efficiency),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, "1.00".into(), "1.000".into()),
                (4, "4.46".into(), "1.115".into()),
                (12, "11.77".into(), "0.981".into())
            ]
        );
        // A zero baseline gives zeros, never NaN or infinity.
        let mut zero = vec![row(1, 0.0), row(2, 10.0)];
        relate(&mut zero);
        assert_eq!((zero[1].speedup, zero[1].efficiency), (0.0, 0.0));
    }

    #[test]
    fn the_table_has_its_columns_and_bandwidth() {
        let s = Settings::parse(&Raw {
            slots: Some("2,3"),
            ..Raw::default()
        })
        .unwrap();
        let mut three = row(3, 90.0);
        three.allreduce.push(Bandwidth {
            size_mib: 16,
            ms: 1.0,
            algbw_mibps: 2.0,
            busbw_mibps: 123.45,
        });
        let mut r = Report::new("c", Framework::Pytorch, &s, vec![row(2, 80.0), three]);
        r.chart = Some("/state/c/bench.svg".into());
        let t = r.table();
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("bench `c`: pytorch, resnet8 on 32x32"),
            "{t}"
        );
        assert!(lines[1].contains("against 2 slot(s)"), "{t}");
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            [
                "slots",
                "hosts",
                "images/s",
                "per slot",
                "speed-up",
                "efficiency"
            ]
            .iter()
            .flat_map(|c| c.split(' '))
            .collect::<Vec<_>>()
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["2", "0", "80.0", "40.0", "1.00x", "100.0%"]
        );
        assert_eq!(
            lines[4].split_whitespace().collect::<Vec<_>>(),
            ["3", "0", "90.0", "30.0", "1.12x", "75.0%"]
        );
        assert!(t.contains("   2           -\n"), "{t}");
        assert!(t.contains("   3       123.5\n"), "{t}");
        assert!(t.ends_with("chart: /state/c/bench.svg\n"), "{t}");
        let json: serde_json::Value =
            serde_json::from_str(&crate::cmd::output::to_json(&r)).unwrap();
        assert_eq!(json["framework"], "pytorch");
        assert_eq!(json["baseline_slots"], 2);
        assert_eq!(json["rows"][1]["allreduce"][0]["size_mib"], 16);
    }
}
