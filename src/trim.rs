//! Returning the heap's free memory to the system after a burst (glibc only).
//!
//! Why: glibc's malloc keeps the pages of freed memory for reuse, so the proxy's RSS after a
//! burst of connections stays at the burst's high-water mark for good (the 10-minute soak:
//! +4 to +8 MB at each stall of the host that piled up 400–700 connections, never returned;
//! docs/soak.md). `malloc_trim(0)` hands every whole free page of every arena back
//! (`madvise(MADV_DONTNEED)`); once a second it costs about 0.1 ms (1.6 ms right after a burst of
//! 600 connections), and RSS is back at its level before the burst within a second.
//! Why not another allocator: mimalloc returned memory too, but to a higher floor (10.6 vs
//! 9.7 MB after the same bursts) and compiles C sources at build time; jemalloc kept the burst
//! for its 10 s decay. bench/soak-burst.py measures each.

use std::time::Duration;

/// How often the heap is trimmed.
const EVERY: Duration = Duration::from_secs(1);

/// Starts a thread that trims the heap every [`EVERY`] for the life of the process; nothing on
/// allocators other than glibc's.
pub fn spawn() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // A failure to start the thread only loses the trimming; the proxy runs on.
        let _ = std::thread::Builder::new()
            .name("spillway-trim".into())
            .stack_size(64 * 1024)
            .spawn(|| loop {
                std::thread::sleep(EVERY);
                // SAFETY: malloc_trim takes the arenas' locks itself and may be called from any
                // thread at any time; 0 keeps no extra padding at the heap's top.
                unsafe {
                    libc::malloc_trim(0);
                }
            });
    }
}
