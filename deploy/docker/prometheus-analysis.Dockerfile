# syntax=docker/dockerfile:1
# Example plugin: each cluster validated with PromQL checks against Prometheus.
#
#   docker build -f deploy/docker/prometheus-analysis.Dockerfile -t localhost/prometheus-analysis:0.1.0 .
#
# Built from the workspace root (the context: .dockerignore leaves target/
# and .git out). Two stages: the release build with the pinned toolchain and
# the committed Cargo.lock, then the binary alone on distroless (glibc, CA
# certificates, no shell), as the non-root user 65532.

FROM docker.io/library/rust:1.95.0-bookworm AS build
WORKDIR /src
# The toolchain of rust-toolchain.toml, in a layer of its own.
COPY rust-toolchain.toml ./
RUN cargo --version
COPY . .
# The caches make rebuilds incremental; the binary is copied out of them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p prometheus-analysis --bin prometheus-analysis \
    && install -D target/release/prometheus-analysis /out/prometheus-analysis

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="prometheus-analysis" \
      org.opencontainers.image.description="Example plugin: each cluster validated with PromQL checks against Prometheus." \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/prometheus-analysis /usr/local/bin/prometheus-analysis
# distroless's nonroot, by number, so that runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/prometheus-analysis"]
