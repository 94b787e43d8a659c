#!/usr/bin/env bash
# Builds the CNCF distribution registry (the reference OCI registry) used by the e2e tests.
# Usage: build-registry.sh [BIN_DIR]   (default <repo>/.cache/bin, where the harness looks;
# elsewhere, point E2E_REGISTRY_BIN at BIN_DIR/registry).
# Called by `make e2e-registry`. Needs only the Go module proxy. The release is the one
# e2e/build/registry/go.mod requires (v3.1 or later: the harness sets `tags.maxtags` so
# that a client asking n=1000, go-containerregistry's default, gets small pages with Link
# headers; v3.0.0 has no such setting). That module's main is distribution's
# cmd/registry less the cloud storage drivers (see its main.go): 44% less CPU to compile.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mod="${repo_root}/e2e/build/registry"
bin_dir="${1:-${repo_root}/.cache/bin}"
mkdir -p "${bin_dir}"
bin_dir="$(cd "${bin_dir}" && pwd)"

version=$(sed -n 's#^require github.com/distribution/distribution/v3 \(v[^ ]*\)$#\1#p' "${mod}/go.mod")
[[ -n "${version}" ]] || { echo "no distribution version in ${mod}/go.mod" >&2; exit 1; }
want=$(cat "${mod}/go.mod" "${mod}/go.sum" "${mod}/main.go" <(go version) | sha256sum | cut -c1-16)
stamp="${bin_dir}/.registry-version"
if [[ -x "${bin_dir}/registry" && -f "${stamp}" && "$(cat "${stamp}")" == "${version} ${want}" ]]; then
	echo "registry ${version} already built: ${bin_dir}/registry"
	exit 0
fi

# Stamped as distribution's own Makefile does (version/version.go).
(cd "${mod}" && GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly" go build -trimpath \
	-ldflags="-s -w -X github.com/distribution/distribution/v3/version.version=${version}" \
	-o "${bin_dir}/registry.tmp" .)
mv "${bin_dir}/registry.tmp" "${bin_dir}/registry"
echo "${version} ${want}" >"${stamp}"
echo "built registry ${version}: ${bin_dir}/registry ($("${bin_dir}/registry" --version))"
