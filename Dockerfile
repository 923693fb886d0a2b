# syntax=docker/dockerfile:1
# nfguard: one image for the reporter, controller and webhook.
#   docker build -t ghcr.io/nfguard/nfguard:dev .
# Without Docker (the same stage, this machine's libraries): scripts/build-image.sh
# The final image holds only the nfguard binary and the C runtime: nfguard
# reads netfilter state through netlink/getsockopt itself and never runs or
# ships iptables or nft (tests/it/install_dockerfile.rs checks this file).

ARG RUST_VERSION=1.89
# Base images by tag here; a release builds with both pinned by digest
# (.github/workflows/release.yml resolves the tags once and passes
# name:tag@sha256:... for both architectures; docs/release.md).
ARG BUILDER_IMAGE=rust:${RUST_VERSION}-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# ---- build -----------------------------------------------------------------
FROM ${BUILDER_IMAGE} AS builder
# libclang-dev: bindgen of -sys crates; pkg-config: their build scripts.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin nfguard \
 && install -D -m 0755 target/release/nfguard /out/nfguard

# ---- run -------------------------------------------------------------------
# distroless/cc: glibc, libgcc, CA certificates, /etc/passwd with "nonroot";
# no shell, no package manager, no iptables.
FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=builder /out/nfguard /usr/local/bin/nfguard
# The controller and the webhook run as this non-root user with a read-only
# root filesystem (manifests/ set readOnlyRootFilesystem). The reporter's
# DaemonSet overrides it with runAsUser 0 and CAP_NET_ADMIN only (all other
# capabilities dropped, not privileged): nf_tables netlink dumps and
# IPT_SO_GET_INFO/IPT_SO_GET_ENTRIES require CAP_NET_ADMIN, and the node's
# files it reads under /host (dpkg status, alternatives, binaries) are owned
# by root. It never writes netfilter state.
USER 65532:65532
# distroless's own settings, spelled out: scripts/build-image.sh builds the
# same stage without Docker, and tests/it/install_dockerfile.rs compares the two.
WORKDIR /home/nonroot
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/nfguard"]
