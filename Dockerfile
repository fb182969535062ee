# The `spillway` binary in a small, non-root runtime image.
#
#   docker build -t spillway .                          # plain
#   docker build -t spillway --build-arg FEATURES=tls . # with TLS (listener, upstreams, rediss://)
#   docker run --rm -v "$PWD/proxy.toml:/etc/spillway/proxy.toml:ro" -p 8080:8080 spillway
#
# The build stage's Rust must be at least the workspace's `rust-version` (tests/deploy.rs
# checks it). The runtime stage is distroless: glibc and libgcc only (TLS is rustls, so no
# OpenSSL), no shell, running as uid 65532.

# Images by their full names: podman and buildah resolve no short name unless
# registries.conf lists search registries, which Debian's does not.
ARG RUST_VERSION=1.88
FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
ARG FEATURES=""
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin spillway --features "${FEATURES}" \
 && strip target/release/spillway

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/spillway /usr/local/bin/spillway
USER 65532:65532
# 8080: the proxy's listener; 9901: its admin (/ready, /live, /metrics).
EXPOSE 8080 9901
ENTRYPOINT ["/usr/local/bin/spillway"]
CMD ["proxy", "--config", "/etc/spillway/proxy.toml"]
