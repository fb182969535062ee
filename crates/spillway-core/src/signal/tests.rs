use super::*;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---- pure parsers -------------------------------------------------------------------------

#[test]
fn cpu_max_parses_quota_and_unlimited() {
    assert_eq!(parse_cpu_max("max 100000\n"), Ok(None));
    assert_eq!(parse_cpu_max("max"), Ok(None));
    assert_eq!(parse_cpu_max("200000 100000\n"), Ok(Some(2.0)));
    assert_eq!(parse_cpu_max("50000 100000"), Ok(Some(0.5)));
    assert_eq!(parse_cpu_max("150000"), Ok(Some(1.5)));
}

#[test]
fn cpu_max_rejects_garbage() {
    for s in [
        "",
        "  \n",
        "abc 100000",
        "0 100000",
        "-5 100000",
        "100000 0",
        "100000 -1",
        "max abc",
        "1 2 3",
        "1.5 100000",
        "99999999999999999999999 1",
    ] {
        let e = parse_cpu_max(s).unwrap_err();
        assert!(e.to_string().contains("QUOTA"), "{s:?}: {e}");
    }
}

#[test]
fn cfs_quota_v1() {
    assert_eq!(parse_cfs_quota("-1\n", "100000\n"), Ok(None));
    assert_eq!(parse_cfs_quota("50000\n", "100000\n"), Ok(Some(0.5)));
    assert_eq!(parse_cfs_quota("300000", "100000"), Ok(Some(3.0)));
    assert!(parse_cfs_quota("0", "100000").is_err());
    assert!(parse_cfs_quota("x", "100000").is_err());
    assert!(parse_cfs_quota("100", "0").is_err());
    assert!(parse_cfs_quota("100", "").is_err());
}

#[test]
fn cpu_list_counts() {
    assert_eq!(parse_cpu_list("0-3,8,10-11"), Ok(7));
    assert_eq!(parse_cpu_list("0-1\n"), Ok(2));
    assert_eq!(parse_cpu_list("\t5"), Ok(1));
    assert_eq!(parse_cpu_list("0"), Ok(1));
    assert_eq!(parse_cpu_list("0-63"), Ok(64));
}

#[test]
fn cpu_list_rejects_garbage() {
    for s in [
        "",
        "\n",
        "3-1",
        "a",
        "0-",
        "-3",
        "0-3,,4",
        "0-3,",
        "1-2-3",
        "0-7:2",
        "0-18446744073709551615",
    ] {
        assert!(parse_cpu_list(s).is_err(), "{s:?}");
    }
}

#[test]
fn proc_stat_with_parentheses_and_spaces_in_the_name() {
    let line = "4443 (my (weird) name) )) R 4435 4435 2989 0 -1 4194304 100 0 0 0 17 25 3 4 \
                20 0 1 0 24744 3133440 409 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1\n";
    assert_eq!(parse_proc_stat_cpu(line), Ok(42));
    let plain = "1 (cat) S 0 1 1 0 -1 4194560 1 0 0 0 100000 250 0 0 20 0 1 0 5 0 0";
    assert_eq!(parse_proc_stat_cpu(plain), Ok(100_250));
}

#[test]
fn proc_stat_rejects_garbage() {
    for s in [
        "",
        "no parens at all 1 2 3 4 5 6 7 8 9 10 11 12 13 14",
        "123 (x",
        "123 (x) R 1 2 3",
        "123 (x) R 1 2 3 4 5 6 7 8 9 10 x 12",
        "123 (x) R 1 2 3 4 5 6 7 8 9 10 18446744073709551615 1",
    ] {
        let e = parse_proc_stat_cpu(s).unwrap_err();
        assert!(e.input.len() <= 64);
        assert!(e.to_string().contains("UTIME"), "{s:?}: {e}");
    }
}

#[test]
fn cgroup_path_v2_and_v1() {
    let hybrid = "9:name=systemd:/\n4:memory:/m\n2:cpu,cpuacct:/docker/abc\n0::/user.slice/x\n";
    assert_eq!(parse_cgroup_path(hybrid, None), Some("/user.slice/x"));
    assert_eq!(parse_cgroup_path(hybrid, Some("cpu")), Some("/docker/abc"));
    assert_eq!(
        parse_cgroup_path(hybrid, Some("cpuacct")),
        Some("/docker/abc")
    );
    assert_eq!(parse_cgroup_path(hybrid, Some("cpuset")), None);
    assert_eq!(parse_cgroup_path("0::/\n", None), Some("/"));
    assert_eq!(parse_cgroup_path("garbage\n\n::", None), None);
    assert_eq!(parse_cgroup_path("", Some("cpu")), None);
}

// ---- ProcessCpu on fake and real files ----------------------------------------------------

/// A throwaway directory tree standing in for /proc/self and /sys/fs/cgroup.
struct FakeFs {
    root: PathBuf,
}

use std::path::PathBuf;

impl FakeFs {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "spillway-signal-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        FakeFs { root }
    }
    fn write(&self, rel: &str, contents: &str) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, contents).unwrap();
    }
    fn stat(&self, ticks: u64) {
        self.write(
            "proc/stat",
            &format!("77 (fake app) R 1 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 4 0 1 0 0\n"),
        );
    }
    fn sources(&self) -> CpuSources {
        CpuSources {
            proc_self: self.root.join("proc"),
            cgroup_root: self.root.join("cgroup"),
        }
    }
}

impl Drop for FakeFs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn v2_fs() -> FakeFs {
    let fs = FakeFs::new("v2");
    fs.write(
        "proc/status",
        "Name:\tapp\nCpus_allowed:\tf\nCpus_allowed_list:\t0-3\n",
    );
    fs.write("proc/cgroup", "0::/kubepods/pod1/ctr\n");
    fs.write("cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
    fs.write("cgroup/kubepods/pod1/cpu.max", "150000 100000\n");
    fs.write("cgroup/kubepods/cpu.max", "400000 100000\n");
    fs.stat(0);
    fs
}

#[test]
fn limits_take_the_tightest_ancestor_quota_and_affinity() {
    let fs = v2_fs();
    let l = CpuLimits::detect(&fs.sources());
    assert_eq!(l.affinity, Some(4));
    assert_eq!(l.cgroup_quota, Some(1.5));
    assert!(close(l.effective, 1.5));

    // Affinity tighter than the quota.
    fs.write("proc/status", "Cpus_allowed_list:\t2\n");
    let l = CpuLimits::detect(&fs.sources());
    assert!(close(l.effective, 1.0));
}

#[test]
fn limits_v1_inside_a_container_namespace() {
    // /proc says /docker/abc, but the container sees its own cgroup at the mount root.
    let fs = FakeFs::new("v1");
    fs.write("proc/status", "Cpus_allowed_list:\t0-7\n");
    fs.write(
        "proc/cgroup",
        "3:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n",
    );
    fs.write("cgroup/cpu,cpuacct/cpu.cfs_quota_us", "50000\n");
    fs.write("cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    fs.stat(0);
    let l = CpuLimits::detect(&fs.sources());
    assert_eq!(l.cgroup_quota, Some(0.5));
    assert!(close(l.effective, 0.5));
}

#[test]
fn limits_ignore_unreadable_or_garbage_files() {
    let fs = FakeFs::new("none");
    fs.write("proc/cgroup", "0::/../../etc\n");
    fs.write("cgroup/cpu.max", "garbage\n");
    let l = CpuLimits::detect(&fs.sources());
    assert_eq!(l.affinity, None);
    assert_eq!(l.cgroup_quota, None);
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(close(l.effective, n as f64));
}

#[test]
fn process_cpu_samples_and_smooths_with_injected_time() {
    let fs = v2_fs();
    let t0 = Instant::now();
    let cpu = ProcessCpu::with_sources(ProcessCpuConfig::default(), t0, fs.sources()).unwrap();
    assert!(close(cpu.effective_cpus(), 1.5));
    assert_eq!(cpu.utilisation(t0), 0.0);

    // 15 ticks = 0.15 s of CPU in 0.1 s over 1.5 CPUs: a rate of 1.0.
    fs.stat(15);
    // Before min_interval the file is not re-read.
    assert_eq!(cpu.utilisation(t0 + ms(99)), 0.0);
    let a1 = 1.0 - (-0.1f64).exp();
    assert!(close(cpu.utilisation(t0 + ms(100)), a1));
    // Cached: a later sample within min_interval returns the same value.
    fs.stat(1_000);
    assert!(close(cpu.utilisation(t0 + ms(150)), a1));
    // Rate over 1 s (100 ms .. 1100 ms): 9.85 s CPU / 1 s / 1.5 CPUs.
    let rate = (1_000.0 - 15.0) / 100.0 / 1.5;
    let expect = a1 + (rate - a1) * (1.0 - (-1.0f64).exp());
    assert!(close(cpu.utilisation(t0 + ms(1_100)), expect));
    // An idle second decays by e^-1.
    assert!(close(
        cpu.utilisation(t0 + ms(2_100)),
        expect * (-1.0f64).exp()
    ));
    // Time going backwards never refreshes.
    assert!(close(cpu.utilisation(t0), expect * (-1.0f64).exp()));
    assert_eq!(cpu.read_errors(), 0);
}

#[test]
fn process_cpu_keeps_its_value_when_the_file_vanishes_and_redetects_limits() {
    let fs = v2_fs();
    let t0 = Instant::now();
    let cpu = ProcessCpu::with_sources(ProcessCpuConfig::default(), t0, fs.sources()).unwrap();
    fs.stat(15);
    let v = cpu.utilisation(t0 + ms(100));
    assert!(v > 0.0);
    std::fs::remove_file(fs.root.join("proc/stat")).unwrap();
    assert!(close(cpu.utilisation(t0 + ms(300)), v));
    assert_eq!(cpu.read_errors(), 1);

    // The container is resized; limits are re-read every 10 s.
    fs.write("cgroup/kubepods/pod1/cpu.max", "300000 100000\n");
    fs.stat(15);
    cpu.utilisation(t0 + ms(5_000));
    assert!(close(cpu.effective_cpus(), 1.5));
    cpu.utilisation(t0 + ms(10_500));
    assert!(close(cpu.effective_cpus(), 3.0));
    assert_eq!(cpu.limits().cgroup_quota, Some(3.0));
    assert_eq!(cpu.limits().affinity, Some(4));
}

#[test]
fn process_cpu_errors_say_what_could_not_be_read() {
    let fs = FakeFs::new("err");
    let e = ProcessCpu::with_sources(ProcessCpuConfig::default(), Instant::now(), fs.sources())
        .unwrap_err();
    assert!(matches!(e, SignalError::Read { .. }), "{e}");
    assert!(e.to_string().contains("stat"), "{e}");

    fs.write("proc/stat", "not a stat line\n");
    let e = ProcessCpu::with_sources(ProcessCpuConfig::default(), Instant::now(), fs.sources())
        .unwrap_err();
    assert!(matches!(e, SignalError::Parse { .. }), "{e}");
    assert!(e.to_string().contains("proc/stat"), "{e}");

    let bad = ProcessCpuConfig {
        min_interval: Duration::ZERO,
        ..ProcessCpuConfig::default()
    };
    let e = ProcessCpu::with_sources(bad, Instant::now(), fs.sources()).unwrap_err();
    assert!(e.to_string().contains("process_cpu.min_interval"), "{e}");
}

#[test]
fn process_cpu_config_validation_names_fields() {
    ProcessCpuConfig::default().validate().unwrap();
    let e = ProcessCpuConfig {
        time_constant: Duration::from_secs(7200),
        ..ProcessCpuConfig::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.field, "process_cpu.time_constant");
    let e = ProcessCpuConfig {
        limits_refresh: ms(10),
        ..ProcessCpuConfig::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.field, "process_cpu.limits_refresh");
}

#[test]
fn idle_process_cpu_reads_zero() {
    let t0 = Instant::now();
    let cpu = ProcessCpu::idle(t0);
    assert!(!cpu.is_available());
    assert_eq!(cpu.utilisation(t0 + Duration::from_secs(5)), 0.0);
    assert!(cpu.effective_cpus() >= 1.0);
    assert_eq!(cpu.name(), "process_cpu");
}

#[cfg(target_os = "linux")]
#[test]
fn process_cpu_works_on_this_machine() {
    let t0 = Instant::now();
    let cpu = ProcessCpu::with_config(ProcessCpuConfig::default(), t0).unwrap();
    let eff = cpu.effective_cpus();
    assert!(eff.is_finite() && eff > 0.0, "{eff}");
    if let Some(a) = cpu.limits().affinity {
        assert!(eff <= a as f64);
    }
    // Burn some CPU so the reading has something to see (no timing assertion).
    let mut x = 0u64;
    for i in 0..2_000_000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    std::hint::black_box(x);
    for step in 1..=3 {
        let u = cpu.utilisation(t0 + ms(200 * step));
        assert!(u.is_finite() && u >= 0.0, "{u}");
    }
    assert_eq!(cpu.read_errors(), 0);
    let n = available_cpus();
    assert!(n.is_finite() && n > 0.0);
}

// ---- executor load average ----------------------------------------------------------------

fn ela(cpus: f64) -> (ExecutorLoadAverage, Instant) {
    let t0 = Instant::now();
    let cfg = ExecutorLoadConfig {
        time_constant: Duration::from_secs(1),
        cpus: Some(cpus),
    };
    (ExecutorLoadAverage::new(cfg, t0).unwrap(), t0)
}

#[test]
fn executor_load_average_hand_computed_decay() {
    let (e, t0) = ela(2.0);
    e.record_active(t0, 4);
    let e1 = (-1.0f64).exp();
    // 4 active for 1 s from 0: 4·(1 − e^−1) = 2.528482…
    assert!(close(e.average(t0 + ms(1_000)), 4.0 * (1.0 - e1)));
    e.record_active(t0 + ms(1_000), 0);
    // Then idle for 1 s: decays by e^−1; over 2 CPUs.
    let want = 4.0 * (1.0 - e1) * e1 / 2.0;
    assert!(close(e.utilisation(t0 + ms(2_000)), want));
    assert!((want - 0.465_088).abs() < 1e-6);
    assert_eq!(e.name(), "executor_load_average");
}

#[test]
fn executor_load_average_does_not_depend_on_how_often_it_is_recorded() {
    let (a, t0) = ela(1.0);
    let cfg = ExecutorLoadConfig {
        time_constant: Duration::from_secs(1),
        cpus: Some(1.0),
    };
    let b = ExecutorLoadAverage::new(cfg, t0).unwrap();
    a.record_active(t0, 3);
    b.record_active(t0, 3);
    for k in 1..10 {
        b.record_active(t0 + ms(137 * k), 3);
    }
    let t = t0 + ms(1_500);
    assert!((a.utilisation(t) - b.utilisation(t)).abs() < 1e-12);
}

#[test]
fn executor_load_average_stale_record_only_replaces_the_count() {
    let (e, t0) = ela(1.0);
    e.record_active(t0 + ms(1_000), 2);
    e.record_active(t0 + ms(500), 6); // late arrival from another thread
    let want = 6.0 * (1.0 - (-1.0f64).exp());
    assert!(close(e.average(t0 + ms(2_000)), want));
}

#[test]
fn executor_load_config_validation() {
    ExecutorLoadConfig::default().validate().unwrap();
    let e = ExecutorLoadConfig {
        time_constant: Duration::ZERO,
        cpus: None,
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.field, "executor_load.time_constant");
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = ExecutorLoadConfig {
            cpus: Some(bad),
            ..ExecutorLoadConfig::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "executor_load.cpus");
    }
    let d = ExecutorLoadAverage::new(ExecutorLoadConfig::default(), Instant::now()).unwrap();
    assert!(d.cpus() > 0.0);
}

// ---- simple signals -----------------------------------------------------------------------

#[test]
fn manual_signal_sanitises() {
    let s = ManualSignal::new("orca");
    let t = Instant::now();
    assert_eq!(s.utilisation(t), 0.0);
    s.set(0.7);
    assert!(close(s.utilisation(t), 0.7));
    s.set(f64::NAN);
    assert_eq!(s.get(), 0.0);
    s.set(-3.0);
    assert_eq!(s.get(), 0.0);
    s.set(f64::INFINITY);
    assert_eq!(s.get(), f64::MAX);
    assert_eq!(s.name(), "orca");
}

#[test]
fn fn_signal_and_in_flight() {
    let t = Instant::now();
    let f = FnSignal::new("custom", |_| f64::NAN);
    assert_eq!(f.utilisation(t), 0.0);
    assert!(format!("{f:?}").contains("custom"));

    let in_flight = Arc::new(AtomicUsize::new(3));
    let limit = Arc::new(AtomicUsize::new(4));
    let s = InFlightSignal::new("in_flight", in_flight.clone(), limit.clone());
    assert!(close(s.utilisation(t), 0.75));
    in_flight.store(6, Ordering::Relaxed);
    assert!(close(s.utilisation(t), 1.5));
    limit.store(0, Ordering::Relaxed);
    assert!(close(s.utilisation(t), 6.0));
    assert!(format!("{s:?}").contains("in_flight: 6"));

    let c = InFlightSignal::from_fn("pool", || (1, 8));
    assert!(close(c.utilisation(t), 0.125));
    assert_eq!(c.counts(), (1, 8));
}

#[test]
fn max_signal_takes_the_tightest() {
    let t = Instant::now();
    let a = Arc::new(ManualSignal::new("a"));
    let b = Arc::new(ManualSignal::new("b"));
    let m = MaxSignal::new(
        "max",
        vec![
            a.clone(),
            b.clone(),
            Arc::new(FnSignal::new("nan", |_| f64::NAN)),
        ],
    );
    a.set(0.4);
    b.set(0.9);
    assert!(close(m.utilisation(t), 0.9));
    assert_eq!(m.dominant(t), Some(("b", 0.9)));
    a.set(1.2);
    assert!(close(m.utilisation(t), 1.2));
    assert_eq!(m.dominant(t).map(|d| d.0), Some("a"));
    assert_eq!(m.signals().len(), 3);

    let empty = MaxSignal::new("none", Vec::new());
    assert_eq!(empty.utilisation(t), 0.0);
    assert_eq!(empty.dominant(t), None);
}

#[test]
fn signals_are_object_safe_and_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ProcessCpu>();
    assert_send_sync::<ExecutorLoadAverage>();
    assert_send_sync::<MaxSignal>();
    let _: Arc<dyn LoadSignal> = Arc::new(ProcessCpu::idle(Instant::now()));
}

// ---- concurrency --------------------------------------------------------------------------

#[test]
fn stress_executor_load_average_and_manual_signal() {
    let (e, t0) = ela(2.0);
    let e = Arc::new(e);
    let m = Arc::new(ManualSignal::new("m"));
    m.set(0.2);
    let clock = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for w in 0..4u64 {
        let (e, m, clock) = (e.clone(), m.clone(), clock.clone());
        handles.push(std::thread::spawn(move || {
            for i in 0..20_000u64 {
                let t = t0 + Duration::from_micros(clock.fetch_add(37, Ordering::Relaxed));
                // Active counts in [2, 10]; manual values in [0.2, 0.9].
                e.record_active(t, (2 + (w * 3 + i) % 9) as usize);
                m.set(0.2 + ((w + i) % 8) as f64 * 0.1);
                let u = e.utilisation(t);
                assert!(
                    u.is_finite() && (0.0..=10.0 / 2.0 + 1e-9).contains(&u),
                    "{u}"
                );
                let v = m.get();
                assert!((0.2 - 1e-9..=0.9 + 1e-9).contains(&v), "{v}");
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let end = t0 + Duration::from_micros(clock.load(Ordering::Relaxed));
    let avg = e.average(end);
    // Ran for ~3 s at counts >= 2: the average must have left 0 and stay within the inputs.
    assert!(avg.is_finite() && (1.0..=10.0).contains(&avg), "{avg}");
}

// ---- cgroup CPU usage ----------------------------------------------------------------------

#[test]
fn cgroup_usage_files_parse() {
    let stat = "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\nnr_periods 0\n";
    assert_eq!(
        parse_cpu_stat_usage(stat),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(parse_cpu_stat_usage("user_usec 5\n"), None);
    assert_eq!(parse_cpu_stat_usage("usage_usec x\n"), None);
    assert_eq!(
        parse_cpuacct_usage("2500000000\n"),
        Some(Duration::from_millis(2500))
    );
    assert_eq!(parse_cpuacct_usage("-1\n"), None);
}

#[test]
fn cgroup_usage_v2_is_the_process_own_cgroup() {
    let fs = v2_fs();
    fs.write("cgroup/kubepods/pod1/ctr/cpu.stat", "usage_usec 700\n");
    fs.write("cgroup/kubepods/pod1/cpu.stat", "usage_usec 9000\n");
    assert_eq!(
        cgroup_cpu_usage(&fs.sources()),
        Some(Duration::from_micros(700))
    );
    // Inside a cgroup namespace the path /proc gives does not exist: the mount root is the
    // container's own cgroup.
    let ns = FakeFs::new("v2ns");
    ns.write("proc/cgroup", "0::/kubepods/pod1/ctr\n");
    ns.write("cgroup/cpu.stat", "usage_usec 42\n");
    assert_eq!(
        cgroup_cpu_usage(&ns.sources()),
        Some(Duration::from_micros(42))
    );
}

#[test]
fn cgroup_usage_v1_from_cpuacct_and_none_without_accounting() {
    let fs = FakeFs::new("v1usage");
    fs.write("proc/cgroup", "3:cpu,cpuacct:/docker/abc\n0::/\n");
    fs.write("cgroup/cpu,cpuacct/docker/abc/cpuacct.usage", "123000000\n");
    assert_eq!(
        cgroup_cpu_usage(&fs.sources()),
        Some(Duration::from_millis(123))
    );
    let none = FakeFs::new("nousage");
    none.write("proc/cgroup", "0::/x\n");
    assert_eq!(cgroup_cpu_usage(&none.sources()), None);
}
