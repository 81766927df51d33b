# syncgc: `docker build -t syncgc:dev .` — a static-enough binary on a distroless base that runs
# as a non-root user and needs no shell.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# The commit for `syncgc --version` and syncgc_build_info (the build context has no .git):
# `docker build --build-arg SYNCGC_COMMIT=$(git rev-parse --short=12 HEAD) ...`.
ARG SYNCGC_COMMIT=unknown
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY benches ./benches
RUN SYNCGC_COMMIT="$SYNCGC_COMMIT" cargo build --locked --release --bin syncgc

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/syncgc /usr/local/bin/syncgc
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/syncgc"]
CMD ["run"]
