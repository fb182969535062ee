//! Transparent huge pages for the simulated fleet's memory (Linux with glibc; best effort).
//!
//! Why: a fleet of 10⁴ tasks and 10⁴ clients keeps ~80 MB of per-task and per-client state
//! (admission controllers, throttles, retry budgets, the request slab) and visits it in random
//! order, a task and a client per request. With 4 KiB pages the processor's second-level data
//! TLB (3,072 entries on this host's AMD EPYC, family 19h model 11h, Zen 4: AMD Software
//! Optimization Guide for family 19h processors, "L2 DTLB") maps 12 MiB, so nearly every visit
//! to a task or a client paid a page walk on top of its cache misses. The sixth round measured
//! it: the same binary with glibc's huge-page heap (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`)
//! ran `spillway sim fleet` 1.11–1.23× faster, and this advice 1.11× (wall, `fleet --duration
//! 20`, on vs off; bench/results/sim-speed.md). That tunable has to be set before the process
//! starts, so the simulator asks the kernel itself: `madvise(MADV_HUGEPAGE)` on its anonymous
//! private mappings of at least one huge page (the heap and glibc's large-allocation mmaps),
//! which a system THP setting of `madvise` (this host's) requires, then `MADV_COLLAPSE`
//! (Linux 6.1) to move what is already faulted in onto huge pages at once rather than whenever
//! `khugepaged` gets to it (kernel docs, admin-guide/mm/transhuge.rst). Memory that the heap
//! grows into later is a new mapping without the advice (a `brk` extension only merges with a
//! mapping of the same flags), so the engine advises again as the run grows
//! ([`HugePages::due`]).
//!
//! Only placement changes — never a simulated result. Every call is a hint: a kernel without
//! THP, a `never` setting or no free huge pages makes the calls fail, and the run goes on with
//! small pages. `SPILLWAY_SIM_HUGE_PAGES=off` turns it off (for measuring the difference).
//! The price is kernel time, once per mapping: ~2–3.5 ms per MB collapsed on this VM (0.1–0.2 s
//! for `fleet`; 3.4–5.0 s for the 1.46 GB of `fleet-million-clients`, where glibc's own
//! huge-page heap costs as much), against 1–15% less user time there.

/// A huge page on x86_64 and aarch64 with 4 KiB base pages: 2 MiB (transhuge.rst).
const HUGE: usize = 2 << 20;

/// The anonymous private read-write mappings of at least a huge page in a `/proc/self/maps`
/// text: `(start, end)` pairs. Stacks and named mappings other than the heap are left out (a
/// thread stack is anonymous too, but small and not ours to change).
pub(crate) fn candidates(maps: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let name = f.next();
        if perms != "rw-p" || inode != "0" || !matches!(name, None | Some("[heap]")) {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        // At least one whole aligned huge page inside, or there is nothing to back.
        if b.saturating_sub(a.next_multiple_of(HUGE)) >= HUGE {
            out.push((a, b));
        }
    }
    out
}

/// When to advise: once the fleet is built, then each time the simulated run reaches second 1,
/// 2, 4, 8, … (the slab and the event queue grow in the first seconds, then level off), so a
/// long run reads `/proc/self/maps` a logarithmic number of times.
#[derive(Debug)]
pub(crate) struct HugePages {
    on: bool,
    next_second: usize,
    /// Ranges already advised (skipped next time; a re-advised range costs only a scan).
    done: Vec<(usize, usize)>,
}

impl HugePages {
    /// On unless `SPILLWAY_SIM_HUGE_PAGES` is `off`, `0` or `false`.
    pub fn from_env() -> HugePages {
        let on = !matches!(
            std::env::var("SPILLWAY_SIM_HUGE_PAGES").as_deref(),
            Ok("off" | "0" | "false")
        );
        HugePages {
            on,
            next_second: 1,
            done: Vec::new(),
        }
    }

    /// Never advises: for the shards of a sharded run but the first, whose advice covers the
    /// whole process (two shards collapsing the same mappings would only pay twice).
    pub fn off() -> HugePages {
        HugePages {
            on: false,
            next_second: 1,
            done: Vec::new(),
        }
    }

    /// Whether a run that has sealed `second` simulated seconds should advise again.
    #[inline]
    pub fn due(&self, second: usize) -> bool {
        self.on && second >= self.next_second
    }

    /// Advises every new candidate mapping; returns how many bytes were advised.
    pub fn advise(&mut self, second: usize) -> usize {
        if !self.on {
            return 0;
        }
        while self.next_second <= second {
            self.next_second = self.next_second.saturating_mul(2);
        }
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return 0;
        };
        let mut bytes = 0;
        for r in candidates(&maps) {
            if self.done.contains(&r) {
                continue;
            }
            if sys::advise(r.0, r.1 - r.0) {
                bytes += r.1 - r.0;
            }
            self.done.push(r);
        }
        bytes
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod sys {
    #![allow(unsafe_code)]

    /// `madvise(MADV_HUGEPAGE)`, then `MADV_COLLAPSE`, on `[addr, addr + len)`; `true` if the
    /// first was accepted.
    pub(super) fn advise(addr: usize, len: usize) -> bool {
        let p = addr as *mut libc::c_void;
        // SAFETY: both advices change only which physical pages back the range, never its
        // contents or protection (madvise(2): MADV_HUGEPAGE "enable transparent huge pages",
        // MADV_COLLAPSE "perform a best-effort synchronous collapse ... the collapse preserves
        // the content"); the range is a whole mapping this process owns, read from
        // /proc/self/maps. If it was unmapped meanwhile the call fails with ENOMEM and
        // nothing happens.
        let advised = unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) } == 0;
        if advised {
            // SAFETY: as above. Failure (EAGAIN/ENOMEM: no huge page free; EINVAL: kernel
            // before 6.1) leaves the small pages in place.
            let _ = unsafe { libc::madvise(p, len, libc::MADV_COLLAPSE) };
        }
        advised
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod sys {
    pub(super) fn advise(_addr: usize, _len: usize) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_large_anonymous_private_writable_mappings_and_the_heap_are_candidates() {
        let maps = "\
55d0c0000000-55d0c0200000 r--p 00000000 fd:01 1234     /usr/bin/spillway
55d0c1000000-55d0c5000000 rw-p 00000000 00:00 0        [heap]
7f0000000000-7f0000a00000 rw-p 00000000 00:00 0
7f0001000000-7f0001001000 rw-p 00000000 00:00 0
7f0002000000-7f0002400000 r--p 00000000 00:00 0
7f0003000000-7f0003400000 rw-s 00000000 00:05 77       /dev/zero (deleted)
7f0004000000-7f0004400000 rw-p 00000000 fd:01 99       /usr/lib/libc.so.6
7f0005100000-7f0005300000 rw-p 00000000 00:00 0
7f0006100000-7f0006500000 rw-p 00000000 00:00 0
7ffc00000000-7ffc00800000 rw-p 00000000 00:00 0        [stack]
garbage line
";
        assert_eq!(
            candidates(maps),
            vec![
                (0x55d0_c100_0000, 0x55d0_c500_0000),
                (0x7f00_0000_0000, 0x7f00_00a0_0000),
                // 4 MiB starting 1 MiB past a boundary: one aligned huge page inside.
                (0x7f00_0610_0000, 0x7f00_0650_0000),
            ],
            "the heap and large anonymous mappings only; 2 MiB at 1 MiB past a boundary holds \
             no aligned huge page"
        );
    }

    #[test]
    fn advice_is_due_at_doubling_seconds_and_never_when_off() {
        let mut h = HugePages {
            on: true,
            next_second: 1,
            done: Vec::new(),
        };
        assert!(!h.due(0));
        assert!(h.due(1));
        h.advise(1);
        assert!(!h.due(1) && h.due(2));
        h.advise(5);
        assert!(!h.due(7) && h.due(8));
        h.on = false;
        assert!(!h.due(1 << 20));
        assert_eq!(h.advise(1 << 20), 0);
    }

    /// On this platform the advice reaches the kernel without harm: a live buffer keeps its
    /// contents (whether huge pages are granted depends on the host).
    #[test]
    fn advising_keeps_the_contents() {
        let v: Vec<u64> = (0..(8 << 20) / 8).collect();
        let mut h = HugePages {
            on: true,
            next_second: 1,
            done: Vec::new(),
        };
        h.advise(0);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
    }
}
