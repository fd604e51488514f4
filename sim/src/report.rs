//! Human output: the text report printed after a run, and the `--report` HTML page with
//! SVG plots drawn by plotters.

use std::fmt::Write as _;

use plotters::coord::combinators::{BindKeyPoints, LogCoord, WithKeyPoints};
use plotters::prelude::*;

use crate::metrics::{GetResult, Metrics, Percentiles};
use crate::scenario::{Fault, Scenario, SpreadPolicy};
use crate::world::{self, RunOptions, RunResult};

const MIB: f64 = 1024.0 * 1024.0;

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Percentiles in seconds, or "n/a" when nothing was measured (`samples == 0`): a run where
/// no download completed has no download time, not a time of 0 s.
fn secs(p: &Percentiles, samples: usize) -> String {
    if samples == 0 {
        return "n/a (none completed)".into();
    }
    format!(
        "p50 {:.2} s, p95 {:.2} s, p99 {:.2} s, max {:.2} s",
        p.p50 / 1e3,
        p.p95 / 1e3,
        p.p99 / 1e3,
        p.max / 1e3
    )
}

/// The text report printed after a single run.
pub fn text(s: &Scenario, r: &RunResult) -> String {
    let m = &r.metrics;
    let sum = &r.summary;
    let mut o = String::new();
    let l = &s.listener;
    let rd = &s.readers;
    let _ = writeln!(o, "peerblock sim: {}  (seed {})", sum.scenario, sum.seed);
    if !s.description.is_empty() {
        let _ = writeln!(o, "  {}", s.description);
    }
    let _ = writeln!(
        o,
        "  cluster    {} nodes ({} behind NAT), {} Mbit/s upload each, close group {}",
        s.cluster.nodes, s.cluster.nat_nodes, s.cluster.upload_mbps, s.cluster.close_group
    );
    let _ = writeln!(
        o,
        "  listener   {} sessions ({} per source), {} channels, {} requests; when full: {}",
        l.max_sessions, l.max_sessions_per_source, l.max_channels, l.max_requests, l.when_full
    );
    let _ = writeln!(
        o,
        "  readers    {} × {} rounds of a {} MiB file in {} blocks; spread {}, refusal waits {}, breaker {}",
        rd.count,
        rd.rounds,
        s.file.size_mib,
        s.blocks(),
        s.client.spread,
        s.client.max_refusal_waits,
        if s.breaker.enabled { "on" } else { "off" }
    );
    let _ = writeln!(o);
    let started = sum.downloads.started.max(1);
    let reference = |v: &str| {
        if v.is_empty() {
            String::new()
        } else {
            format!("   reference: {v}")
        }
    };
    let _ = writeln!(
        o,
        "  downloads completed   {}/{} ({}){}",
        sum.downloads.completed,
        sum.downloads.started,
        pct(sum.downloads.completed as f64 / started as f64),
        reference(&s.reference.completed)
    );
    if sum.downloads.completed_per_round.len() > 1 {
        let per: Vec<String> = m
            .rounds
            .iter()
            .map(|(st, done)| format!("{done}/{st}"))
            .collect();
        let _ = writeln!(o, "  per round             {}", per.join("  "));
    }
    let _ = writeln!(
        o,
        "  block reads           {}: found {}, absent {} (false {}), busy {}, unavailable {}{}",
        sum.reads.started,
        sum.reads.found,
        sum.reads.absent,
        sum.reads.false_absent,
        sum.reads.busy,
        sum.reads.unavailable,
        if sum.reads.invalid > 0 {
            format!(", invalid (every copy corrupt) {}", sum.reads.invalid)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        o,
        "  reported not found    {} for stored blocks{}",
        sum.reads.false_not_found,
        if s.client.reports_unavailable_as_not_found {
            " (this client reports unavailable as \"not found\", like the reference)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "  busiest holder        {} of a block's first GETs on average, {} at most (1/{} = {}); per round {}, of the first two GETs {}{}",
        pct(sum.first_read_share.mean_top),
        pct(sum.first_read_share.max_top),
        s.cluster.close_group,
        pct(1.0 / f64::from(s.cluster.close_group)),
        pct(sum.first_read_share.round_mean_top),
        pct(sum.first_read_share.two_gets_round_mean_top),
        reference(&s.reference.busiest_share)
    );
    let _ = writeln!(
        o,
        "  read time             {}",
        secs(&sum.read_ms, m.read_ns.len())
    );
    let _ = writeln!(
        o,
        "  download time         {}",
        secs(&sum.download_ms, m.download_ns.len())
    );
    let gets: Vec<String> = GetResult::ALL
        .iter()
        .filter(|g| m.get_count(**g) > 0)
        .map(|g| format!("{} {}", g.as_str(), m.get_count(*g)))
        .collect();
    let _ = writeln!(
        o,
        "  GETs                  {} ({} hedged): {}",
        sum.gets.total,
        sum.gets.hedged,
        gets.join(", ")
    );
    if !sum.limit_hits.is_empty() {
        let hits: Vec<String> = sum
            .limit_hits
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(o, "  turned away ({})  {}", l.when_full, hits.join(", "));
    }
    let _ = writeln!(
        o,
        "  refusals {}, breaker opens {}",
        sum.refusals, sum.breaker_opens
    );
    for line in explanations(s, m) {
        let _ = writeln!(o, "    {line}");
    }
    let _ = writeln!(
        o,
        "  bytes served per node max {:.1} MiB, mean {:.1} MiB",
        sum.node_bytes.max as f64 / MIB,
        sum.node_bytes.mean as f64 / MIB
    );
    if let Some(og) = &sum.origin {
        let mib = |b: u64| b as f64 / MIB;
        let per_round: Vec<String> = og
            .egress_bytes_per_round
            .iter()
            .map(|&b| format!("{:.1}", mib(b)))
            .collect();
        let waves: Vec<String> = og
            .all_readers_ms_per_round
            .iter()
            .map(|&ms| format!("{:.2} s", ms / 1e3))
            .collect();
        let _ = writeln!(
            o,
            "  origin egress         {:.1} MiB in {} requests = {:.2} × the file; per round {} MiB; readers' own {}",
            mib(og.egress_bytes),
            og.requests,
            og.egress_per_file,
            per_round.join(" / "),
            og.reader_fetches
        );
        let _ = writeln!(
            o,
            "  relays                {} relayed misses: {} upstream fetches led, {} single-flight joins, {} refused full; {} asked of the parent, {} of them on to the origin; {} declined at the hop bound",
            og.relays,
            og.flights_led,
            og.single_flight_joins,
            og.flights_full,
            og.parent_fetches,
            og.parent_fallbacks,
            og.hop_declines
        );
        let _ = writeln!(
            o,
            "  relay caches          {} hits, {} evictions; busiest node / mean {:.2}; all readers done per round {}",
            og.cache_hits,
            og.cache_evictions,
            og.busiest_per_mean,
            waves.join(" / ")
        );
    }
    if !s.reference.note.is_empty() {
        let _ = writeln!(o, "  reference note        {}", s.reference.note);
    }
    let wall = sum.wall_seconds.max(1e-6);
    let _ = writeln!(
        o,
        "  run                   {} events, {:.1} s simulated in {:.3} s wall ({:.0}:1, {:.0} events/s), trace {}",
        sum.events,
        sum.sim_seconds,
        sum.wall_seconds,
        sum.sim_seconds / wall,
        sum.events as f64 / wall,
        sum.trace_digest
    );
    o
}

/// Notes under the counts a reader would misread: why a healthy cluster shows failed dials
/// and breaker opens, and how "turned away" differs from "refusals".
pub fn explanations(s: &Scenario, m: &Metrics) -> Vec<String> {
    let mut v = Vec::new();
    let failed = m.get_count(GetResult::DialFailed);
    if !m.limit_hits.is_empty() {
        v.push(format!(
            "\"turned away\" counts dials and requests the nodes' listeners turned away, by the \
             limit that was full; {}",
            if s.listener.when_full == crate::scenario::WhenFull::Refuse {
                "each reached its reader as an explicit refusal (\"refusals\", which the read \
                 waits out)"
            } else {
                "a silent listener answers nothing, so the reader sees a failed dial or a \
                 closed stream, never a refusal (\"refusals\" stays 0)"
            }
        ));
    }
    if s.cluster.nat_nodes > 0 && (failed > 0 || m.breaker_opens > 0) {
        v.push(format!(
            "dial_failed {failed} and breaker opens {} are expected in a healthy cluster: {} of the \
             {} nodes are behind NAT; lookups return them like any node, a reader's dial to one \
             is never answered, and each reader pays that once per NAT'd node it tries before \
             its breaker and the {} s failure cooldown route around it",
            m.breaker_opens, s.cluster.nat_nodes, s.cluster.nodes, s.client.failed_cooldown_secs
        ));
    }
    v
}

/// `61–66%`, or `100%` for a one-point range.
fn range_pct([lo, hi]: [f64; 2]) -> String {
    if lo == hi {
        format!("{lo:.0}%")
    } else {
        format!("{lo:.0}–{hi:.0}%")
    }
}

/// Our figure (a fraction) as a percentage, with `!` appended when a reference range is
/// given and the figure (rounded as printed) falls outside it.
pub fn checked_pct(x: f64, range: Option<[f64; 2]>) -> String {
    let shown = (x * 1000.0).round() / 10.0;
    let out = range.is_some_and(|[lo, hi]| shown < lo || shown > hi);
    format!("{}{}", pct(x), if out { "!" } else { "" })
}

/// The side-by-side table of several arms run with the same seed, with the reference's
/// figures per arm and our figures outside them marked.
pub fn comparison(rows: &[(Scenario, RunResult)]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "  {:<36} {:>11} {:>7} {:>7} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10}   reference: done, 2 GETs",
        "arm (same seed)",
        "downloads",
        "done",
        "absent",
        "busy",
        "unavail",
        "false NF",
        "busiest",
        "/round",
        "2 GETs",
        "dl p50",
    );
    for (s, r) in rows {
        let sum = &r.summary;
        let rf = &s.reference;
        let reference = match (rf.completed_pct, rf.busiest_pct) {
            (None, None) => "–".to_string(),
            (c, b) => format!(
                "{}, {}",
                c.map_or("–".into(), range_pct),
                b.map_or("–".into(), range_pct)
            ),
        };
        let _ = writeln!(
            o,
            "  {:<36} {:>11} {:>7} {:>7} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10}   {}",
            s.name,
            format!("{}/{}", sum.downloads.completed, sum.downloads.started),
            checked_pct(
                sum.downloads.completed as f64 / sum.downloads.started.max(1) as f64,
                rf.completed_pct
            ),
            sum.reads.absent,
            sum.reads.busy,
            sum.reads.unavailable,
            sum.reads.false_not_found,
            pct(sum.first_read_share.mean_top),
            pct(sum.first_read_share.round_mean_top),
            checked_pct(sum.first_read_share.two_gets_round_mean_top, rf.busiest_pct),
            if sum.downloads.completed == 0 {
                "n/a".to_string()
            } else {
                format!("{:.1}s", sum.download_ms.p50 / 1e3)
            },
            reference
        );
    }
    o.push_str(FOOTNOTE);
    o
}

/// What the comparison table's columns mean, printed under it.
pub const FOOTNOTE: &str = "  (absent/busy/unavail count block reads; false NF = reads of stored blocks the client told its user \"not found\";
   busiest = mean over blocks of the busiest holder's share of first GETs; /round = the same per round of readers;
   2 GETs = the same per round over each read's first two GETs (its first and its hedge), the statistic the reference's
   \"share of first reads\" matches (docs/sim.md); reference = its range for done and 2 GETs (\"–\": none); ! = outside it)
";

/// Re-runs the scenario under each spreading policy (same seed and faults) for the
/// comparison plots, with progress on stderr unless `quiet`.
pub fn policy_variants(
    s: &Scenario,
    seed: u64,
    extra: &[Fault],
    quiet: bool,
) -> Vec<(SpreadPolicy, Metrics)> {
    let mut steps = crate::progress::Steps::new("report", SpreadPolicy::ALL.len() as u64, quiet);
    SpreadPolicy::ALL
        .iter()
        .map(|&p| {
            steps.begin(&format!("re-running with spread = \"{p}\" for the plots"));
            let mut v = s.clone();
            v.client.spread = p;
            let r = world::run(
                &v,
                RunOptions {
                    seed,
                    extra_faults: extra.to_vec(),
                    ..RunOptions::default()
                },
            );
            steps.end();
            (p, r.metrics)
        })
        .collect()
}

/// Ten distinct colours (Tableau 10), one per node shown and per policy.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn policy_color(p: SpreadPolicy) -> RGBColor {
    match p {
        SpreadPolicy::Nearest => PALETTE[3],
        SpreadPolicy::Uniform => PALETTE[0],
        SpreadPolicy::LoadAware => PALETTE[2],
    }
}

/// A plot's legend, drawn in HTML under the plot so that it never covers the data: label
/// and colour per entry.
pub type Legend = Vec<(String, RGBColor)>;

type PlotResult = Result<Legend, Box<dyn std::error::Error>>;

/// Tick label for seconds on a log axis: enough decimals to tell 0.01 from 0.001.
pub fn tick_secs(x: f64) -> String {
    if x >= 1.0 {
        format!("{x:.0}")
    } else {
        let decimals = (-x.log10()).ceil().max(1.0) as usize;
        format!("{x:.decimals$}")
    }
}

/// The 1-2-5 values (0.001, 0.002, 0.005, 0.01, ..) within `lo..=hi`.
pub fn ticks_125(lo: f64, hi: f64) -> Vec<f64> {
    let mut v = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let x = decade * m;
            if x >= lo && x <= hi {
                v.push(x);
            }
        }
        decade *= 10.0;
    }
    v
}

/// A log-scale axis over `lo..hi` whose ticks are the 1-2-5 values, so that a range below
/// one second is labelled (0.05, 0.1, 0.2, ..) rather than left bare.
fn log_axis(lo: f64, hi: f64) -> WithKeyPoints<LogCoord<f64>> {
    let axis: LogCoord<f64> = (lo..hi).log_scale().into();
    axis.with_key_points(ticks_125(lo, hi))
}

fn bytes_per_node(svg: &mut String, m: &Metrics, timeline: &[crate::faults::Step]) -> PlotResult {
    let root = SVGBackend::with_string(svg, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let series = &m.node_bytes_series;
    let tmax = series.last().map_or(1.0, |(t, _)| t.max(1.0));
    let ymax = m.node_bytes.iter().copied().max().unwrap_or(1) as f64 / MIB * 1.05 + 1.0;
    let mut chart = ChartBuilder::on(&root)
        .caption("Bytes served per node over time", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..tmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc("simulated time (s)")
        .y_desc("bytes served, cumulative (MiB)")
        .draw()?;
    let nodes = m.node_bytes.len();
    // Every node as a thin grey line (the top ten each in its own colour), so the busiest
    // stand out.
    let mut order: Vec<usize> = (0..nodes).collect();
    order.sort_by_key(|&n| std::cmp::Reverse(m.node_bytes[n]));
    let top: Vec<usize> = order.iter().copied().take(PALETTE.len()).collect();
    let line = |n: usize| series.iter().map(move |(t, b)| (*t, b[n] as f64 / MIB));
    for &n in order.iter().skip(top.len()).take(500) {
        chart.draw_series(LineSeries::new(line(n), RGBColor(200, 200, 200)))?;
    }
    let mut legend = Legend::new();
    for (i, &n) in top.iter().enumerate() {
        let color = PALETTE[i];
        chart.draw_series(LineSeries::new(line(n), color.stroke_width(2)))?;
        legend.push((format!("node {n}"), color));
    }
    // Fault events as vertical marks on the time axis, labelled with what happened.
    let marked: Vec<&crate::faults::Step> = timeline
        .iter()
        .filter(|st| (st.at.as_nanos() as f64 / 1e9) <= tmax)
        .take(40)
        .collect();
    for st in &marked {
        let t = st.at.as_nanos() as f64 / 1e9;
        chart.draw_series(LineSeries::new(
            [(t, 0.0), (t, ymax)],
            BLACK.mix(0.35).stroke_width(1),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("{} n{}", st.act.name(), st.node),
            (t, ymax * 0.97),
            ("sans-serif", 11).into_font(),
        )))?;
    }
    if !marked.is_empty() {
        legend.push((
            "fault event (vertical mark)".into(),
            RGBColor(150, 150, 150),
        ));
    }
    root.present()?;
    Ok(legend)
}

fn first_read_share(
    svg: &mut String,
    s: &Scenario,
    variants: &[(SpreadPolicy, Metrics)],
) -> PlotResult {
    let root = SVGBackend::with_string(svg, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let blocks = s.blocks() as usize;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Busiest holder's share of first reads, per block and spreading policy",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(blocks as f64 - 0.5), 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_labels(blocks.min(26))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .x_desc("block")
        .y_desc("busiest holder's share of first reads (%)")
        .draw()?;
    let fair = 100.0 / f64::from(s.cluster.close_group);
    chart.draw_series(LineSeries::new(
        [(-0.5, fair), (blocks as f64 - 0.5, fair)],
        BLACK.mix(0.5),
    ))?;
    let mut legend = vec![(
        format!("1/{} = perfect spread (line)", s.cluster.close_group),
        RGBColor(128, 128, 128),
    )];
    let n = variants.len().max(1) as f64;
    for (i, (p, m)) in variants.iter().enumerate() {
        let color = policy_color(*p);
        // Each policy's points sit side by side within the block's slot: blocks are
        // separate measurements, not a curve.
        let offset = (i as f64 - (n - 1.0) / 2.0) * 0.6 / n;
        let pts: Vec<(f64, f64)> = m
            .first_gets
            .iter()
            .enumerate()
            .filter_map(|(b, row)| {
                let total: u64 = row.iter().map(|&c| u64::from(c)).sum();
                let top = row.iter().copied().max().unwrap_or(0);
                (total > 0).then(|| (b as f64 + offset, 100.0 * f64::from(top) / total as f64))
            })
            .collect();
        let mean = if pts.is_empty() {
            0.0
        } else {
            pts.iter().map(|p| p.1).sum::<f64>() / pts.len() as f64
        };
        chart.draw_series(LineSeries::new(
            [(-0.5, mean), (blocks as f64 - 0.5, mean)],
            color.mix(0.5).stroke_width(1),
        ))?;
        chart.draw_series(
            pts.iter()
                .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
        )?;
        legend.push((
            format!("{p}: dots per block, line at the mean {mean:.1}%"),
            color,
        ));
    }
    root.present()?;
    Ok(legend)
}

fn read_cdf(
    svg: &mut String,
    variants: &[(SpreadPolicy, Metrics)],
    main: SpreadPolicy,
) -> PlotResult {
    let root = SVGBackend::with_string(svg, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let all = || variants.iter().flat_map(|(_, m)| m.read_ns.iter().copied());
    let xmax = all().max().unwrap_or(1) as f64 / 1e9 * 1.05 + 0.01;
    let xmin = (all().min().unwrap_or(0) as f64 / 1e9 / 1.5).max(0.001);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Block read time, CDF per spreading policy",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(log_axis(xmin, xmax), 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_label_formatter(&|x| tick_secs(*x))
        .x_desc("block read time (s, log scale)")
        .y_desc("block reads finished (%)")
        .draw()?;
    let mut legend = Legend::new();
    // This scenario's policy first and widest, the others over it: curves that coincide
    // stay visible, and each policy's markers tell them apart.
    let mut ordered: Vec<&(SpreadPolicy, Metrics)> = variants.iter().collect();
    ordered.sort_by_key(|(p, _)| *p != main);
    for (k, (p, m)) in ordered.into_iter().enumerate() {
        let mut v = m.read_ns.clone();
        v.sort_unstable();
        let n = v.len().max(1) as f64;
        let step = (v.len() / 400).max(1);
        let mut pts: Vec<(f64, f64)> = v
            .iter()
            .enumerate()
            .step_by(step)
            .map(|(i, &ns)| ((ns as f64 / 1e9).max(xmin), 100.0 * (i + 1) as f64 / n))
            .collect();
        if let Some(&last) = v.last() {
            pts.push(((last as f64 / 1e9).max(xmin), 100.0));
        }
        let color = policy_color(*p);
        let width = if *p == main { 5 } else { 2 };
        let style = if *p == main {
            color.mix(0.45).stroke_width(width)
        } else {
            color.stroke_width(width)
        };
        chart.draw_series(LineSeries::new(pts.clone(), style))?;
        // Markers at every tenth of the reads, staggered per policy.
        let marks = pts
            .iter()
            .enumerate()
            .filter(|(i, _)| (i + k * 13) % 40 == 0)
            .map(|(_, &pt)| pt);
        match p {
            SpreadPolicy::Nearest => {
                chart.draw_series(marks.map(|pt| Circle::new(pt, 4, color.filled())))?;
            }
            SpreadPolicy::Uniform => {
                chart.draw_series(marks.map(|pt| TriangleMarker::new(pt, 5, color.filled())))?;
            }
            SpreadPolicy::LoadAware => {
                chart.draw_series(marks.map(|pt| Cross::new(pt, 5, color.stroke_width(2))))?;
            }
        }
        let shape = match p {
            SpreadPolicy::Nearest => "●",
            SpreadPolicy::Uniform => "▲",
            SpreadPolicy::LoadAware => "✕",
        };
        legend.push((
            format!(
                "{shape} {p}{}",
                if *p == main {
                    " (this scenario, wide pale line)"
                } else {
                    ""
                }
            ),
            color,
        ));
    }
    root.present()?;
    Ok(legend)
}

fn outcome_counts(svg: &mut String, m: &Metrics) -> PlotResult {
    let mut bars: Vec<(String, u64, RGBColor)> = vec![
        ("read: found".into(), m.reads_found, PALETTE[2]),
        ("read: absent".into(), m.reads_absent, PALETTE[3]),
        ("read: busy".into(), m.reads_busy, PALETTE[1]),
        ("read: unavailable".into(), m.reads_unavailable, PALETTE[4]),
    ];
    for g in GetResult::ALL {
        bars.push((format!("GET: {}", g.as_str()), m.get_count(g), PALETTE[0]));
    }
    let n = bars.len();
    let root = SVGBackend::with_string(svg, (900, 60 + 32 * n as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let xmax = bars.iter().map(|b| b.1).max().unwrap_or(1).max(1) as f64 * 3.0;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    // Horizontal bars, first category on top.
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Block read and GET outcomes (log scale)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(130)
        .build_cartesian_2d((0.8f64..xmax).log_scale(), -0.5f64..(n as f64 - 0.5))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[labels.len() - 1 - i as usize].clone()
            } else {
                String::new()
            }
        })
        .x_desc("count (log scale)")
        .draw()?;
    let row = |i: usize| (n - 1 - i) as f64;
    chart.draw_series(
        bars.iter()
            .enumerate()
            .filter(|(_, b)| b.1 > 0)
            .map(|(i, b)| {
                Rectangle::new(
                    [(0.8, row(i) - 0.35), (b.1 as f64, row(i) + 0.35)],
                    b.2.filled(),
                )
            }),
    )?;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        Text::new(
            b.1.to_string(),
            ((b.1 as f64).max(0.8) * 1.1, row(i) + 0.15),
            ("sans-serif", 12).into_font(),
        )
    }))?;
    root.present()?;
    Ok(vec![
        ("block read outcomes".into(), PALETTE[2]),
        ("GET outcomes".into(), PALETTE[0]),
    ])
}

/// What to look at in each plot, printed under it.
const CAPTIONS: [&str; 4] = [
    "Each coloured line is one of the ten nodes that served the most; grey lines are the \
     others. A steep line is a node serving at full upload; a flat stretch is an idle or \
     faulted node (vertical marks are the fault events). A fair spread shows many lines \
     rising together; one line far above the rest is a hot holder.",
    "One dot per block and policy: of the reads' first GETs for that block, the share that \
     went to its busiest holder. Dots near the grey 1/close-group line mean the first reads \
     were spread evenly; dots near 100 % mean every reader asked the same holder first.",
    "How long block reads took, as the share of reads finished by each time (log axis). A \
     curve further left is faster; a long flat tail is reads waiting out timeouts, refusals \
     or retries. Policies other than this scenario's were re-run with the same seed.",
    "How this run's block reads ended and how its GETs ended (log scale). Anything but \
     \"found\" among the reads is a read the user saw fail; GET failures are normal when \
     the read recovered from them (hedges, dead or NAT'd nodes, refusals).",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The self-contained HTML report: the text report, the comparison table if any, and four
/// SVG plots.
pub fn html(
    s: &Scenario,
    r: &RunResult,
    variants: &[(SpreadPolicy, Metrics)],
    compared: &str,
) -> String {
    let mut plots = Vec::new();
    let mut add = |title: &str, f: &dyn Fn(&mut String) -> PlotResult| {
        let mut svg = String::new();
        match f(&mut svg) {
            Ok(legend) => plots.push((title.to_string(), svg, legend)),
            Err(e) => plots.push((
                title.to_string(),
                format!("<p>plot failed: {}</p>", escape(&e.to_string())),
                Legend::new(),
            )),
        }
    };
    add("Bytes served per node", &|svg| {
        bytes_per_node(svg, &r.metrics, &r.timeline)
    });
    add("Busiest holder's share of first reads", &|svg| {
        first_read_share(svg, s, variants)
    });
    add("Block read time", &|svg| {
        read_cdf(svg, variants, s.client.spread)
    });
    add("Outcomes", &|svg| outcome_counts(svg, &r.metrics));
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>peerblock sim: {name}</title>\
         <style>body{{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}}\
         pre{{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:13px}}\
         figure{{margin:2em 0}}.legend{{font-size:13px;margin:.3em 0}}\
         .key{{margin-right:1.2em;white-space:nowrap}}figcaption{{color:#555;font-size:14px}}</style></head><body>\n\
         <h1>peerblock sim: {name}</h1>\n<pre>{text}</pre>\n",
        name = escape(&s.name),
        text = escape(&text(s, r))
    );
    if !compared.is_empty() {
        let _ = write!(
            o,
            "<h2>Arms compared</h2>\n<pre>{}</pre>\n",
            escape(compared)
        );
    }
    for ((title, svg, legend), caption) in plots.into_iter().zip(CAPTIONS) {
        let keys: Vec<String> = legend
            .iter()
            .map(|(label, c)| {
                format!(
                    "<span class=\"key\"><span style=\"color:rgb({},{},{})\">■</span> {}</span>",
                    c.0,
                    c.1,
                    c.2,
                    escape(label)
                )
            })
            .collect();
        let _ = write!(
            o,
            "<figure><h2>{}</h2>\n{svg}\n<div class=\"legend\">{}</div>\n\
             <figcaption>{}</figcaption></figure>\n",
            escape(&title),
            keys.join(" "),
            escape(caption)
        );
    }
    o.push_str(
        "<p>Policies other than this scenario's were re-run with the same seed and faults for \
         the comparison plots. See docs/sim.md for the model and every metric.</p>\n</body></html>\n",
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_with_no_samples_is_na_not_zero_seconds() {
        assert_eq!(secs(&Percentiles::default(), 0), "n/a (none completed)");
        let p = Percentiles::of(&[2_000_000_000]);
        assert_eq!(
            secs(&p, 1),
            "p50 2.00 s, p95 2.00 s, p99 2.00 s, max 2.00 s"
        );
    }

    #[test]
    fn a_figure_outside_the_reference_range_is_marked() {
        assert_eq!(checked_pct(0.539, Some([61.0, 66.0])), "53.9%!");
        assert_eq!(checked_pct(0.635, Some([61.0, 66.0])), "63.5%");
        // Rounded as printed: 66.04 % shows as 66.0 %, inside.
        assert_eq!(checked_pct(0.6604, Some([61.0, 66.0])), "66.0%");
        assert_eq!(checked_pct(0.968, None), "96.8%");
        assert_eq!(range_pct([100.0, 100.0]), "100%");
        assert_eq!(range_pct([18.0, 21.0]), "18–21%");
    }

    #[test]
    fn log_axis_ticks_go_below_one_second() {
        assert_eq!(ticks_125(0.03, 3.0), vec![0.05, 0.1, 0.2, 0.5, 1.0, 2.0]);
        let labels: Vec<String> = [0.005, 0.05, 0.2, 1.0, 20.0]
            .into_iter()
            .map(tick_secs)
            .collect();
        assert_eq!(labels, ["0.005", "0.05", "0.2", "1", "20"]);
    }

    #[test]
    fn the_top_ten_nodes_each_get_their_own_colour() {
        let mut seen = PALETTE.to_vec();
        seen.sort_by_key(|c| (c.0, c.1, c.2));
        seen.dedup();
        assert_eq!(seen.len(), 10);
    }

    #[test]
    fn nat_failures_and_turned_away_are_explained_only_when_they_occur() {
        let mut s = Scenario::default();
        let mut m = Metrics::default();
        assert!(explanations(&s, &m).is_empty());
        s.cluster.nat_nodes = 18;
        m.get_results[GetResult::DialFailed as usize] = 40;
        m.breaker_opens = 35;
        let notes = explanations(&s, &m).join("\n");
        assert!(
            notes.contains("18 of the 60 nodes are behind NAT"),
            "{notes}"
        );
        assert!(
            notes.contains("dial_failed 40 and breaker opens 35"),
            "{notes}"
        );
        m.limit_hits.insert("sessions", 3);
        s.listener.when_full = crate::scenario::WhenFull::Silent;
        let notes = explanations(&s, &m).join("\n");
        assert!(notes.contains("\"refusals\" stays 0"), "{notes}");
    }
}
