//! Raising the process's open-file limit to what the system allows.
//!
//! Why: every client connection, upstream connection and load-generator socket is a file
//! descriptor, and most Linux systems start processes with a soft limit of 1,024 (hard often
//! 512 Ki or more) — far below `listen.max_connections` (10,000 by default), which needs a client
//! and an upstream descriptor per connection. Past the soft limit `accept` and `connect` fail
//! with EMFILE: the proxy answers 502 for upstream connects it cannot make and the load
//! generator loses connections, so the process would fail at a small fraction of what it was
//! configured for. The soft limit exists for programs that use `select(2)`, which cannot watch
//! descriptors above 1,024; Spillway uses epoll (through tokio) only, so it raises the soft
//! limit to the hard one as its first step, as servers that hold many connections do (the Go
//! runtime does the same for every program since Go 1.19). The hard limit is the
//! administrator's (`ulimit -Hn`, systemd's `LimitNOFILE=`); the proxy warns at start when it is
//! below what the configuration needs.

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns `(before, after)`, or `None`
/// where it could not be read (then nothing changed). Never fails the process: a limit that
/// cannot be raised leaves the old one, which the proxy's start-up check reports.
pub fn raise() -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` through a valid, exclusive pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return None;
        }
        let before = lim.rlim_cur;
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: setrlimit reads one `rlimit` through a valid pointer. On failure (macOS
            // refuses above OPEN_MAX) the limit is unchanged.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim = raised;
            }
        }
        // rlim_t is u64 on Linux and macOS, narrower or signed on a few other Unixes.
        #[allow(clippy::useless_conversion)]
        Some((
            u64::try_from(before).unwrap_or(u64::MAX),
            u64::try_from(lim.rlim_cur).unwrap_or(u64::MAX),
        ))
    }
    #[cfg(not(unix))]
    {
        None
    }
}
