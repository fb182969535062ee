//! Parsing of the human-written values shared by every `spillway` subcommand: durations
//! (`250ms`, `1.5s`, `2m`) and loopback addresses.
//!
//! Why here: the tools take the same kinds of flags, and an error must say the same thing —
//! which value, and what is accepted — wherever it is typed. A duration needs its unit: a bare
//! `40` is a service time of 40 ms to one reader and a run of 40 s to another, and a wrong guess
//! is off by a factor of a thousand without any error.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// What a duration flag accepts, for error messages.
pub const DURATION_ACCEPTS: &str = "a number with a unit: us, ms, s, m or h (e.g. 250ms, 1.5s, \
     2m); a bare number other than 0 is refused, as 40 could mean 40ms or 40s";

/// Parses `250ms`, `1.5s`, `2m`, `1h`, `100us`, and a bare `0`. A bare non-zero number,
/// negative, non-finite and absurd (over a year) values are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected {DURATION_ACCEPTS}"))?;
    let scale = match unit.trim() {
        "" if value == 0.0 => 0.0,
        "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: expected {DURATION_ACCEPTS}"
            ))
        }
    };
    let secs = value * scale;
    if !(secs.is_finite() && (0.0..=365.0 * 86400.0).contains(&secs)) {
        return Err(format!(
            "invalid duration {s:?}: expected {DURATION_ACCEPTS}, at most a year"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The only addresses the load generator sends to, and the backend listens on.
pub const LOOPBACK_ACCEPTS: &str = "a loopback address such as 127.0.0.1:8080, [::1]:8080 or \
     localhost:8080 (Spillway's load tools refuse any other target so that no experiment can \
     flood a machine or network it was not meant for)";

/// Resolves `host:port` (or an `http://host:port` URL) and accepts it only if every address it
/// resolves to is loopback. A path or an `https://` URL is refused rather than ignored: the
/// tools speak cleartext HTTP, and the load generator's paths are its classes' routes.
pub fn loopback_addr(s: &str) -> Result<SocketAddr, String> {
    let addrs = resolve(s, LOOPBACK_ACCEPTS)?;
    match addrs.first() {
        Some(first) if addrs.iter().all(|a| is_loopback(a.ip())) => Ok(*first),
        Some(other) if !is_loopback(other.ip()) => Err(format!(
            "refusing non-loopback address {s:?} (resolves to {}): expected {LOOPBACK_ACCEPTS}",
            other.ip()
        )),
        Some(_) => Err(format!(
            "refusing address {s:?}: it resolves to loopback and non-loopback addresses; \
             expected {LOOPBACK_ACCEPTS}"
        )),
        None => Err(format!(
            "address {s:?} resolves to nothing: expected {LOOPBACK_ACCEPTS}"
        )),
    }
}

/// What [`any_addr`] accepts.
pub const ADDR_ACCEPTS: &str = "HOST:PORT or http://HOST:PORT (cleartext HTTP)";

/// Resolves `host:port` (or an `http://host:port` URL) to its first address, loopback or not:
/// the parser of `spillway load --target`, whose loopback check is made after parsing so that
/// the error can name `--allow-remote` ([`is_loopback_addr`]). Paths and `https://` are refused
/// as in [`loopback_addr`].
pub fn any_addr(s: &str) -> Result<SocketAddr, String> {
    resolve(s, ADDR_ACCEPTS)?
        .first()
        .copied()
        .ok_or_else(|| format!("address {s:?} resolves to nothing: expected {ADDR_ACCEPTS}"))
}

/// Whether `addr` is a loopback address (an IPv4-mapped loopback IPv6 address included).
pub fn is_loopback_addr(addr: SocketAddr) -> bool {
    is_loopback(addr.ip())
}

/// What [`parse_target`] accepts.
pub const TARGET_ACCEPTS: &str = "HOST:PORT, http://HOST[:PORT] or https://HOST[:PORT]";

/// A load target as typed: where to connect, and the name to speak to it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Speak HTTPS (an `https://` URL).
    pub https: bool,
    /// The host and port as given (`localhost:8443`, `[::1]:80`, `staging.example.com:443`):
    /// the Host header, and over HTTPS the name sent by SNI and checked in the certificate.
    pub authority: String,
    /// The address every connection goes to: the first the name resolved to, once.
    pub addr: SocketAddr,
}

/// Parses `spillway load --target`: `host:port`, `http://host[:port]` or `https://host[:port]`
/// (the port defaults to the scheme's), resolved once to its first address, loopback or not —
/// the loopback check is made after parsing, so that the error can name `--allow-remote`
/// ([`is_loopback_addr`]). A path is refused as in [`loopback_addr`].
pub fn parse_target(s: &str) -> Result<Target, String> {
    let (https, rest, default_port) = if let Some(r) = s.strip_prefix("https://") {
        (true, r, Some(443))
    } else if let Some(r) = s.strip_prefix("http://") {
        (false, r, Some(80))
    } else {
        (false, s, None)
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    check_no_path(s, path, TARGET_ACCEPTS)?;
    let has_port = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').is_some_and(|(_, p)| p.starts_with(':')),
        None => authority.matches(':').count() == 1,
    };
    let authority = match default_port {
        Some(port) if !has_port && !authority.is_empty() => format!("{authority}:{port}"),
        _ => authority.to_string(),
    };
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("invalid address {s:?} ({e}): expected {TARGET_ACCEPTS}"))?
        .next()
        .ok_or_else(|| format!("address {s:?} resolves to nothing: expected {TARGET_ACCEPTS}"))?;
    Ok(Target {
        https,
        authority,
        addr,
    })
}

fn check_no_path(s: &str, path: &str, accepts: &str) -> Result<(), String> {
    if !path.is_empty() && path != "/" {
        return Err(format!(
            "{s:?}: an address takes no path (the load generator's paths are set per class, \
             e.g. --class route={path}); expected {accepts}"
        ));
    }
    Ok(())
}

fn resolve(s: &str, accepts: &str) -> Result<Vec<SocketAddr>, String> {
    if s.starts_with("https://") {
        return Err(format!(
            "{s:?}: Spillway's load tools speak cleartext HTTP (no TLS); expected {accepts}"
        ));
    }
    let rest = s.strip_prefix("http://").unwrap_or(s);
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    check_no_path(s, path, accepts)?;
    Ok(authority
        .to_socket_addrs()
        .map_err(|e| format!("invalid address {s:?} ({e}): expected {accepts}"))?
        .collect())
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        // A bare number is ambiguous (40 ms or 40 s?): refused, and the message says why.
        for bare in ["3", "40", "0.5"] {
            let err = parse_duration(bare).unwrap_err();
            assert!(err.contains("40ms or 40s"), "{bare:?}: {err}");
        }
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        for bad in ["", "ms", "-1s", "1d", "1e999s", "NaNs", "2y"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration("1 fortnight").unwrap_err().contains("250ms"));
    }

    #[test]
    fn only_loopback() {
        assert_eq!(loopback_addr("127.0.0.1:80").unwrap().port(), 80);
        assert!(loopback_addr("[::1]:81").unwrap().ip().is_loopback());
        assert!(loopback_addr("http://127.0.0.1:82/").is_ok());
        assert!(loopback_addr("http://127.0.0.1:82").is_ok());
        // Not ignored: a path would not be used, TLS would not be spoken.
        let e = loopback_addr("http://127.0.0.1:82/path").unwrap_err();
        assert!(e.contains("no path") && e.contains("route=/path"), "{e}");
        let e = loopback_addr("https://127.0.0.1:443").unwrap_err();
        assert!(e.contains("cleartext"), "{e}");
        assert!(loopback_addr("127.8.9.10:1").is_ok());
        // Any address parses for `--target`; the loopback check comes after (--allow-remote).
        assert_eq!(any_addr("http://10.0.0.1:80").unwrap().port(), 80);
        assert!(!is_loopback_addr(any_addr("10.0.0.1:80").unwrap()));
        assert!(is_loopback_addr(any_addr("[::ffff:127.0.0.1]:80").unwrap()));
        assert!(any_addr("https://10.0.0.1:443")
            .unwrap_err()
            .contains("cleartext"));
        let e = loopback_addr("10.0.0.1:80").unwrap_err();
        assert!(
            e.contains("refusing non-loopback") && e.contains("10.0.0.1"),
            "{e}"
        );
        assert!(loopback_addr("192.168.1.1:80").is_err());
        assert!(loopback_addr("[::ffff:8.8.8.8]:80").is_err());
        assert!(loopback_addr("no-port").is_err());
    }

    #[test]
    fn load_targets_keep_their_scheme_and_name() {
        let t = parse_target("https://localhost:8443").unwrap();
        assert!(t.https && t.addr.ip().is_loopback() && t.addr.port() == 8443);
        assert_eq!(t.authority, "localhost:8443");
        // The scheme's port when none is given; a bare host:port is cleartext.
        let t = parse_target("https://127.0.0.1/").unwrap();
        assert_eq!(
            (t.https, t.authority.as_str(), t.addr.port()),
            (true, "127.0.0.1:443", 443)
        );
        assert_eq!(parse_target("http://[::1]").unwrap().authority, "[::1]:80");
        let t = parse_target("[::1]:81").unwrap();
        assert_eq!((t.https, t.addr.port()), (false, 81));
        assert!(!is_loopback_addr(
            parse_target("https://10.0.0.1").unwrap().addr
        ));
        let e = parse_target("https://127.0.0.1:8443/api").unwrap_err();
        assert!(e.contains("route=/api"), "{e}");
        assert!(parse_target("127.0.0.1").is_err());
        assert!(parse_target("https://").is_err());
    }
}
