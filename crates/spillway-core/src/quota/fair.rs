//! The max-min fair share of a global quota, as the fleet quota script computes it in Redis.
//!
//! Why a Rust copy of the Lua (`spillway-tower/src/lease/share.lua`): the simulator models the
//! lease protocol for fleets of up to 10,000 instances, and it must use the same arithmetic the
//! store does, not a look-alike; a test runs both on random inputs against a real Redis and
//! requires the same answers. Computing the water level once ([`FairLevel::new`]) and each
//! instance's share from it ([`FairLevel::share`]) is also what lets the simulator serve
//! thousands of instances per interval in linear time rather than one sort per call.
//!
//! The rule (Doorman's FAIR_SHARE): every demand counts as at least 1% of an equal split
//! (`global / members / 100`, so an idle instance keeps a small share); when the demands sum to
//! at most the quota, each gets its demand plus an equal part of the spare; otherwise demands
//! under the water level are met in full and the rest get the level.

/// The water level of one bucket over the live instances' demands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairLevel {
    global: f64,
    floor: f64,
    /// `Some(level)` when demand exceeds the quota; `None` when it does not.
    level: Option<f64>,
    /// Per demand, the spare split equally (when demand is within the quota).
    spare_each: f64,
}

impl FairLevel {
    /// The level of `global` over `demands` (every live instance's reported demand, this
    /// instance's included; sorted in place), with `members` live instances.
    pub fn new(global: f64, members: usize, demands: &mut [f64]) -> FairLevel {
        let floor = global / members.max(1) as f64 / 100.0;
        for d in demands.iter_mut() {
            *d = d.max(floor);
        }
        // No demand at all (every instance left the bucket): as one demand of nothing, like
        // the script.
        let total: f64 = if demands.is_empty() {
            floor
        } else {
            demands.iter().sum()
        };
        let n = demands.len().max(1);
        if total <= global {
            return FairLevel {
                global,
                floor,
                level: None,
                spare_each: (global - total) / n as f64,
            };
        }
        demands.sort_by(f64::total_cmp);
        let mut left = global;
        let mut level = global / n as f64;
        for (i, &d) in demands.iter().enumerate() {
            level = left / (n - i) as f64;
            if d > level {
                break;
            }
            left -= d;
        }
        FairLevel {
            global,
            floor,
            level: Some(level),
            spare_each: 0.0,
        }
    }

    /// The share of an instance whose demand is `mine` (as counted in [`FairLevel::new`]).
    pub fn share(&self, mine: f64) -> f64 {
        self.share_asking(mine, mine)
    }

    /// The share of an instance whose demand is `mine` (as counted in [`FairLevel::new`]) and
    /// which asks for up to `ask` for itself (its demand's upper bound,
    /// [`DemandEstimate::upper`](super::DemandEstimate::upper)): over the quota, the ask up to
    /// the level; within it, the demand plus the spare or the ask (at most the quota),
    /// whichever is more.
    pub fn share_asking(&self, mine: f64, ask: f64) -> f64 {
        let mine = mine.max(self.floor);
        let ask = if ask.is_finite() { ask.max(mine) } else { mine };
        match self.level {
            None => (mine + self.spare_each).max(ask.min(self.global)),
            Some(level) => ask.min(level),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FairLevel;

    fn shares(global: f64, demands: &[f64]) -> Vec<f64> {
        let level = FairLevel::new(global, demands.len(), &mut demands.to_vec());
        demands.iter().map(|&d| level.share(d)).collect()
    }

    #[test]
    fn uneven_demand_over_the_quota_is_max_min_fair() {
        let s = shares(100.0, &[240.0, 45.0, 15.0]);
        assert!(
            (s[0] - 42.5).abs() < 1e-9 && (s[1] - 42.5).abs() < 1e-9,
            "{s:?}"
        );
        assert!((s[2] - 15.0).abs() < 1e-9);
        assert!((s.iter().sum::<f64>() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn demand_within_the_quota_gets_the_spare_split_equally() {
        let s = shares(100.0, &[10.0, 20.0, 40.0]);
        assert_eq!(s, vec![20.0, 30.0, 50.0]);
    }

    #[test]
    fn an_idle_instance_keeps_a_floor() {
        let s = shares(100.0, &[0.0, 500.0]);
        assert!(
            (s[0] - 0.5).abs() < 1e-9 && (s[1] - 99.5).abs() < 1e-9,
            "{s:?}"
        );
    }
}
