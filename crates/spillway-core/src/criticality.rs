//! Request criticality: which work is shed first.
//!
//! Four levels, as in Google's RPC system (SRE book, ch. 21 "Handling Overload", §"Criticality"):
//! a server sheds from the bottom up, quotas are kept per level, and the level travels down the
//! call chain. The order is part of the type (`Ord`), so policies compare levels rather than
//! matching on names.

use std::fmt;
use std::str::FromStr;

/// How important a request is; higher values are shed later.
///
/// The derived order is `Sheddable < SheddablePlus < Critical < CriticalPlus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "String", into = "&'static str"))]
pub enum Criticality {
    /// Traffic for which frequent partial and occasional full unavailability is expected.
    Sheddable = 0,
    /// Partial unavailability is acceptable; the default for batch jobs that retry later.
    SheddablePlus = 1,
    /// The default for production traffic: failure is user-visible.
    #[default]
    Critical = 2,
    /// The most critical requests: failure is a serious user-visible outage.
    CriticalPlus = 3,
}

impl Criticality {
    /// Every level, lowest (shed first) to highest.
    pub const ALL: [Criticality; 4] = [
        Criticality::Sheddable,
        Criticality::SheddablePlus,
        Criticality::Critical,
        Criticality::CriticalPlus,
    ];

    /// Number of levels; sizes per-criticality tables.
    pub const COUNT: usize = 4;

    /// The canonical wire spelling, e.g. `CRITICAL_PLUS`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Criticality::Sheddable => "SHEDDABLE",
            Criticality::SheddablePlus => "SHEDDABLE_PLUS",
            Criticality::Critical => "CRITICAL",
            Criticality::CriticalPlus => "CRITICAL_PLUS",
        }
    }

    /// Dense index `0..COUNT`, lowest criticality first, for per-level arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The level with the given [`index`](Self::index), if any.
    pub const fn from_index(index: usize) -> Option<Criticality> {
        match index {
            0 => Some(Criticality::Sheddable),
            1 => Some(Criticality::SheddablePlus),
            2 => Some(Criticality::Critical),
            3 => Some(Criticality::CriticalPlus),
            _ => None,
        }
    }
}

impl fmt::Display for Criticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A criticality string that is none of the accepted spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid criticality {value:?}: expected one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, \
     SHEDDABLE (lower-case and kebab-case spellings such as critical-plus are accepted too)"
)]
pub struct ParseCriticalityError {
    /// The rejected input, truncated to 64 bytes so a hostile header cannot bloat logs.
    pub value: String,
}

impl FromStr for Criticality {
    type Err = ParseCriticalityError;

    /// Accepts `CRITICAL_PLUS`, `critical_plus`, `critical-plus`, `Critical-Plus`, … — any
    /// ASCII case, with `_` or `-` between the words. Allocation-free on success.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let eq = |name: &str| {
            t.len() == name.len()
                && t.bytes().zip(name.bytes()).all(|(a, b)| {
                    let a = if a == b'-' {
                        b'_'
                    } else {
                        a.to_ascii_uppercase()
                    };
                    a == b
                })
        };
        for c in Criticality::ALL {
            if eq(c.as_str()) {
                return Ok(c);
            }
        }
        let mut end = s.len().min(64);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        Err(ParseCriticalityError {
            value: s[..end].to_owned(),
        })
    }
}

impl TryFrom<String> for Criticality {
    type Error = ParseCriticalityError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Criticality> for &'static str {
    fn from(c: Criticality) -> Self {
        c.as_str()
    }
}

/// A value kept separately for each criticality level.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PerCriticality<T>(pub [T; Criticality::COUNT]);

impl<T> PerCriticality<T> {
    /// Builds the table from a function of the level.
    pub fn from_fn(mut f: impl FnMut(Criticality) -> T) -> Self {
        PerCriticality(Criticality::ALL.map(&mut f))
    }
}

impl<T> std::ops::Index<Criticality> for PerCriticality<T> {
    type Output = T;
    fn index(&self, c: Criticality) -> &T {
        &self.0[c.index()]
    }
}

impl<T> std::ops::IndexMut<Criticality> for PerCriticality<T> {
    fn index_mut(&mut self, c: Criticality) -> &mut T {
        &mut self.0[c.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_sheddable_first() {
        assert!(Criticality::CriticalPlus > Criticality::Critical);
        assert!(Criticality::Critical > Criticality::SheddablePlus);
        assert!(Criticality::SheddablePlus > Criticality::Sheddable);
        assert_eq!(Criticality::default(), Criticality::Critical);
    }

    #[test]
    fn parses_every_spelling() {
        for (s, c) in [
            ("CRITICAL_PLUS", Criticality::CriticalPlus),
            ("critical_plus", Criticality::CriticalPlus),
            ("critical-plus", Criticality::CriticalPlus),
            ("Critical-Plus", Criticality::CriticalPlus),
            ("CRITICAL", Criticality::Critical),
            ("critical", Criticality::Critical),
            (" sheddable-plus ", Criticality::SheddablePlus),
            ("SHEDDABLE", Criticality::Sheddable),
        ] {
            assert_eq!(s.parse::<Criticality>(), Ok(c), "{s}");
        }
        for c in Criticality::ALL {
            assert_eq!(c.to_string().parse::<Criticality>(), Ok(c));
            assert_eq!(Criticality::from_index(c.index()), Some(c));
        }
    }

    #[test]
    fn error_names_the_accepted_values() {
        let e = "urgent".parse::<Criticality>().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("\"urgent\""), "{msg}");
        for c in Criticality::ALL {
            assert!(msg.contains(c.as_str()), "{msg}");
        }
        assert!("criticalplus".parse::<Criticality>().is_err());
        assert!("".parse::<Criticality>().is_err());
    }

    #[test]
    fn error_truncates_hostile_input() {
        let long = "é".repeat(100);
        let e = long.parse::<Criticality>().unwrap_err();
        assert!(e.value.len() <= 64);
    }
}
