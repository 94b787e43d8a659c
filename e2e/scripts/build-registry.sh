#!/usr/bin/env bash
# Builds the CNCF distribution registry (the reference OCI registry) used by the e2e tests.
# Installs it as <repo>/.cache/bin/registry; the e2e harness runs it from there.
# Called by `make e2e-registry`. Needs only the Go module proxy.
set -euo pipefail

REGISTRY_VERSION="${REGISTRY_VERSION:-v3.1.2}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin_dir="${repo_root}/.cache/bin"
mkdir -p "${bin_dir}"

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
