//! Offered-load shapes and arrival processes: *when* each request is meant to be sent.
//!
//! Why precomputed intended times: an open-loop generator decides the send times from the shape
//! alone, never from how fast the target answers; otherwise a slow target slows the generator
//! and the queueing it should measure disappears (Gil Tene, "How NOT to Measure Latency", 2015 —
//! coordinated omission; Schroeder, Wierman & Harchol-Balter, "Open Versus Closed: A Cautionary
//! Tale", NSDI 2006).

use std::time::Duration;

use crate::units::parse_duration;

/// A piece of a [`RateShape::Stages`] list: the rate goes linearly from `from` to `to` over
/// `duration` (equal for a flat stage).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    /// Requests/s at the start of the stage.
    pub from: f64,
    /// Requests/s at its end.
    pub to: f64,
    /// How long it lasts.
    pub duration: Duration,
}

/// Offered requests per second as a function of time since the start of the run.
#[derive(Debug, Clone, PartialEq)]
pub enum RateShape {
    /// `rate` throughout.
    Constant(f64),
    /// Linear from `from` to `to` over the whole run.
    Ramp {
        /// Start rate.
        from: f64,
        /// End rate.
        to: f64,
    },
    /// `before` until `at`, then `after`.
    Step {
        /// Rate before the step.
        before: f64,
        /// Rate after it.
        after: f64,
        /// When it happens.
        at: Duration,
    },
    /// `base`, except `peak` during `[at, at + lasting)`.
    Spike {
        /// Normal rate.
        base: f64,
        /// Rate during the spike.
        peak: f64,
        /// Spike start.
        at: Duration,
        /// Spike length.
        lasting: Duration,
    },
    /// Consecutive stages; the rate is 0 after the last one.
    Stages(Vec<Stage>),
}

/// What `--rate` accepts, for error messages.
pub const RATE_ACCEPTS: &str =
    "RATE (constant, e.g. 200), ramp:FROM..TO, step:BEFORE..AFTER@TIME, \
     spike:BASE..PEAK@TIME+LENGTH, or stages:R/DUR,FROM..TO/DUR,... (rates in requests/s, \
     durations like 10s or 500ms)";

/// Highest rate accepted, requests/s: beyond this one loopback client measures itself, not the
/// target.
pub const MAX_RATE: f64 = 100_000.0;

fn rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && (0.0..=MAX_RATE).contains(&r) => Ok(r),
        _ => Err(format!("rate {s:?} is not a number in 0..=100000")),
    }
}

fn pair(s: &str) -> Result<(f64, f64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("{s:?} should be FROM..TO"))?;
    Ok((rate(a)?, rate(b)?))
}

impl RateShape {
    /// Parses the `--rate` syntax ([`RATE_ACCEPTS`]).
    pub fn parse(s: &str) -> Result<RateShape, String> {
        let bad = |why: String| format!("invalid --rate {s:?}: {why}; expected {RATE_ACCEPTS}");
        let (kind, rest) = s.split_once(':').unwrap_or(("", s));
        let shape = match kind {
            "" => RateShape::Constant(rate(rest).map_err(bad)?),
            "ramp" => {
                let (from, to) = pair(rest).map_err(bad)?;
                RateShape::Ramp { from, to }
            }
            "step" => {
                let (rates, at) = rest
                    .split_once('@')
                    .ok_or_else(|| bad("step needs @TIME".into()))?;
                let (before, after) = pair(rates).map_err(bad)?;
                RateShape::Step {
                    before,
                    after,
                    at: parse_duration(at).map_err(bad)?,
                }
            }
            "spike" => {
                let (rates, when) = rest
                    .split_once('@')
                    .ok_or_else(|| bad("spike needs @TIME+LENGTH".into()))?;
                let (at, lasting) = when
                    .split_once('+')
                    .ok_or_else(|| bad("spike needs @TIME+LENGTH".into()))?;
                let (base, peak) = pair(rates).map_err(bad)?;
                RateShape::Spike {
                    base,
                    peak,
                    at: parse_duration(at).map_err(bad)?,
                    lasting: parse_duration(lasting).map_err(bad)?,
                }
            }
            "stages" => {
                let mut stages = Vec::new();
                for part in rest.split(',') {
                    let (r, d) = part
                        .split_once('/')
                        .ok_or_else(|| bad(format!("stage {part:?} should be RATE/DURATION")))?;
                    let (from, to) = if r.contains("..") {
                        pair(r).map_err(bad)?
                    } else {
                        let x = rate(r).map_err(bad)?;
                        (x, x)
                    };
                    let duration = parse_duration(d).map_err(bad)?;
                    stages.push(Stage { from, to, duration });
                }
                if stages.iter().all(|s| s.duration.is_zero()) {
                    return Err(bad("stages last no time".into()));
                }
                RateShape::Stages(stages)
            }
            other => return Err(bad(format!("unknown shape {other:?}"))),
        };
        Ok(shape)
    }

    /// The natural length of the shape, if it has one (the sum of the stages).
    pub fn natural_duration(&self) -> Option<Duration> {
        match self {
            RateShape::Stages(stages) => Some(stages.iter().map(|s| s.duration).sum()),
            _ => None,
        }
    }

    /// The highest rate the shape reaches.
    pub fn peak(&self) -> f64 {
        match self {
            RateShape::Constant(r) => *r,
            RateShape::Ramp { from, to } => from.max(*to),
            RateShape::Step { before, after, .. } => before.max(*after),
            RateShape::Spike { base, peak, .. } => base.max(*peak),
            RateShape::Stages(s) => s.iter().map(|s| s.from.max(s.to)).fold(0.0, f64::max),
        }
    }

    /// Requests/s at `t` seconds into a run of `total` seconds.
    pub fn rate_at(&self, t: f64, total: f64) -> f64 {
        match self {
            RateShape::Constant(r) => *r,
            RateShape::Ramp { from, to } => {
                let f = if total > 0.0 {
                    (t / total).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                from + (to - from) * f
            }
            RateShape::Step { before, after, at } => {
                if t < at.as_secs_f64() {
                    *before
                } else {
                    *after
                }
            }
            RateShape::Spike {
                base,
                peak,
                at,
                lasting,
            } => {
                let a = at.as_secs_f64();
                if t >= a && t < a + lasting.as_secs_f64() {
                    *peak
                } else {
                    *base
                }
            }
            RateShape::Stages(stages) => {
                let mut start = 0.0;
                for s in stages {
                    let d = s.duration.as_secs_f64();
                    if t < start + d {
                        let f = if d > 0.0 { (t - start) / d } else { 0.0 };
                        return s.from + (s.to - s.from) * f;
                    }
                    start += d;
                }
                0.0
            }
        }
    }
}

/// How requests are spaced within the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arrivals {
    /// Exponential gaps (a Poisson process): independent users; the default.
    #[default]
    Poisson,
    /// Evenly spaced, `1 / rate` apart.
    Uniform,
}

/// Integration step of [`Schedule`]: the rate is sampled at least every 10 ms, so steps and
/// spikes take effect within 10 ms and ramps are followed closely.
const PIECE: f64 = 0.01;

/// The sequence of intended send times (seconds from the start) of a shape over a run.
pub struct Schedule {
    shape: RateShape,
    arrivals: Arrivals,
    total: f64,
    t: f64,
    rng: fastrand::Rng,
}

impl Schedule {
    /// A schedule over `total` with a seeded random source.
    pub fn new(shape: RateShape, arrivals: Arrivals, total: Duration, seed: u64) -> Self {
        Schedule {
            shape,
            arrivals,
            total: total.as_secs_f64(),
            t: 0.0,
            rng: fastrand::Rng::with_seed(seed),
        }
    }
}

impl Iterator for Schedule {
    type Item = f64;

    /// The next arrival: the time at which the integral of the rate since the previous one
    /// reaches a unit-mean draw (1 for uniform, Exp(1) for Poisson), integrated piecewise.
    fn next(&mut self) -> Option<f64> {
        let mut need = match self.arrivals {
            Arrivals::Uniform => 1.0,
            Arrivals::Poisson => -(1.0 - self.rng.f64()).ln(),
        };
        let mut t = self.t;
        while t < self.total {
            let end = (t + PIECE).min(self.total);
            let r = self.shape.rate_at(t, self.total);
            if r > 0.0 {
                let gap = need / r;
                if t + gap <= end {
                    self.t = t + gap;
                    return Some(self.t);
                }
                need -= r * (end - t);
            }
            t = end;
        }
        self.t = self.total;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_between(shape: &RateShape, arrivals: Arrivals, secs: u64, a: f64, b: f64) -> usize {
        Schedule::new(shape.clone(), arrivals, Duration::from_secs(secs), 3)
            .filter(|t| *t >= a && *t < b)
            .count()
    }

    #[test]
    fn parses_every_shape() {
        assert_eq!(RateShape::parse("200"), Ok(RateShape::Constant(200.0)));
        assert_eq!(
            RateShape::parse("ramp:50..1000"),
            Ok(RateShape::Ramp {
                from: 50.0,
                to: 1000.0
            })
        );
        assert!(matches!(
            RateShape::parse("step:100..800@10s"),
            Ok(RateShape::Step { at, .. }) if at == Duration::from_secs(10)
        ));
        assert!(matches!(
            RateShape::parse("spike:100..1000@2s+500ms"),
            Ok(RateShape::Spike { lasting, .. }) if lasting == Duration::from_millis(500)
        ));
        let s = RateShape::parse("stages:100/2s,100..300/1s").unwrap();
        assert_eq!(s.natural_duration(), Some(Duration::from_secs(3)));
        assert_eq!(s.rate_at(2.5, 3.0), 200.0);
        assert_eq!(s.rate_at(3.5, 3.0), 0.0);
        for bad in [
            "",
            "-5",
            "fast",
            "ramp:1",
            "step:1..2",
            "spike:1..2@1s",
            "stages:",
            "x:1",
            "1e9",
        ] {
            let e = RateShape::parse(bad).unwrap_err();
            assert!(
                e.contains("--rate") && e.contains("ramp:FROM..TO"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn uniform_arrivals_are_exact() {
        let times: Vec<f64> = Schedule::new(
            RateShape::Constant(10.0),
            Arrivals::Uniform,
            Duration::from_secs(1),
            0,
        )
        .collect();
        assert_eq!(times.len(), 10);
        for (i, t) in times.iter().enumerate() {
            assert!((t - 0.1 * (i + 1) as f64).abs() < 1e-9, "{times:?}");
        }
    }

    #[test]
    fn poisson_and_shapes_offer_the_expected_counts() {
        let c = RateShape::Constant(1000.0);
        let n = count_between(&c, Arrivals::Poisson, 10, 0.0, 10.0);
        assert!((9_700..=10_300).contains(&n), "{n}");
        let step = RateShape::parse("step:100..1000@2s").unwrap();
        // The 200th arrival falls on the step itself, up to float rounding.
        let before = count_between(&step, Arrivals::Uniform, 4, 0.0, 2.0);
        assert!((199..=200).contains(&before), "{before}");
        let after = count_between(&step, Arrivals::Uniform, 4, 2.0, 4.0);
        assert!((1995..=2001).contains(&after), "{after}");
        let spike = RateShape::parse("spike:10..1000@1s+1s").unwrap();
        let during = count_between(&spike, Arrivals::Uniform, 3, 1.0, 2.0);
        assert!((990..=1001).contains(&during), "{during}");
        assert!(count_between(&spike, Arrivals::Uniform, 3, 2.0, 3.0) <= 11);
        // A ramp 0 -> 1000 over 10 s offers half of 10 000.
        let ramp = RateShape::Ramp {
            from: 0.0,
            to: 1000.0,
        };
        let n = count_between(&ramp, Arrivals::Uniform, 10, 0.0, 10.0);
        assert!((4_950..=5_050).contains(&n), "{n}");
        // A slow rate before a step does not delay the step (the gap is integrated piecewise).
        let late = RateShape::parse("step:0.1..100@1s").unwrap();
        let first_after = Schedule::new(late, Arrivals::Uniform, Duration::from_secs(2), 0)
            .find(|t| *t >= 1.0)
            .unwrap();
        assert!(first_after < 1.011, "{first_after}");
    }
}
