# syntax=docker/dockerfile:1
# vendorgate vendorctl: the operator CLI, for one-off runs against the backend's admin API.
#
# Build from the repository root (the module root is the build context):
#   docker build -f deploy/docker/vendorctl.Dockerfile -t vendorgate/vendorctl ..   # from deploy/
#   docker build -f deploy/docker/vendorctl.Dockerfile -t vendorgate/vendorctl .    # from the repo root
# deploy/docker/vendorctl.Dockerfile.dockerignore keeps bin/, var/ and .git out of the context.

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
    go build -trimpath -ldflags="-s -w" -o /out/vendorctl ./cmd/vendorctl

# ---- run: distroless static, no shell, uid/gid 65532 ------------------------
# Usage:
#   docker run --rm --network vendorgate -e VENDORCTL_ADMIN_URL=http://backend:8082 \
#     -e VENDORCTL_ADMIN_TOKEN vendorgate/vendorctl <command> [arguments]
# (the compose file names its network "vendorgate"; the token comes from your shell).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/vendorctl /usr/local/bin/vendorctl
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vendorctl"]
