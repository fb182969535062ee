//! The request body as sent upstream: what it announces (length, end) for each kind.

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;

use super::{RequestBody, UnreadRequestBody};

#[tokio::test]
async fn full_and_empty_bodies_announce_their_length() {
    let b = RequestBody::full(Bytes::from_static(b"hello"));
    assert_eq!(b.size_hint().exact(), Some(5));
    assert!(!b.is_end_stream());
    assert_eq!(b.collect().await.unwrap().to_bytes(), "hello");
    let e = RequestBody::empty();
    assert!(e.is_end_stream());
    assert_eq!(e.size_hint().exact(), Some(0));
    let z = RequestBody::full(Bytes::new());
    assert!(
        z.is_end_stream(),
        "no bytes: ended, like http-body-util's Full"
    );
}

#[tokio::test]
async fn a_streamed_body_with_nothing_to_read_has_ended() {
    let b = RequestBody::streamed(UnreadRequestBody::empty());
    assert!(b.is_end_stream());
    assert_eq!(b.size_hint().exact(), Some(0));
    assert!(b.collect().await.unwrap().to_bytes().is_empty());
}
