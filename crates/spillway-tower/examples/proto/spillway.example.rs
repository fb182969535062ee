// Generated code for examples/proto/work.proto, checked in so that no system `protoc` is needed.
// Written in the shape tonic-build 0.14 emits (prost messages, `tonic_prost::ProstCodec`);
// regenerate with tonic-prost-build if the .proto changes.

/// Request of `Work/Do`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct WorkRequest {
    /// Opaque payload, echoed back.
    #[prost(string, tag = "1")]
    pub payload: ::prost::alloc::string::String,
}
/// Reply of `Work/Do`: echoes the context the serving task saw.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct WorkReply {
    /// The request's payload.
    #[prost(string, tag = "1")]
    pub payload: ::prost::alloc::string::String,
    /// Criticality the serving task saw (after propagation).
    #[prost(string, tag = "2")]
    pub criticality: ::prost::alloc::string::String,
    /// Remaining deadline in milliseconds the serving task saw; 0 = none.
    #[prost(int64, tag = "3")]
    pub deadline_ms: i64,
    /// Attempt number the serving task saw (1 = first).
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
    /// Which service answered.
    #[prost(string, tag = "5")]
    pub served_by: ::prost::alloc::string::String,
}
/// Generated client implementations.
pub mod work_client {
    #![allow(
        unused_variables,
        dead_code,
        missing_docs,
        clippy::wildcard_imports,
        clippy::let_unit_value
    )]
    use tonic::codegen::http::Uri;
    use tonic::codegen::*;
    /// Client for the `spillway.example.Work` service.
    #[derive(Debug, Clone)]
    pub struct WorkClient<T> {
        inner: tonic::client::Grpc<T>,
    }
    impl<T> WorkClient<T>
    where
        T: tonic::client::GrpcService<tonic::body::Body>,
        T::Error: Into<StdError>,
        T::ResponseBody: Body<Data = Bytes> + std::marker::Send + 'static,
        <T::ResponseBody as Body>::Error: Into<StdError> + std::marker::Send,
    {
        pub fn new(inner: T) -> Self {
            let inner = tonic::client::Grpc::new(inner);
            Self { inner }
        }
        pub fn with_origin(inner: T, origin: Uri) -> Self {
            let inner = tonic::client::Grpc::with_origin(inner, origin);
            Self { inner }
        }
        /// Limits the maximum size of a decoded message.
        #[must_use]
        pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
            self.inner = self.inner.max_decoding_message_size(limit);
            self
        }
        /// Limits the maximum size of an encoded message.
        #[must_use]
        pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
            self.inner = self.inner.max_encoding_message_size(limit);
            self
        }
        /// Does one unit of work; the reply echoes the context the server saw.
        pub async fn r#do(
            &mut self,
            request: impl tonic::IntoRequest<super::WorkRequest>,
        ) -> std::result::Result<tonic::Response<super::WorkReply>, tonic::Status> {
            self.inner.ready().await.map_err(|e| {
                tonic::Status::unknown(format!("Service was not ready: {}", e.into()))
            })?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static("/spillway.example.Work/Do");
            let mut req = request.into_request();
            req.extensions_mut()
                .insert(GrpcMethod::new("spillway.example.Work", "Do"));
            self.inner.unary(req, path, codec).await
        }
    }
}
/// Generated server implementations.
pub mod work_server {
    #![allow(
        unused_variables,
        dead_code,
        missing_docs,
        clippy::wildcard_imports,
        clippy::let_unit_value
    )]
    use tonic::codegen::*;
    /// Trait containing the gRPC methods to implement for use with [`WorkServer`].
    #[async_trait]
    pub trait Work: std::marker::Send + std::marker::Sync + 'static {
        /// Does one unit of work; the reply echoes the context the server saw.
        async fn r#do(
            &self,
            request: tonic::Request<super::WorkRequest>,
        ) -> std::result::Result<tonic::Response<super::WorkReply>, tonic::Status>;
    }
    /// Server for the `spillway.example.Work` service.
    #[derive(Debug)]
    pub struct WorkServer<T> {
        inner: Arc<T>,
        accept_compression_encodings: EnabledCompressionEncodings,
        send_compression_encodings: EnabledCompressionEncodings,
        max_decoding_message_size: Option<usize>,
        max_encoding_message_size: Option<usize>,
    }
    impl<T> WorkServer<T> {
        pub fn new(inner: T) -> Self {
            Self::from_arc(Arc::new(inner))
        }
        pub fn from_arc(inner: Arc<T>) -> Self {
            Self {
                inner,
                accept_compression_encodings: Default::default(),
                send_compression_encodings: Default::default(),
                max_decoding_message_size: None,
                max_encoding_message_size: None,
            }
        }
    }
    impl<T, B> tonic::codegen::Service<http::Request<B>> for WorkServer<T>
    where
        T: Work,
        B: Body + std::marker::Send + 'static,
        B::Error: Into<StdError> + std::marker::Send + 'static,
    {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;
        fn poll_ready(
            &mut self,
            _cx: &mut Context<'_>,
        ) -> Poll<std::result::Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            match req.uri().path() {
                "/spillway.example.Work/Do" => {
                    #[allow(non_camel_case_types)]
                    struct DoSvc<T: Work>(pub Arc<T>);
                    impl<T: Work> tonic::server::UnaryService<super::WorkRequest> for DoSvc<T> {
                        type Response = super::WorkReply;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(
                            &mut self,
                            request: tonic::Request<super::WorkRequest>,
                        ) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            let fut = async move { <T as Work>::r#do(&inner, request).await };
                            Box::pin(fut)
                        }
                    }
                    let accept_compression_encodings = self.accept_compression_encodings;
                    let send_compression_encodings = self.send_compression_encodings;
                    let max_decoding_message_size = self.max_decoding_message_size;
                    let max_encoding_message_size = self.max_encoding_message_size;
                    let inner = self.inner.clone();
                    let fut = async move {
                        let method = DoSvc(inner);
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec)
                            .apply_compression_config(
                                accept_compression_encodings,
                                send_compression_encodings,
                            )
                            .apply_max_message_size_config(
                                max_decoding_message_size,
                                max_encoding_message_size,
                            );
                        let res = grpc.unary(method, req).await;
                        Ok(res)
                    };
                    Box::pin(fut)
                }
                _ => Box::pin(async move {
                    let mut response = http::Response::new(tonic::body::Body::default());
                    let headers = response.headers_mut();
                    headers.insert(
                        tonic::Status::GRPC_STATUS,
                        (tonic::Code::Unimplemented as i32).into(),
                    );
                    headers.insert(
                        http::header::CONTENT_TYPE,
                        tonic::metadata::GRPC_CONTENT_TYPE,
                    );
                    Ok(response)
                }),
            }
        }
    }
    impl<T> Clone for WorkServer<T> {
        fn clone(&self) -> Self {
            let inner = self.inner.clone();
            Self {
                inner,
                accept_compression_encodings: self.accept_compression_encodings,
                send_compression_encodings: self.send_compression_encodings,
                max_decoding_message_size: self.max_decoding_message_size,
                max_encoding_message_size: self.max_encoding_message_size,
            }
        }
    }
    /// Generated gRPC service name.
    pub const SERVICE_NAME: &str = "spillway.example.Work";
    impl<T> tonic::server::NamedService for WorkServer<T> {
        const NAME: &'static str = SERVICE_NAME;
    }
}
