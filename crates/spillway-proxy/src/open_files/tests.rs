use super::{needed, parse_soft};

const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max open files            1024                 524288               files     
Max locked memory         8388608              8388608              bytes     
";

#[test]
fn reads_the_soft_limit_of_open_files() {
    assert_eq!(parse_soft(LIMITS), Some(1024));
}

#[test]
fn unlimited_or_missing_is_no_limit() {
    assert_eq!(
        parse_soft("Max open files            unlimited            unlimited            files\n"),
        None
    );
    assert_eq!(
        parse_soft("Max cpu time  unlimited  unlimited  seconds\n"),
        None
    );
}

#[test]
fn two_descriptors_per_connection_and_a_fixed_reserve() {
    assert_eq!(needed(10_000), 20_256);
    assert_eq!(needed(usize::MAX), u64::MAX);
}

#[cfg(target_os = "linux")]
#[test]
fn this_process_has_a_readable_limit() {
    assert!(super::soft_limit().is_some_and(|l| l > 0));
}
