use super::window_ns;
use crate::Scenario;

#[test]
fn the_window_is_the_smallest_delay_of_any_layer() {
    let sc = Scenario::from_toml(
        r#"
name = "w"
duration_s = 1
shards = 2

[[client]]
name = "users"
load = { shape = "constant", rps = 10 }

[[layer]]
name = "api"
calls = 1
service = { dist = "exp", mean_ms = 10 }
network_ms = 2

[[layer]]
name = "db"
service = { dist = "exp", mean_ms = 10 }
network_ms = 0.25
"#,
        "window test",
    )
    .expect("valid");
    assert_eq!(window_ns(&sc), 250_000);
}
