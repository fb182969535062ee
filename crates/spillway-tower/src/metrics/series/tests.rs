use super::*;

// The cap is the process's: these tests use a recorder address no recorder has (1), costs
// that reach the default cap, and never lower it below what the other tests of this crate use.

#[test]
fn label_sets_are_kept_until_the_family_is_full_and_then_refused() {
    let fam = "test_series_full";
    let cost = DEFAULT_MAX_SERIES / 3;
    assert!(admit(1, fam, "a", cost));
    assert!(admit(1, fam, "b", cost));
    assert!(admit(1, fam, "c", cost));
    assert!(!admit(1, fam, "d", cost), "past the cap");
    assert!(admit(1, fam, "a", cost), "a kept label set stays");
    assert!(!admit(1, fam, "d", cost), "a refused one stays refused");
    assert!(
        admit(1, "test_series_other_family", "d", cost),
        "families are apart"
    );
}

#[test]
fn a_histogram_costs_its_series() {
    let fam = "test_series_histogram";
    let fit = DEFAULT_MAX_SERIES / HISTOGRAM_SERIES;
    for i in 0..fit {
        assert!(admit(
            1,
            fam,
            &key(&["op", &i.to_string()]),
            HISTOGRAM_SERIES
        ));
    }
    assert!(!admit(1, fam, &key(&["op", "more"]), HISTOGRAM_SERIES));
}

#[test]
fn keys_keep_values_apart() {
    assert_ne!(key(&["a", "bc"]), key(&["ab", "c"]));
    assert_eq!(key(&["a", "b"]), "a\u{1f}b");
}

#[test]
fn setting_the_same_cap_keeps_the_generation() {
    // (Another value would race the other tests of this crate, which fill the default cap.)
    let g = generation();
    set_max_series_per_family(DEFAULT_MAX_SERIES);
    assert_eq!(generation(), g, "the same cap changes nothing");
    assert_eq!(max_series_per_family(), DEFAULT_MAX_SERIES);
}

#[test]
fn each_recorder_has_its_own_series() {
    let fam = "test_series_recorders";
    assert!(admit(2, fam, "a", DEFAULT_MAX_SERIES));
    assert!(!admit(2, fam, "b", 1));
    assert!(admit(3, fam, "b", 1), "another recorder starts empty");
}
