//! What tests/fleet_redis.rs needs besides tests/common and the proxy's tests' `redis_support`
//! (a private `redis-server`): a proxy's lease as its `/status` shows it, and a paced load
//! generator on plain threads.
//!
//! Why a generator here rather than `spillway load`: the test counts each customer's answers
//! per proxy by send time, and stops one proxy's share of the load before that proxy stops;
//! `spillway load` reports totals only.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{connect, read_response};

/// A proxy's `quota_lease` in `/status`, the parts the test reads.
#[derive(Debug, Clone)]
pub struct Lease {
    /// `static`, `leased`, `holding` or `decaying`.
    pub mode: String,
    /// Live instances at the last lease.
    pub members: u64,
    /// Failed round trips since start.
    pub errors: u64,
    /// acme's CRITICAL rate enforced now.
    pub acme_rate: Option<f64>,
}

/// `GET /status` on `admin`: its lease, or `None` when it did not answer.
pub fn lease(admin: SocketAddr) -> Option<Lease> {
    let (status, body) = crate::common::get(admin, "/status")?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let l = v.get("quota_lease")?;
    let acme_rate = l.get("shares")?.as_array()?.iter().find_map(|s| {
        (s.get("customer")?.as_str()? == "acme" && s.get("criticality")?.as_str()? == "CRITICAL")
            .then(|| s.get("rate")?.as_f64())?
    });
    Some(Lease {
        mode: l.get("mode")?.as_str()?.to_string(),
        members: l.get("members")?.as_u64()?,
        errors: l.get("errors")?.as_u64()?,
        acme_rate,
    })
}

/// One customer's paced traffic to one proxy.
#[derive(Debug, Clone)]
pub struct Stream {
    proxy: usize,
    addr: SocketAddr,
    customer: &'static str,
    rate: f64,
}

impl Stream {
    /// `rate` requests/s of `customer` (CRITICAL) to proxy number `proxy` at `addr`.
    pub fn new(proxy: usize, addr: SocketAddr, customer: &'static str, rate: f64) -> Stream {
        Stream {
            proxy,
            addr,
            customer,
            rate,
        }
    }
}

/// One answered (or failed) request.
#[derive(Debug, Clone)]
pub struct Record {
    /// The proxy's number.
    pub proxy: usize,
    /// The customer named.
    pub customer: &'static str,
    /// When it was written, from the start of the load.
    pub sent: Duration,
    /// The status, or what went wrong.
    pub result: Result<u16, String>,
}

struct Job {
    customer: &'static str,
    due: Duration,
}

/// Workers per proxy: enough that a slow answer does not hold up the next tick.
const WORKERS: usize = 8;
/// A tick not picked up by a worker within this long is dropped, not sent late.
const STALE: Duration = Duration::from_millis(100);

/// The running generator: a ticker thread per stream feeds a pool of keep-alive workers per
/// proxy.
pub struct Load {
    start: Instant,
    stop_all: Arc<AtomicBool>,
    stop: Vec<Arc<AtomicBool>>,
    threads: Vec<JoinHandle<()>>,
    records: Arc<Mutex<Vec<Record>>>,
    skipped: Arc<Mutex<HashMap<(usize, &'static str), u64>>>,
}

impl Load {
    /// Starts every stream now.
    pub fn start(streams: Vec<Stream>) -> Load {
        let start = Instant::now();
        let proxies = streams.iter().map(|s| s.proxy + 1).max().unwrap_or(0);
        let stop_all = Arc::new(AtomicBool::new(false));
        let stop: Vec<_> = (0..proxies)
            .map(|_| Arc::new(AtomicBool::new(false)))
            .collect();
        let records = Arc::new(Mutex::new(Vec::new()));
        let skipped = Arc::new(Mutex::new(HashMap::new()));
        let mut threads = Vec::new();
        let mut senders = Vec::new();
        for (p, stop_p) in stop.iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Job>();
            senders.push(tx);
            let rx = Arc::new(Mutex::new(rx));
            let Some(addr) = streams.iter().find(|s| s.proxy == p).map(|s| s.addr) else {
                continue;
            };
            for _ in 0..WORKERS {
                let (rx, records, skipped) = (rx.clone(), records.clone(), skipped.clone());
                let stopped = [stop_all.clone(), stop_p.clone()];
                threads.push(std::thread::spawn(move || {
                    worker(p, addr, start, rx, records, skipped, stopped)
                }));
            }
        }
        for s in streams {
            let tx = senders[s.proxy].clone();
            let stopped = [stop_all.clone(), stop[s.proxy].clone()];
            let skipped = skipped.clone();
            threads.push(std::thread::spawn(move || {
                let gap = Duration::from_secs_f64(1.0 / s.rate);
                let mut k: u32 = 0;
                while !stopped.iter().any(|f| f.load(Ordering::Relaxed)) {
                    let due = gap * k;
                    let now = start.elapsed();
                    if now < due {
                        std::thread::sleep(due - now);
                    }
                    let job = Job {
                        customer: s.customer,
                        due,
                    };
                    if tx.send(job).is_err() {
                        return;
                    }
                    k += 1;
                    // Ticks missed while this thread was not scheduled are skipped, not sent
                    // in a burst: a burst would offer more than `rate` within a second.
                    let late = start.elapsed().saturating_sub(gap * k);
                    if late > gap {
                        let missed = (late.as_secs_f64() / gap.as_secs_f64()) as u32;
                        k += missed;
                        *skipped
                            .lock()
                            .unwrap()
                            .entry((s.proxy, s.customer))
                            .or_default() += u64::from(missed);
                    }
                }
            }));
        }
        Load {
            start,
            stop_all,
            stop,
            threads,
            records,
            skipped,
        }
    }

    /// Time since the load started (the clock of [`Record::sent`]).
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Stops the traffic to proxy `p`.
    pub fn stop_proxy(&self, p: usize) {
        self.stop[p].store(true, Ordering::Relaxed);
    }

    /// Stops everything and returns every request's outcome.
    pub fn finish(mut self) -> Outcomes {
        self.stop_all.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut self.threads) {
            t.join().expect("a load thread");
        }
        let mut records = std::mem::take(&mut *self.records.lock().unwrap());
        records.sort_by_key(|r| r.sent);
        let skipped = std::mem::take(&mut *self.skipped.lock().unwrap());
        Outcomes { records, skipped }
    }
}

/// A test that fails mid-run stops its load too (rather than leave threads sending to
/// processes that are being killed).
impl Drop for Load {
    fn drop(&mut self) {
        self.stop_all.store(true, Ordering::Relaxed);
    }
}

fn worker(
    proxy: usize,
    addr: SocketAddr,
    start: Instant,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    records: Arc<Mutex<Vec<Record>>>,
    skipped: Arc<Mutex<HashMap<(usize, &'static str), u64>>>,
    stopped: [Arc<AtomicBool>; 2],
) {
    let mut conn: Option<TcpStream> = None;
    while !stopped.iter().any(|f| f.load(Ordering::Relaxed)) {
        let job = rx.lock().unwrap().recv_timeout(Duration::from_millis(50));
        let Ok(job) = job else { continue };
        let sent = start.elapsed();
        if sent > job.due + STALE {
            *skipped
                .lock()
                .unwrap()
                .entry((proxy, job.customer))
                .or_default() += 1;
            continue;
        }
        let result = (|| {
            if conn.is_none() {
                conn = Some(connect(addr).ok_or("connect failed")?);
            }
            let s = conn.as_mut().expect("connected above");
            write!(
                s,
                "GET / HTTP/1.1\r\nhost: test\r\nx-spillway-customer: {}\r\n\
                 x-spillway-criticality: CRITICAL\r\n\r\n",
                job.customer
            )
            .map_err(|e| format!("write: {e}"))?;
            read_response(s).map_err(|e| format!("read: {e}"))
        })();
        let result = match result {
            Ok((status, head, _)) => {
                if head.contains("connection: close") {
                    conn = None;
                }
                Ok(status)
            }
            Err(e) => {
                conn = None;
                Err(e)
            }
        };
        records.lock().unwrap().push(Record {
            proxy,
            customer: job.customer,
            sent,
            result,
        });
    }
}

/// Everything the generator saw.
#[derive(Debug)]
pub struct Outcomes {
    /// Every request, in send order.
    pub records: Vec<Record>,
    /// Ticks dropped because the generator ran late, per (proxy, customer).
    pub skipped: HashMap<(usize, &'static str), u64>,
}

impl Outcomes {
    /// `customer`'s admitted (200) rate over [from, to) by send time, at `proxy` or the whole
    /// fleet, and the count in each whole second of the window.
    pub fn admitted_in(
        &self,
        customer: &str,
        proxy: Option<usize>,
        from: Duration,
        to: Duration,
    ) -> (f64, Vec<u64>) {
        let ok: Vec<Duration> = self
            .records
            .iter()
            .filter(|r| r.customer == customer && proxy.is_none_or(|p| r.proxy == p))
            .filter(|r| r.result == Ok(200) && r.sent >= from && r.sent < to)
            .map(|r| r.sent)
            .collect();
        let secs = (to - from).as_secs();
        let per_second = (0..secs)
            .map(|i| {
                let (a, b) = (
                    from + Duration::from_secs(i),
                    from + Duration::from_secs(i + 1),
                );
                ok.iter().filter(|t| **t >= a && **t < b).count() as u64
            })
            .collect();
        (ok.len() as f64 / (to - from).as_secs_f64(), per_second)
    }

    /// Requests sent per (proxy, customer).
    pub fn offered(&self) -> HashMap<(usize, &'static str), u64> {
        let mut m = HashMap::new();
        for r in &self.records {
            *m.entry((r.proxy, r.customer)).or_default() += 1;
        }
        m
    }

    /// `customer`'s answers with `status`.
    pub fn count(&self, customer: &str, status: u16) -> u64 {
        self.records
            .iter()
            .filter(|r| r.customer == customer && r.result == Ok(status))
            .count() as u64
    }

    /// Requests answered with neither 200 nor 429, or not answered.
    pub fn failures(&self) -> Vec<&Record> {
        self.records
            .iter()
            .filter(|r| !matches!(r.result, Ok(200) | Ok(429)))
            .collect()
    }
}
