# syncgc: `docker build -t syncgc:dev .` — a static-enough binary on a distroless base that runs
# as a non-root user and needs no shell.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN cargo build --locked --release --bin syncgc

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/syncgc /usr/local/bin/syncgc
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/syncgc"]
CMD ["run"]
