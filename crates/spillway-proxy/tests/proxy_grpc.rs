//! gRPC through the proxy: a tonic unary call, and a bidirectional stream whose frames must
//! cross the proxy one by one (never buffered) with the trailers intact.

mod proxy_support;

#[allow(clippy::all, missing_docs)]
mod pb {
    include!("../../spillway-tower/examples/proto/spillway.example.rs");
}

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use pb::work_client::WorkClient;
use pb::work_server::{Work, WorkServer};
use pb::{WorkReply, WorkRequest};
use proxy_support::*;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

struct Svc;

#[tonic::async_trait]
impl Work for Svc {
    async fn r#do(
        &self,
        req: tonic::Request<WorkRequest>,
    ) -> Result<tonic::Response<WorkReply>, tonic::Status> {
        let crit = req
            .metadata()
            .get("x-spillway-criticality")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let payload = req.into_inner().payload;
        if payload == "fail" {
            return Err(tonic::Status::not_found("no such thing"));
        }
        Ok(tonic::Response::new(WorkReply {
            payload,
            criticality: crit,
            served_by: "tonic".into(),
            ..Default::default()
        }))
    }
}

#[tokio::test]
async fn tonic_unary_through_the_proxy() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkServer::new(Svc))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
    );
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{addr}\"]\n")).await;
    let ch = tonic::transport::Channel::from_shared(format!("http://{}", p.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = WorkClient::new(ch);
    let r = c
        .r#do(WorkRequest {
            payload: "hi".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.payload.as_str(), r.served_by.as_str()), ("hi", "tonic"));
    assert_eq!(
        r.criticality, "CRITICAL",
        "the proxy forwards the criticality it decided"
    );
    // An application error's status (sent in trailers or trailers-only) arrives intact.
    let e = c
        .r#do(WorkRequest {
            payload: "fail".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert_eq!(e.message(), "no such thing");
}

/// An h2c server echoing each request DATA frame as it arrives, then `grpc-status: 0` trailers.
async fn echo_stream_server() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            tokio::spawn(async move {
                let svc = service_fn(|req: hyper::Request<Incoming>| async move {
                    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
                    tokio::spawn(async move {
                        let mut body = req.into_body();
                        while let Some(Ok(f)) = body.frame().await {
                            if let Ok(d) = f.into_data() {
                                let _ = tx.send(Ok(Frame::data(d))).await;
                            }
                        }
                        let mut t = http::HeaderMap::new();
                        t.insert("grpc-status", "0".parse().unwrap());
                        t.insert("grpc-message", "done".parse().unwrap());
                        let _ = tx.send(Ok(Frame::trailers(t))).await;
                    });
                    let mut res = hyper::Response::new(StreamBody::new(ReceiverStream::new(rx)));
                    res.headers_mut()
                        .insert("content-type", "application/grpc".parse().unwrap());
                    Ok::<_, Infallible>(res)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

/// A bidi call to the echo stream through the proxy at `addr`, its first message ("one")
/// sent: the sender of the next messages, and the call's answer to come.
async fn open_echo_stream(
    addr: std::net::SocketAddr,
) -> (
    mpsc::Sender<Result<Frame<Bytes>, Infallible>>,
    tokio::task::JoinHandle<hyper::Result<hyper::Response<Incoming>>>,
) {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
            .await
            .unwrap();
    tokio::spawn(conn);
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
    let req = hyper::Request::post(format!("http://{addr}/pkg.Echo/Stream"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(StreamBody::new(ReceiverStream::new(rx)))
        .unwrap();
    let res_fut = tokio::spawn(async move { send.send_request(req).await });
    tx.send(Ok(Frame::data(Bytes::from_static(b"one"))))
        .await
        .unwrap();
    (tx, res_fut)
}

#[tokio::test]
async fn bidirectional_stream_is_not_buffered_and_keeps_trailers() {
    let up = echo_stream_server().await;
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{up}\"]\n")).await;
    let (tx, res_fut) = open_echo_stream(p.addr).await;
    let res = tokio::time::timeout(Duration::from_secs(5), res_fut)
        .await
        .expect("response head while the request stream is still open")
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    // Each message makes the round trip before the next is sent: nothing waits for the end.
    for (i, msg) in ["one", "two", "three"].iter().enumerate() {
        if i > 0 {
            tx.send(Ok(Frame::data(Bytes::from_static(msg.as_bytes()))))
                .await
                .unwrap();
        }
        let f = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("echo of a message while the stream is open")
            .unwrap()
            .unwrap();
        assert_eq!(f.into_data().unwrap(), Bytes::from_static(msg.as_bytes()));
    }
    drop(tx);
    let mut trailers = None;
    while let Some(f) = body.frame().await {
        if let Ok(t) = f.unwrap().into_trailers() {
            trailers = Some(t);
        }
    }
    let t = trailers.expect("trailers");
    assert_eq!(t["grpc-status"], "0");
    assert_eq!(t["grpc-message"], "done");
    // The permit was held for the stream and released at its end.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(p.state.status().admission.in_flight, 0);
}

#[tokio::test]
async fn a_quiet_grpc_stream_outlives_the_body_and_send_timeouts() {
    // A gRPC stream's silences are the protocol's (a client stream may send its next message
    // much later): the stall rules for slow uploads and unread answers leave it alone.
    let up = echo_stream_server().await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{up}\"]\n[listen]\nheader_read_timeout_ms = 200\n\
         body_read_timeout_ms = 300\nsend_timeout_ms = 300\n"
    ))
    .await;
    let (tx, res_fut) = open_echo_stream(p.addr).await;
    let res = res_fut.await.unwrap().unwrap();
    let mut body = res.into_body();
    for msg in ["one", "two"] {
        if msg == "two" {
            // Quiet both ways for several of each timeout.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            tx.send(Ok(Frame::data(Bytes::from_static(b"two"))))
                .await
                .unwrap();
        }
        let f = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("the stream is still open")
            .unwrap()
            .unwrap();
        assert_eq!(f.into_data().unwrap(), Bytes::from_static(msg.as_bytes()));
    }
    let faults = p.state.status().faults.0;
    assert_eq!((faults["body_timeout"], faults["send_timeout"]), (0, 0));
}

#[tokio::test]
async fn refusals_reach_grpc_clients_as_status_codes() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkServer::new(Svc))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
    );
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{addr}\"]\n[classify]\ndefault_criticality = \"SHEDDABLE\"\n"
    ))
    .await;
    let ch = tonic::transport::Channel::from_shared(format!("http://{}", p.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = WorkClient::new(ch);
    p.state
        .controls()
        .set_shed_below(Some(spillway_core::Criticality::Critical));
    let e = c
        .r#do(WorkRequest {
            payload: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert!(
        e.message().contains("shed by an operator"),
        "{}",
        e.message()
    );
    assert_eq!(e.metadata().get("grpc-retry-pushback-ms").unwrap(), "-1");
    p.state.controls().set_shed_below(None);
    assert!(c
        .r#do(WorkRequest {
            payload: "x".into()
        })
        .await
        .is_ok());
}
