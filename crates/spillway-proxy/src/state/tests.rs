use std::sync::Arc;

use super::*;

fn state(toml: &str) -> Arc<ProxyState> {
    let cfg = config::parse(toml, "t.toml").expect("valid config");
    ProxyState::new(cfg, "t.toml", None).expect("state")
}

const BASE: &str = "[admin]\nenabled = false\n[upstream]\naddresses = [\"127.0.0.1:9\"]\n";

#[test]
fn the_thread_snapshot_is_reused_until_a_reload_then_replaced() {
    let s = state(BASE);
    let a = s.current();
    let b = s.current();
    assert!(
        Arc::ptr_eq(&a, &b),
        "one snapshot per thread and configuration"
    );
    assert!(Arc::ptr_eq(&a.rt, &s.runtime()));

    s.reload_from_str(
        &format!("{BASE}[[routes]]\nname = \"r\"\npath = \"/r\"\n"),
        "new",
    )
    .expect("valid reload");
    let c = s.current();
    assert!(
        !Arc::ptr_eq(&a, &c),
        "a reload takes effect for the next request"
    );
    assert!(Arc::ptr_eq(&c.rt, &s.runtime()));
    assert_eq!(c.rt.router.routes().count(), 1);
    // The request that started before the reload keeps the runtime it started with.
    assert_eq!(a.rt.router.routes().count(), 0);

    // A refused reload leaves the snapshot as it is.
    assert!(s
        .reload_from_str("[upstream]\naddresses = []\n", "bad")
        .is_err());
    assert!(Arc::ptr_eq(&c, &s.current()));
}

#[test]
fn each_state_gets_its_own_snapshot_on_one_thread() {
    let (s1, s2) = (state(BASE), state(BASE));
    let (a, b) = (s1.current(), s2.current());
    assert!(Arc::ptr_eq(&a.state, &s1) && Arc::ptr_eq(&b.state, &s2));
    assert!(Arc::ptr_eq(&s1.current().rt, &s1.runtime()));
    assert!(Arc::ptr_eq(&s2.current().rt, &s2.runtime()));
}
