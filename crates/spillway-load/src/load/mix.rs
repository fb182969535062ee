//! The traffic mix: which criticality, customer, route and cost each request carries.
//!
//! Why weighted classes: the claims are about *who* is served under overload — CRITICAL before
//! SHEDDABLE, the well-behaved customer despite the misbehaving one (SRE book ch. 21,
//! "Criticality" and "Per-customer limits") — so a run must offer a known blend of them.

use http::HeaderValue;
use spillway_core::Criticality;
use spillway_tower::wire;

/// One kind of request in the mix.
#[derive(Debug, Clone, PartialEq)]
pub struct TrafficClass {
    /// Sent as [`wire::CRITICALITY`].
    pub criticality: Criticality,
    /// Sent as [`wire::CUSTOMER`].
    pub customer: String,
    /// Path (and optional query) requested.
    pub route: String,
    /// Request cost: a service-time multiplier sent as the `cost` query parameter (understood
    /// by `spillway backend`; omitted when 1).
    pub cost: f64,
    /// Relative share of the offered requests.
    pub weight: f64,
    /// The request path and query actually sent (route plus cost).
    pub path_and_query: String,
}

/// What `--class` accepts, for error messages.
pub const CLASS_ACCEPTS: &str =
    "comma-separated key=value pairs: criticality=CRITICAL_PLUS|CRITICAL|\
     SHEDDABLE_PLUS|SHEDDABLE (default CRITICAL), customer=NAME (default \"default\"), \
     route=/PATH (default /), cost=NUMBER in (0, 1000] (default 1), weight=NUMBER > 0 (default 1); \
     e.g. criticality=SHEDDABLE,customer=bob,weight=3";

impl TrafficClass {
    /// A class with every default: CRITICAL, customer `default`, route `/`, cost 1, weight 1.
    pub fn default_class() -> Self {
        TrafficClass::build(
            Criticality::Critical,
            "default".into(),
            "/".into(),
            1.0,
            1.0,
        )
    }

    fn build(
        criticality: Criticality,
        customer: String,
        route: String,
        cost: f64,
        weight: f64,
    ) -> Self {
        let path_and_query = if cost == 1.0 {
            route.clone()
        } else {
            let sep = if route.contains('?') { '&' } else { '?' };
            format!("{route}{sep}cost={cost}")
        };
        TrafficClass {
            criticality,
            customer,
            route,
            cost,
            weight,
            path_and_query,
        }
    }

    /// Parses the `--class` syntax ([`CLASS_ACCEPTS`]).
    pub fn parse(s: &str) -> Result<TrafficClass, String> {
        let bad = |why: String| format!("invalid --class {s:?}: {why}; expected {CLASS_ACCEPTS}");
        let d = TrafficClass::default_class();
        let (mut criticality, mut customer, mut route, mut cost, mut weight) =
            (d.criticality, d.customer, d.route, d.cost, d.weight);
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            match k.trim() {
                "criticality" => criticality = v.parse().map_err(|e| bad(format!("{e}")))?,
                "customer" => {
                    let hv =
                        HeaderValue::from_str(v).map_err(|_| bad(format!("customer {v:?}")))?;
                    wire::parse_customer(&hv).map_err(|e| bad(e.to_string()))?;
                    customer = v.to_owned();
                }
                "route" => {
                    if !v.starts_with('/') || v.contains(char::is_whitespace) || v.contains('#') {
                        return Err(bad(format!(
                            "route {v:?} must start with / and have no spaces"
                        )));
                    }
                    route = v.to_owned();
                }
                "cost" => {
                    cost = v
                        .parse::<f64>()
                        .ok()
                        .filter(|c| c.is_finite() && *c > 0.0 && *c <= 1000.0)
                        .ok_or_else(|| bad(format!("cost {v:?}")))?
                }
                "weight" => {
                    weight = v
                        .parse::<f64>()
                        .ok()
                        .filter(|w| w.is_finite() && *w > 0.0)
                        .ok_or_else(|| bad(format!("weight {v:?}")))?
                }
                other => return Err(bad(format!("unknown key {other:?}"))),
            }
        }
        Ok(TrafficClass::build(
            criticality,
            customer,
            route,
            cost,
            weight,
        ))
    }
}

/// A weighted set of classes to draw each request from.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    classes: Vec<TrafficClass>,
    cumulative: Vec<f64>,
}

impl Mix {
    /// A mix of `classes` (one default class if empty).
    pub fn new(classes: Vec<TrafficClass>) -> Mix {
        let classes = if classes.is_empty() {
            vec![TrafficClass::default_class()]
        } else {
            classes
        };
        let mut sum = 0.0;
        let cumulative = classes
            .iter()
            .map(|c| {
                sum += c.weight;
                sum
            })
            .collect();
        Mix {
            classes,
            cumulative,
        }
    }

    /// The classes.
    pub fn classes(&self) -> &[TrafficClass] {
        &self.classes
    }

    /// Index of the class at quantile `q` (in `[0, 1)`) of the cumulative weights: client `i`
    /// of `n` closed-loop clients takes `class_at((i + 0.5) / n)`, so each class gets its share
    /// of the clients (as `spillway sim --sweep` assigns closed-loop clients), not a fresh draw
    /// per request.
    pub fn class_at(&self, q: f64) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let x = q.clamp(0.0, 1.0) * total;
        self.cumulative
            .iter()
            .position(|c| x < *c)
            .unwrap_or(self.classes.len() - 1)
    }

    /// Index of a class drawn with probability proportional to its weight.
    pub fn pick(&self, rng: &mut fastrand::Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let x = rng.f64() * total;
        self.cumulative
            .iter()
            .position(|c| x < *c)
            .unwrap_or(self.classes.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_classes() {
        let c =
            TrafficClass::parse("criticality=sheddable,customer=bob,route=/a?x=1,cost=2,weight=3")
                .unwrap();
        assert_eq!(c.criticality, Criticality::Sheddable);
        assert_eq!(c.customer, "bob");
        assert_eq!(c.path_and_query, "/a?x=1&cost=2");
        assert_eq!(c.weight, 3.0);
        assert_eq!(
            TrafficClass::parse("").unwrap(),
            TrafficClass::default_class()
        );
        for bad in [
            "criticality=HIGH",
            "customer=a b",
            "route=x",
            "cost=0",
            "weight=-1",
            "color=red",
            "x",
        ] {
            let e = TrafficClass::parse(bad).unwrap_err();
            assert!(
                e.contains("--class") && e.contains("criticality="),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn picks_by_weight() {
        let mix = Mix::new(vec![
            TrafficClass::parse("weight=1").unwrap(),
            TrafficClass::parse("weight=3,customer=b").unwrap(),
        ]);
        let mut rng = fastrand::Rng::with_seed(1);
        let b = (0..40_000).filter(|_| mix.pick(&mut rng) == 1).count();
        assert!((29_000..=31_000).contains(&b), "{b}");
        assert_eq!(Mix::new(vec![]).classes().len(), 1);
    }

    #[test]
    fn splits_clients_by_weight() {
        let mix = Mix::new(vec![
            TrafficClass::parse("weight=3").unwrap(),
            TrafficClass::parse("weight=1,customer=b").unwrap(),
        ]);
        let n = 256;
        let first = (0..n)
            .filter(|i| mix.class_at((f64::from(*i) + 0.5) / f64::from(n)) == 0)
            .count();
        assert_eq!(first, 192);
        assert_eq!(mix.class_at(1.0), 1);
        assert_eq!(mix.class_at(-1.0), 0);
    }
}
