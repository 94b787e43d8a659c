#!/usr/bin/env bash
# Builds the CNCF distribution registry (the reference OCI registry) used by the e2e tests.
# Usage: build-registry.sh [BIN_DIR]   (default <repo>/.cache/bin, where the harness looks;
# elsewhere, point E2E_REGISTRY_BIN at BIN_DIR/registry).
# Called by `make e2e-registry`. Needs only the Go module proxy. REGISTRY_VERSION overrides
# the release; it must be v3.1 or later: the harness sets `tags.maxtags` so that a client
# asking n=1000 (go-containerregistry's default) gets small pages with Link headers, and
# v3.0.0 has no such setting (it serves every tag in one page).
set -euo pipefail

REGISTRY_VERSION="${REGISTRY_VERSION:-v3.1.2}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin_dir="${1:-${repo_root}/.cache/bin}"
mkdir -p "${bin_dir}"
bin_dir="$(cd "${bin_dir}" && pwd)"

stamp="${bin_dir}/.registry-version"
if [[ -x "${bin_dir}/registry" && -f "${stamp}" && "$(cat "${stamp}")" == "${REGISTRY_VERSION}" ]]; then
	echo "registry ${REGISTRY_VERSION} already built: ${bin_dir}/registry"
	exit 0
fi

# Outside any module, so the root go.mod and e2e/go.mod are left alone.
cd "${bin_dir}"
GOBIN="${bin_dir}" GOFLAGS=-mod=mod go install "github.com/distribution/distribution/v3/cmd/registry@${REGISTRY_VERSION}"
echo "${REGISTRY_VERSION}" > "${stamp}"
echo "built registry ${REGISTRY_VERSION}: ${bin_dir}/registry"
