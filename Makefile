# argocd-image-resolver — the two commands a newcomer runs: `make demo`, `make test`.
SHELL := /bin/bash
GO ?= go
CACHE := $(CURDIR)/.cache
BIN := $(CURDIR)/bin
REGISTRY_BIN := $(CACHE)/bin/registry
export PATH := $(CACHE)/bin:$(PATH)

.PHONY: all build image release demo test test-unit test-e2e e2e e2e-build bench bench-tools e2e-registry vet fuzz clean

all: build

# version and commit stamped into `argocd-image-resolver version` and `argocd-image-resolver-generate --version`
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# The main module is built, vetted and tested as the image ships it (deploy/image
# GoBuildEnv and GoBuildArgs): static (CGO_ENABLED=0) and -trimpath. So the tests run
# the code as it ships (a cgo build also links the dynamic loader and, through
# kustomize's Go plugin loader, exports every symbol: about 29 MB more of it mapped), and
# vet, the tests, make image's amd64 build and the e2e suites' builds (e2e/harness,
# e2e/build/build.sh) share one compile of its packages. In the environment, so the
# go commands a test runs build the same way. TestMakefileBuildsAsShipped holds
# every main-module go command here to it.
AS_SHIPPED := CGO_ENABLED=0 GOFLAGS="$(strip $(GOFLAGS) -trimpath)"

build:
	$(AS_SHIPPED) $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/argocd-image-resolver ./cmd/argocd-image-resolver
	$(AS_SHIPPED) $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/argocd-image-resolver-generate ./cmd/argocd-image-resolver-generate

## image: the sidecar's OCI image without a Docker engine (deploy/image): static binaries
## for each of IMAGE_ARCHS (bin/linux_ARCH/), CA certificates, user 999, no shell; one OCI
## image index of the platforms with an SPDX SBOM per platform attached as an OCI 1.1
## referrer: an OCI layout in bin/image/, the same as a tar in bin/image.tar (whose
## docker manifest.json names the IMAGE_ARCH image, the one `docker load` takes) and the
## SBOMs in bin/sbom/. Timestamps are SOURCE_DATE_EPOCH (the commit's time by default),
## so the same commit gives the same index digest. Push every platform and the SBOMs:
## go run ./cmd/build-image -layout bin/image -push REGISTRY/REPO:TAG
IMAGE ?= ghcr.io/argocd-image-resolver/argocd-image-resolver:$(VERSION)
IMAGE_ARCHS ?= amd64,arm64
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
image:
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(AS_SHIPPED) $(GO) run ./cmd/build-image -go $(GO) -build $(IMAGE_ARCHS) -bin-root $(BIN) \
		-version $(VERSION) -revision $(COMMIT) -tag $(IMAGE) -layout $(BIN)/image -tar $(BIN)/image.tar \
		-load-arch $(IMAGE_ARCH) -sbom-dir $(BIN)/sbom

## release: make release VERSION=vX.Y.Z: refuses another VERSION, one without a
## CHANGELOG.md section, a dirty tree, or manifests and docs naming another version;
## writes bin/release/: linux/amd64 and linux/arm64 binaries, the image (OCI layout and
## tar), the SBOMs, install.yaml, the Helm values, the release notes, SHA256SUMS
release:
	$(AS_SHIPPED) $(GO) run ./cmd/release -go $(GO) -version "$(VERSION)" -out $(BIN)/release

## demo: resolve and render the sample apps against an embedded registry (no network, no cluster)
demo: build
	$(AS_SHIPPED) $(GO) run ./cmd/demo --bin $(BIN)/argocd-image-resolver

## test: every test: vet, unit and integration tests of the main module (test-unit), e2e
## against Argo CD's own code in-process (test-e2e), then a whole Argo CD per version (e2e)
test: vet test-unit test-e2e e2e

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(AS_SHIPPED) $(GO) vet ./...
	@for m in . e2e e2e/argocd; do (cd $$m && $(GO) mod tidy -diff) || { echo "go mod tidy would change $$m/go.mod or go.sum (run go mod tidy there)"; exit 1; }; done

# Test binaries are linked without DWARF (-w): a third less linking for each of the
# large ones (17 s against 13 s for daemon's), and nothing a test reads needs it.
TEST_LDFLAGS := -ldflags=-w

test-unit:
	$(AS_SHIPPED) $(GO) test $(TEST_LDFLAGS) -count=1 -timeout 30m ./...

e2e-registry: $(REGISTRY_BIN)
$(REGISTRY_BIN):
	bash e2e/scripts/build-registry.sh $(CACHE)/bin

test-e2e: e2e-registry
	cd e2e && $(GO) vet ./... && $(GO) test $(TEST_LDFLAGS) -count=1 -timeout 20m ./...

## e2e-build: kube-apiserver, kubectl, argocd (each version of e2e/build/versions.txt) and
## this checkout's binaries into .cache/e2e; cached (a warm run takes seconds)
e2e-build:
	bash e2e/build/build.sh all

## e2e: a whole Argo CD on loopback per version, driven with the argocd CLI and kubectl
## (e2e/argocd; needs etcd, redis-server and git on PATH: see e2e/README.md)
e2e: e2e-build
	cd e2e/argocd && $(GO) vet ./... && $(GO) test $(TEST_LDFLAGS) -count=1 -timeout 40m -v ./...

## bench: registry requests, wall time and allocations (see README "Benchmarks")
bench: bench-tools
	$(AS_SHIPPED) $(GO) test -run '^$$' -bench . -benchmem -count 1 ./...

bench-tools: $(CACHE)/bin/helm $(CACHE)/bin/kustomize
$(CACHE)/bin/helm:
	GOBIN=$(CACHE)/bin $(GO) install helm.sh/helm/v3/cmd/helm@v3.22.0
$(CACHE)/bin/kustomize:
	GOBIN=$(CACHE)/bin $(GO) install sigs.k8s.io/kustomize/kustomize/v5@v5.8.2

## fuzz: each fuzz target for FUZZTIME (default 20s; a 10-minute run per target:
## make fuzz FUZZTIME=10m). Seeds in testdata/fuzz (see its README), run by make test.
FUZZTIME ?= 20s
FUZZ_TARGETS := \
	./resolve:FuzzParseImage ./resolve:FuzzPolicySpec \
	./plugin:FuzzImageReference ./plugin:FuzzConstraint ./plugin:FuzzTagFilters ./plugin:FuzzPlatforms \
	./plugin:FuzzEnvFromEnviron ./plugin:FuzzLoadPolicy ./plugin:FuzzPolicyFile ./plugin:FuzzParameters \
	./config:FuzzRegistriesFile ./config:FuzzConfigFile \
	./pipeline:FuzzRewrite ./render:FuzzFindImages ./render:FuzzRemoteEntry ./render:FuzzKustomizePrintedForm \
	./migrate:FuzzMigrate ./migrate:FuzzMigrateAnnotations
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$fn ($$pkg, $(FUZZTIME))"; \
		$(AS_SHIPPED) $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; done

clean:
	rm -rf $(BIN) $(CACHE)
