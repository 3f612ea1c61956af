# syntax=docker/dockerfile:1
# Switchyard: one static binary for every role (frontend, worker, bridge, bench, ...).
#   docker build -t switchyard .
#   docker run --rm -p 8000:8000 switchyard            # `up`: embedded NATS, frontend, two simulated workers
#   docker run --rm switchyard frontend --help
# Deployment files for Kubernetes are in deploy/kubernetes.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static: no cgo (the ZMQ client of the bridge is pure Go), so it runs on a
# distroless base with no libc.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/switchyard ./cmd/switchyard \
 && /out/switchyard version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/switchyard /usr/local/bin/switchyard
# nonroot: uid/gid 65532, no shell, no package manager.
USER 65532:65532
# 8000 frontend HTTP, 8100 worker HTTP, 4222 embedded NATS (`up`, `frontend` without --nats).
EXPOSE 8000 8100 4222
# The image has no curl: the binary checks itself. A worker container sets
# SWITCHYARD_HEALTH_URL=http://127.0.0.1:8100/health.
HEALTHCHECK --interval=10s --timeout=4s --start-period=20s --retries=3 \
  CMD ["/usr/local/bin/switchyard", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/switchyard"]
CMD ["up", "--http-addr", "0.0.0.0:8000"]
