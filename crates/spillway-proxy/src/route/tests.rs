use super::*;

fn pm(p: &str) -> PathMatch {
    PathMatch::Glob(p.split('/').map(str::to_string).collect())
}

#[test]
fn globs() {
    assert!(pm("/api/*/items").matches("/api/v1/items", true));
    assert!(!pm("/api/*/items").matches("/api/v1/x/items", true));
    assert!(pm("/api/**/items").matches("/api/v1/x/items", true));
    assert!(pm("/api/**").matches("/api", true));
    assert!(pm("/static/*.css").matches("/static/a.css", true));
    assert!(!pm("/static/*.css").matches("/static/a.js", true));
    assert!(pm("/pkg.*/Method").matches("/pkg.Service/Method", true));
    assert!(PathMatch::Prefix("/api/".into()).matches("/api/x", true));
    assert!(pm("/a*b*c/x").matches("/aXbYc/x", true));
    assert!(!pm("/a*b*c/x").matches("/aXbY/x", true));
    assert!(!pm("/ab*ba").matches("/aba", true));
}

#[test]
fn case_is_ignored_unless_asked_for() {
    assert!(pm("/api/export/**").matches("/API/Export/x", false));
    assert!(!pm("/api/export/**").matches("/API/Export/x", true));
    assert!(pm("/static/*.CSS").matches("/Static/a.css", false));
    assert!(pm("/a*B*c").matches("/AxbXC", false));
    assert!(!pm("/a*B*c").matches("/AxbXC", true));
    let p = PathMatch::Prefix("/api/export".into());
    assert!(p.matches("/Api/EXPORT/x", false));
    assert!(!p.matches("/Api/EXPORT/x", true));
    // On segment boundaries: the prefix `/batch` is not `/batchjobs`.
    let p = PathMatch::Prefix("/batch".into());
    assert!(p.matches("/batch", true) && p.matches("/batch/1", true));
    assert!(!p.matches("/batchjobs", true) && !p.matches("/BATCHjobs", false));
}

fn router(toml: &str) -> Router {
    let cfg = crate::config::parse(toml, "t").unwrap();
    Router::new(&cfg).unwrap()
}

fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

const CFG: &str = r#"
    [classify]
    trusted = ["10.0.0.0/8"]
    customer_from = "header"
    [[routes]]
    name = "batch"
    methods = ["POST"]
    path = "/batch/"
    criticality = "SHEDDABLE"
    cost = 5.0
    [[routes]]
    name = "admin"
    path = "/"
    headers = { "x-admin" = "yes" }
    criticality = "CRITICAL_PLUS"
"#;

#[test]
fn route_method_and_header_matching() {
    let r = router(CFG);
    let now = Instant::now();
    let c = r
        .classify(&parts("POST", "/batch/x", &[]), None, now)
        .unwrap();
    assert_eq!(&*c.operation, "batch");
    assert_eq!(c.criticality, Criticality::Sheddable);
    assert_eq!(c.cost, 5.0);
    let c = r
        .classify(&parts("GET", "/batch/x", &[]), None, now)
        .unwrap();
    assert_eq!(&*c.operation, "other");
    assert_eq!(c.criticality, Criticality::Critical);
    let c = r
        .classify(&parts("GET", "/x", &[("x-admin", "yes")]), None, now)
        .unwrap();
    assert_eq!(c.criticality, Criticality::CriticalPlus);
}

#[test]
fn unmatched_requests_share_one_operation_name() {
    let r = router(CFG);
    let now = Instant::now();
    let a = r
        .classify(&parts("GET", "/nowhere", &[]), None, now)
        .unwrap();
    let b = r.classify(&parts("PUT", "/else", &[]), None, now).unwrap();
    assert_eq!(&*a.operation, UNMATCHED_OPERATION);
    // The same allocation, not one per request.
    assert!(Arc::ptr_eq(&a.operation, &b.operation));
}

#[test]
fn the_default_customer_has_one_header_value() {
    let r = router(CFG);
    let now = Instant::now();
    let untrusted = "192.0.2.1:1".parse().ok();
    let h = [("x-spillway-customer", "mallory")];
    let a = r.classify(&parts("GET", "/", &h), untrusted, now).unwrap();
    let b = r.classify(&parts("GET", "/", &[]), None, now).unwrap();
    let (va, vb) = (r.customer_value(&a.customer), r.customer_value(&b.customer));
    assert_eq!(va.as_ref().map(|v| v.as_bytes()), Some(&b"default"[..]));
    assert_eq!(
        va.map(|v| v.as_bytes().as_ptr()),
        vb.map(|v| v.as_bytes().as_ptr()),
        "made once, shared"
    );
    // A customer named by a trusted peer is not the default: its own header stays.
    let trusted = "10.1.2.3:1".parse().ok();
    let h = [("x-spillway-customer", "acme")];
    let c = r.classify(&parts("GET", "/", &h), trusted, now).unwrap();
    assert_eq!(&*c.customer, "acme");
    assert!(r.customer_value(&c.customer).is_none());
}

#[test]
fn criticality_and_customer_only_from_trusted() {
    let r = router(CFG);
    let now = Instant::now();
    let h = [
        ("x-spillway-criticality", "CRITICAL_PLUS"),
        ("x-spillway-customer", "acme"),
    ];
    let untrusted: SocketAddr = "192.168.1.1:5".parse().unwrap();
    let trusted: SocketAddr = "10.1.2.3:5".parse().unwrap();
    let c = r
        .classify(&parts("POST", "/batch/", &h), Some(untrusted), now)
        .unwrap();
    assert_eq!(c.criticality, Criticality::Sheddable);
    assert_eq!(&*c.customer, "default");
    let c = r
        .classify(&parts("POST", "/batch/", &h), Some(trusted), now)
        .unwrap();
    assert_eq!(c.criticality, Criticality::CriticalPlus);
    assert_eq!(&*c.customer, "acme");
    let bad = [("x-spillway-criticality", "urgent")];
    let e = r
        .classify(&parts("GET", "/", &bad), Some(trusted), now)
        .unwrap_err();
    assert!(e.to_string().contains("x-spillway-criticality"), "{e}");
    // Untrusted: the malformed header is ignored, not an error.
    assert!(r
        .classify(&parts("GET", "/", &bad), Some(untrusted), now)
        .is_ok());
}

#[test]
fn api_keys_from_anyone() {
    let r = router(
        r#"
        [classify]
        customer_from = "api_key"
        api_keys = { "k1" = "acme" }
        default_customer = "anon"
    "#,
    );
    let now = Instant::now();
    let c = r
        .classify(&parts("GET", "/", &[("x-api-key", "k1")]), None, now)
        .unwrap();
    assert_eq!(&*c.customer, "acme");
    let c = r
        .classify(&parts("GET", "/", &[("x-api-key", "nope")]), None, now)
        .unwrap();
    assert_eq!(&*c.customer, "anon");
}
