# syntax=docker/dockerfile:1
# vendorgate gateway: the edge gateway (public API on 8080, admin /metrics /healthz /readyz on 9090).
#
# Build from the repository root (the module root is the build context):
#   docker build -f deploy/docker/gateway.Dockerfile -t vendorgate/gateway ..   # from deploy/
#   docker build -f deploy/docker/gateway.Dockerfile -t vendorgate/gateway .    # from the repo root
# deploy/docker/gateway.Dockerfile.dockerignore keeps bin/, var/ and .git out of the context.

# ---- build: a static binary, cross-compiled on the build platform ----------
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
# Modules first so the download layer is cached across source edits.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/gateway ./cmd/gateway

# ---- run: distroless static, no shell, uid/gid 65532 ------------------------
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /usr/local/bin/gateway
# The built-in default admin address is 127.0.0.1:9090, which nothing outside
# the container could reach (probes, Prometheus, the load balancer's health
# check). Listen on every interface inside the container instead; publish only
# 8080 to the outside world.
ENV GATEWAY_LISTEN=0.0.0.0:8080 \
    GATEWAY_ADMIN_LISTEN=0.0.0.0:9090
# 8080: public vendor API. 9090: admin (/metrics, /healthz, /readyz, /openapi.yaml).
EXPOSE 8080 9090
USER 65532:65532
# No HEALTHCHECK: the image has no shell or curl. Orchestrators probe
# GET /readyz and /healthz on 9090 themselves. On SIGTERM the gateway turns
# /readyz unready, drains in-flight requests within shutdown_grace, exits 0.
ENTRYPOINT ["/usr/local/bin/gateway"]
# Mount a config file and pass it here, e.g. ["-config", "/etc/vendorgate/gateway.yaml"].
CMD []
