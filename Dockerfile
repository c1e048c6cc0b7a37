# kstreamd container image: a static binary on distroless, run as a non-root
# user, with /data (state and checkpoints) as a volume.
#
#   docker build -t kstreamd --build-arg VERSION="$(git describe --tags --always)" .
#   docker run --rm -p 9249:9249 -v kstreamd-data:/data \
#     -v "$PWD/configs/colorshape-docker.yaml:/etc/kstreamd/pipeline.yaml:ro" kstreamd
#
# docker-compose.yml builds this image and runs it next to Kafka, Prometheus
# and Grafana. The pipeline file is mounted, never baked in; its
# metrics.address must listen on 0.0.0.0 for Prometheus to reach it.
#
# Only classic Dockerfile syntax is used (no BuildKit-only mounts), so both
# `docker compose` and Debian's docker-compose 1.29 build it.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
# VERSION is what `kstreamd version` prints.
ARG VERSION=dev
WORKDIR /src
# Dependencies first: this layer stays cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download && go mod verify
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/kstreamd/kstreamd/sdk.Version=${VERSION}" \
        -o /out/kstreamd ./cmd/kstreamd \
    && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="kstreamd" \
      org.opencontainers.image.description="Kafka-native stateful stream processor" \
      org.opencontainers.image.source="https://github.com/kstreamd/kstreamd" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/kstreamd /usr/local/bin/kstreamd
# An empty /data owned by the runtime user: a fresh named volume copies this
# ownership, so the non-root daemon can write its state there.
COPY --from=build --chown=65532:65532 /out/data /data
# 65532 is distroless's "nonroot" user.
USER 65532:65532
WORKDIR /data
VOLUME ["/data"]
# /metrics and /healthz (metrics.address in the pipeline file).
EXPOSE 9249
ENTRYPOINT ["/usr/local/bin/kstreamd"]
CMD ["run", "--config", "/etc/kstreamd/pipeline.yaml"]
