//! The shipped scenarios (`examples/sim/*.toml`), embedded so `spillway sim NAME` works from
//! any directory.
//!
//! Why embedded: a scenario is the experiment's definition; the binary must run the very file
//! the repository documents, not a copy that can drift.

use super::config::{ConfigError, Scenario};

/// `(name, TOML text)` of every shipped scenario, in the order `--list` shows them.
pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "retry-amplification",
        include_str!("../../../examples/sim/retry-amplification.toml"),
    ),
    (
        "local-overload",
        include_str!("../../../examples/sim/local-overload.toml"),
    ),
    (
        "datacenter-overload",
        include_str!("../../../examples/sim/datacenter-overload.toml"),
    ),
    (
        "metastable",
        include_str!("../../../examples/sim/metastable.toml"),
    ),
    (
        "customer-quotas",
        include_str!("../../../examples/sim/customer-quotas.toml"),
    ),
    (
        "criticality-spike",
        include_str!("../../../examples/sim/criticality-spike.toml"),
    ),
    ("demo", include_str!("../../../examples/sim/demo.toml")),
    ("mmc", include_str!("../../../examples/sim/mmc.toml")),
    ("fleet", include_str!("../../../examples/sim/fleet.toml")),
    (
        "fleet-million-clients",
        include_str!("../../../examples/sim/fleet-million-clients.toml"),
    ),
];

/// The shipped scenario called `name`, parsed and validated.
pub fn scenario(name: &str) -> Option<Result<Scenario, ConfigError>> {
    SCENARIOS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, text)| Scenario::from_toml(text, n))
}

/// The names of the shipped scenarios.
pub fn names() -> impl Iterator<Item = &'static str> {
    SCENARIOS.iter().map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_parses_and_is_named_after_its_file() {
        for (name, text) in SCENARIOS {
            let s = Scenario::from_toml(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.name, *name);
        }
    }
}
