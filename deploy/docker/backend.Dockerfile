# syntax=docker/dockerfile:1
# vendorgate backend: vendors, keys and orders (internal API on 8081, admin API + /metrics on 8082).
#
# Build from the repository root (the module root is the build context):
#   docker build -f deploy/docker/backend.Dockerfile -t vendorgate/backend ..   # from deploy/
#   docker build -f deploy/docker/backend.Dockerfile -t vendorgate/backend .    # from the repo root
# deploy/docker/backend.Dockerfile.dockerignore keeps bin/, var/ and .git out of the context.

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
    go build -trimpath -ldflags="-s -w" -o /out/backend ./cmd/backend
# The SQLite file and the report PDFs live under /data. Create it here (the
# run stage has no shell) so that a fresh named volume mounted on /data copies
# this directory's owner, 65532, and the non-root backend can write to it.
RUN mkdir -p /out/data/reports

# ---- run: distroless static, no shell, uid/gid 65532 ------------------------
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/backend /usr/local/bin/backend
COPY --from=build --chown=65532:65532 /out/data /data
# The built-in defaults listen on 127.0.0.1 and keep data under ./var, which a
# read-only root file system would refuse. Use every interface and /data.
ENV BACKEND_LISTEN=0.0.0.0:8081 \
    BACKEND_ADMIN_LISTEN=0.0.0.0:8082 \
    BACKEND_DATABASE=/data/vendorgate.db \
    BACKEND_REPORTS_DIR=/data/reports
VOLUME ["/data"]
# 8081: vendor + internal API, for the gateways only (internal token).
# 8082: admin API for vendorctl (admin token), /metrics, /healthz, /readyz.
EXPOSE 8081 8082
USER 65532:65532
# No HEALTHCHECK: no shell in the image; probe GET /readyz on 8082 instead.
ENTRYPOINT ["/usr/local/bin/backend"]
CMD []
