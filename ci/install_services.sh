#!/usr/bin/env bash
# Build (or reuse) the MinIO and toxiproxy binaries the tests and benchmarks start on loopback.
# Binaries are cached in $GOBIN (default ~/go/bin); without the cache this takes about 4 minutes.
set -euo pipefail
GOBIN="${GOBIN:-$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin}"
export GOBIN
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
TOXIPROXY_VERSION="v2.5.0"

if ! command -v go >/dev/null 2>&1; then
  echo "ci/install_services.sh: Go is required to build MinIO and toxiproxy (go not found on PATH)" >&2
  exit 1
fi
if [ ! -x "$GOBIN/minio" ]; then
  echo "building MinIO $MINIO_VERSION into $GOBIN (first time only, about 4 minutes)..."
  GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION"
fi
if [ ! -x "$GOBIN/server" ] || [ ! -x "$GOBIN/cli" ]; then
  echo "building toxiproxy $TOXIPROXY_VERSION into $GOBIN..."
  go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
             "github.com/Shopify/toxiproxy/v2/cmd/cli@$TOXIPROXY_VERSION"
fi
echo "services ready: $GOBIN/minio, $GOBIN/server (toxiproxy)"
