# syntax=docker/dockerfile:1
# configsum's image for builders with Docker and network (`make image-docker`). It has the
# layout scripts/build-image.sh gives the image `make image` builds with buildah and no daemon
# (docs/image.md): FROM scratch, one static binary, the CA roots, user 65532, no shell.

FROM rust:1.95.0-slim-bookworm AS build
WORKDIR /src
# ca-certificates: the roots copied into the image (configsum has Mozilla's built in; other
# tools in a debug container look here). binutils: strip. Unpinned on purpose: the newest
# roots of the bookworm point release are the ones wanted.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates binutils \
 && rm -rf /var/lib/apt/lists/*
# Dependencies first, in their own layer: rebuilt only when Cargo.toml or Cargo.lock change.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && for bench in review load controller hostile; do echo 'fn main() {}' > "benches/$bench.rs"; done \
 && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --bin configsum --target x86_64-unknown-linux-gnu \
 && rm -rf src benches
COPY src ./src
COPY benches ./benches
# Static (crt-static): no loader or libc in the image. Touch so cargo sees the real sources as
# newer than the placeholder build.
RUN touch src/main.rs src/lib.rs \
 && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --bin configsum --target x86_64-unknown-linux-gnu \
 && install -m 0755 target/x86_64-unknown-linux-gnu/release/configsum /configsum \
 && strip --strip-all /configsum

FROM scratch
COPY --from=build /configsum /configsum
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# Two malloc arenas, not one per thread: the webhook parses megabyte reviews on short-lived
# threads, and per-thread arenas kept what they freed (docs/image.md).
ENV MALLOC_ARENA_MAX=2
USER 65532:65532
EXPOSE 8443/tcp 9090/tcp
ENTRYPOINT ["/configsum"]
