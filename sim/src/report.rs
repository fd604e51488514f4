//! Human output: the text report printed after a run, and the `--report` HTML page with
//! SVG plots drawn by plotters.

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::metrics::{GetResult, Metrics, Percentiles};
use crate::scenario::{Fault, Scenario, SpreadPolicy};
use crate::world::{self, RunOptions, RunResult};

const MIB: f64 = 1024.0 * 1024.0;

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn secs(p: &Percentiles) -> String {
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
        "  block reads           {}: found {}, absent {} (false {}), busy {}, unavailable {}",
        sum.reads.started,
        sum.reads.found,
        sum.reads.absent,
        sum.reads.false_absent,
        sum.reads.busy,
        sum.reads.unavailable
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
        "  busiest holder        {} of a block's first reads on average, {} at most (1/{} = {}); per round {}{}",
        pct(sum.first_read_share.mean_top),
        pct(sum.first_read_share.max_top),
        s.cluster.close_group,
        pct(1.0 / f64::from(s.cluster.close_group)),
        pct(sum.first_read_share.round_mean_top),
        reference(&s.reference.busiest_share)
    );
    let _ = writeln!(o, "  read time             {}", secs(&sum.read_ms));
    let _ = writeln!(o, "  download time         {}", secs(&sum.download_ms));
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
    let _ = writeln!(
        o,
        "  bytes served per node max {:.1} MiB, mean {:.1} MiB",
        sum.node_bytes.max as f64 / MIB,
        sum.node_bytes.mean as f64 / MIB
    );
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

/// The side-by-side table of several arms run with the same seed.
pub fn comparison(rows: &[(Scenario, RunResult)]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "  {:<36} {:>11} {:>7} {:>7} {:>6} {:>7} {:>9} {:>9} {:>9} {:>10}",
        "arm (same seed)",
        "downloads",
        "done",
        "absent",
        "busy",
        "unavail",
        "false NF",
        "busiest",
        "/round",
        "dl p50"
    );
    for (s, r) in rows {
        let sum = &r.summary;
        let _ = writeln!(
            o,
            "  {:<36} {:>11} {:>7} {:>7} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9.1}s",
            s.name,
            format!("{}/{}", sum.downloads.completed, sum.downloads.started),
            pct(sum.downloads.completed as f64 / sum.downloads.started.max(1) as f64),
            sum.reads.absent,
            sum.reads.busy,
            sum.reads.unavailable,
            sum.reads.false_not_found,
            pct(sum.first_read_share.mean_top),
            pct(sum.first_read_share.round_mean_top),
            sum.download_ms.p50 / 1e3
        );
    }
    let _ = writeln!(
        o,
        "  (absent/busy/unavail count block reads; false NF = reads of stored blocks the client told its user \"not found\";\n   busiest = mean over blocks of the busiest holder's share of first reads; /round = the same per round)"
    );
    o
}

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

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn policy_color(p: SpreadPolicy) -> RGBColor {
    match p {
        SpreadPolicy::Nearest => PALETTE[3],
        SpreadPolicy::Uniform => PALETTE[0],
        SpreadPolicy::LoadAware => PALETTE[2],
    }
}

type PlotResult = Result<(), Box<dyn std::error::Error>>;

fn bytes_per_node(svg: &mut String, m: &Metrics) -> PlotResult {
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
        .y_desc("MiB served (cumulative)")
        .draw()?;
    let nodes = m.node_bytes.len();
    // Every node as a thin grey line (the top ten in colour), so the busiest stand out.
    let mut order: Vec<usize> = (0..nodes).collect();
    order.sort_by_key(|&n| std::cmp::Reverse(m.node_bytes[n]));
    let top: Vec<usize> = order.iter().copied().take(10).collect();
    let line = |n: usize| series.iter().map(move |(t, b)| (*t, b[n] as f64 / MIB));
    for &n in order.iter().skip(10).take(500) {
        chart.draw_series(LineSeries::new(line(n), RGBColor(200, 200, 200)))?;
    }
    for (i, &n) in top.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(line(n), color.stroke_width(2)))?
            .label(format!("node {n}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
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
            "Busiest holder's share of a block's first reads, per spreading policy",
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
        .y_desc("share of first GETs (%)")
        .draw()?;
    let fair = 100.0 / f64::from(s.cluster.close_group);
    chart
        .draw_series(LineSeries::new(
            [(-0.5, fair), (blocks as f64 - 0.5, fair)],
            BLACK.mix(0.5),
        ))?
        .label(format!("1/{} (perfect spread)", s.cluster.close_group))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.5)));
    for (p, m) in variants {
        let color = policy_color(*p);
        let pts: Vec<(f64, f64)> = m
            .first_gets
            .iter()
            .enumerate()
            .filter_map(|(b, row)| {
                let total: u64 = row.iter().map(|&c| u64::from(c)).sum();
                let top = row.iter().copied().max().unwrap_or(0);
                (total > 0).then(|| (b as f64, 100.0 * f64::from(top) / total as f64))
            })
            .collect();
        let mean = if pts.is_empty() {
            0.0
        } else {
            pts.iter().map(|p| p.1).sum::<f64>() / pts.len() as f64
        };
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(format!("{p} (mean {mean:.1}%)"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart.draw_series(
            pts.iter()
                .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
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
        .caption("Block read time, CDF", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_desc("read time (s, log scale)")
        .y_desc("reads finished (%)")
        .draw()?;
    for (p, m) in variants {
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
        let width = if *p == main { 3 } else { 1 };
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(width)))?
            .label(format!(
                "{p}{}",
                if *p == main { " (this scenario)" } else { "" }
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
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
        .caption("Outcome counts (log scale)", ("sans-serif", 20))
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
        .x_desc("count")
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
    Ok(())
}

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
            Ok(()) => plots.push((title.to_string(), svg)),
            Err(e) => plots.push((
                title.to_string(),
                format!("<p>plot failed: {}</p>", escape(&e.to_string())),
            )),
        }
    };
    add("Bytes served per node", &|svg| {
        bytes_per_node(svg, &r.metrics)
    });
    add("First-read share per block", &|svg| {
        first_read_share(svg, s, variants)
    });
    add("Read-time CDF", &|svg| {
        read_cdf(svg, variants, s.client.spread)
    });
    add("Outcome counts", &|svg| outcome_counts(svg, &r.metrics));
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>peerblock sim: {name}</title>\
         <style>body{{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}}\
         pre{{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:13px}}\
         figure{{margin:2em 0}}</style></head><body>\n\
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
    for (title, svg) in plots {
        let _ = write!(
            o,
            "<figure><figcaption><h2>{}</h2></figcaption>\n{svg}\n</figure>\n",
            escape(&title)
        );
    }
    o.push_str(
        "<p>Policies other than this scenario's were re-run with the same seed and faults for \
         the comparison plots. See docs/sim.md for the model and every metric.</p>\n</body></html>\n",
    );
    o
}
