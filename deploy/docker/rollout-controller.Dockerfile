# syntax=docker/dockerfile:1
# The ManifestWorkReplicaSet controller (rollout-controller run).
#
#   docker build -f deploy/docker/rollout-controller.Dockerfile -t localhost/rollout-controller:0.1.0 \
#     --build-arg ROLLOUT_HOOKS_REVISION=$(git rev-parse --short=12 HEAD) .
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
# The git revision for the build_info series (.git is not in the context);
# empty: no revision label.
ARG ROLLOUT_HOOKS_REVISION=""
# The caches make rebuilds incremental; the binary is copied out of them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p rollout-console --bin rollout-controller \
    && install -D target/release/rollout-controller /out/rollout-controller

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="rollout-controller" \
      org.opencontainers.image.description="The ManifestWorkReplicaSet controller (rollout-controller run)." \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/rollout-controller /usr/local/bin/rollout-controller
# distroless's nonroot, by number, so that runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rollout-controller"]
