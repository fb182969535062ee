//! A lease run's figures: accuracy and convergence from its series of fleet admitted / target,
//! and the table they are printed in (apart from the model, which is long enough by itself).

use super::{LeaseRun, LeaseScenario};

pub(super) fn measure(
    sc: &LeaseScenario,
    n: usize,
    lease_ms: f64,
    dt: f64,
    series: &[f64],
    calls: u64,
) -> LeaseRun {
    let at = |s: f64| ((s / dt).round() as usize).min(series.len());
    let end = sc.duration_s;
    let outage = sc.outage.map(|o| (o.from_s, o.to_s));
    // Events and the windows after them, in time order.
    let mut events = vec![0.0];
    events.extend(sc.shift_at_s.filter(|&s| s < end));
    if let Some((a, b)) = outage {
        events.push(a);
        events.push(b);
    }
    events.sort_by(f64::total_cmp);
    let next_event = |t: f64| events.iter().copied().find(|&e| e > t).unwrap_or(end);
    let within = |v: f64| (v - 1.0).abs() <= sc.tolerance;
    // Convergence from `from`: the first step after which every step up to the next event
    // stays within the band.
    let converge = |from: f64| -> Option<f64> {
        let (a, b) = (at(from), at(next_event(from)));
        let bad = series[a..b].iter().rposition(|&v| !within(v));
        match bad {
            None => Some(0.0),
            Some(j) if a + j + 1 < b => Some((j + 1) as f64 * dt),
            Some(_) => None,
        }
    };
    let settled = |t: f64| {
        !events.iter().any(|&e| t >= e && t < e + 3.0)
            && !outage.is_some_and(|(a, b)| t >= a && t < b)
    };
    let mut seconds = Vec::new();
    let mut s = 0.0;
    while s + 1.0 <= end {
        if settled(s) && settled(s + 1.0 - dt) {
            let w = &series[at(s)..at(s + 1.0)];
            seconds.push(w.iter().sum::<f64>() / w.len().max(1) as f64);
        }
        s += 1.0;
    }
    let accuracy = seconds.iter().sum::<f64>() / seconds.len().max(1) as f64;
    let worst_second = seconds
        .iter()
        .copied()
        .max_by(|a, b| (a - 1.0).abs().total_cmp(&(b - 1.0).abs()))
        .unwrap_or(f64::NAN);
    let interval = lease_ms / 1000.0;
    let mean = |a: usize, b: usize| series[a..b].iter().sum::<f64>() / (b - a).max(1) as f64;
    LeaseRun {
        instances: n,
        lease_ms,
        accuracy,
        worst_second,
        converge_start_s: converge(0.0),
        converge_shift_s: sc.shift_at_s.filter(|&s| s < end).and_then(converge),
        converge_outage_s: outage.and_then(|(_, b)| converge(b)),
        outage_accuracy: outage.map(|(a, b)| mean(at(a), at(b))),
        peak_after_outage: outage.map(|(_, b)| {
            series[at(b)..at(b + 2.0 * interval)]
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max)
        }),
        store_calls: calls,
    }
}

/// The runs as a Markdown table.
pub fn table(runs: &[LeaseRun]) -> String {
    let mut s = TABLE_HEADER.to_string();
    for r in runs {
        s.push_str(&row(r));
    }
    s
}

/// The table's header (see [`row`]).
pub const TABLE_HEADER: &str =
    "| instances | lease ms | accuracy | worst second | converge: start \
     | after shift | after outage | during outage | peak after outage | store calls |\n\
     |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

/// One run as a row of [`TABLE_HEADER`]'s table.
pub fn row(r: &LeaseRun) -> String {
    let opt = |v: Option<f64>| v.map_or("never".into(), |v| format!("{v:.2}"));
    let iv = |v: Option<f64>| {
        v.map_or("never".into(), |v| {
            format!("{v:.2} s ({:.1} iv)", v / (r.lease_ms / 1000.0))
        })
    };
    format!(
        "| {} | {} | {:.3} | {:.3} | {} | {} | {} | {} | {} | {} |\n",
        r.instances,
        r.lease_ms,
        r.accuracy,
        r.worst_second,
        iv(r.converge_start_s),
        iv(r.converge_shift_s),
        iv(r.converge_outage_s),
        opt(r.outage_accuracy),
        opt(r.peak_after_outage),
        r.store_calls,
    )
}
