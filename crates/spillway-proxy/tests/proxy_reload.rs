//! What SIGHUP runs (`ProxyState::reload_from_file`) and the zero-config form.

mod proxy_support;

use proxy_support::*;
use spillway_proxy::run::{load, start, Source};

#[tokio::test]
async fn reload_from_file_keeps_connections_and_refuses_bad_files() {
    let b = backend("b").await;
    let dir = std::env::temp_dir().join(format!("spillway-proxy-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("proxy.toml");
    let base = format!(
        "[admin]\nenabled = false\n[upstream]\naddresses = [\"{}\"]\n",
        b.addr
    );
    std::fs::write(&path, &base).unwrap();
    let state = load(&Source::File(path.clone())).unwrap();
    let p = start(state, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let c = client(); // one keep-alive connection across the reloads
    assert_eq!(get(&c, p.addr, "/", &[]).await.0, 200);

    std::fs::write(
        &path,
        format!("{base}[[routes]]\nname = \"s\"\npath = \"/s\"\n[routes.degrade]\nthreshold = 0.0\nbody = \"static\"\n"),
    )
    .unwrap();
    p.state.reload_from_file().unwrap();
    assert_eq!(get(&c, p.addr, "/s", &[]).await.2, "static");

    std::fs::write(&path, "[upstream]\naddresses = [\"127.0.0.1\"]\n").unwrap();
    let e = p.state.reload_from_file().unwrap_err();
    assert!(
        e.to_string()
            .contains("proxy.toml:2: upstream.addresses[0]"),
        "{e}"
    );
    assert_eq!(
        get(&c, p.addr, "/s", &[]).await.2,
        "static",
        "old configuration kept"
    );

    std::fs::remove_file(&path).unwrap();
    let e = p.state.reload_from_file().unwrap_err();
    assert!(e.to_string().contains("cannot read the file"), "{e}");
    let st = p.state.status();
    assert_eq!((st.reloads, st.reload_failures), (1, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn zero_config_form() {
    let b = backend("b").await;
    let state = load(&Source::Flags {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstreams: vec![b.addr.to_string()],
        threads: None,
    })
    .unwrap();
    assert!(matches!(
        state.config().admission.limit,
        spillway_core::limit::LimitConfig::EnvoyGradient(_)
    ));
    // Without a file there is nothing to re-read: refused with the reason.
    assert!(state
        .reload_from_file()
        .unwrap_err()
        .to_string()
        .contains("without --config"));
    let p = start(state, None).await.unwrap();
    assert_eq!(get(&client(), p.addr, "/", &[]).await.0, 200);
    let e = load(&Source::Flags {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstreams: vec!["localhost".into()],
        threads: None,
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "command line: upstream.addresses[0]: \"localhost\": expected host:port, e.g. 127.0.0.1:9000"
    );
}

/// `--config FILE --listen ADDR --admin ADDR`: the command line's addresses replace the file's,
/// and a reload of the file keeps them (several fleet instances run from one file).
#[tokio::test]
async fn command_line_addresses_override_the_file_and_survive_reloads() {
    let dir = std::env::temp_dir().join(format!("spillway-proxy-over-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fleet.toml");
    let text = "[listen]\naddress = \"127.0.0.1:8081\"\n[admin]\nlisten = \"127.0.0.1:9911\"\n";
    std::fs::write(&path, text).unwrap();
    let overrides = spillway_proxy::config::Overrides {
        listen: Some("127.0.0.1:8082".parse().unwrap()),
        admin: Some("127.0.0.1:9912".parse().unwrap()),
    };
    let state = load(&Source::FileWith(path.clone(), overrides)).unwrap();
    let check = |cfg: &spillway_proxy::ProxyConfig| {
        assert_eq!(cfg.listen.address.port(), 8082);
        assert_eq!(cfg.admin.listen.port(), 9912);
    };
    check(&state.config());
    std::fs::write(&path, format!("{text}[[routes]]\nname = \"r\"\n")).unwrap();
    state.reload_from_file().unwrap();
    check(&state.config());
    assert_eq!(state.config().routes.len(), 1, "the reload applied");
    let _ = std::fs::remove_dir_all(&dir);
}
