//! The example configurations under `examples/proxy/` stay valid.

#[test]
fn example_configs_parse() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/proxy");
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("examples/proxy exists") {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err(e) = spillway_proxy::config::parse(&text, &path.display().to_string()) {
                panic!("{e}");
            }
            n += 1;
        }
    }
    assert!(n >= 3, "found {n} examples");
}
