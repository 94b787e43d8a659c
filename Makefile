# argocd-image-resolver — the two commands a newcomer runs: `make demo`, `make test`.
SHELL := /bin/bash
GO ?= go
CACHE := $(CURDIR)/.cache
BIN := $(CURDIR)/bin
REGISTRY_BIN := $(CACHE)/bin/registry
export PATH := $(CACHE)/bin:$(PATH)

.PHONY: all build demo test test-unit test-e2e bench bench-tools e2e-registry vet fuzz clean

all: build

build:
	$(GO) build -o $(BIN)/argocd-image-resolver ./cmd/argocd-image-resolver
	$(GO) build -o $(BIN)/argocd-image-resolver-generate ./cmd/argocd-image-resolver-generate

## demo: resolve and render the sample apps against an embedded registry (no network, no cluster)
demo: build
	$(GO) run ./cmd/demo --bin $(BIN)/argocd-image-resolver

## test: vet, unit and integration tests of the main module, then e2e against Argo CD's own code
test: vet test-unit test-e2e

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

test-unit:
	$(GO) test -count=1 ./...

e2e-registry: $(REGISTRY_BIN)
$(REGISTRY_BIN):
	bash e2e/scripts/build-registry.sh $(CACHE)/bin

test-e2e: e2e-registry
	cd e2e && $(GO) vet ./... && $(GO) test -count=1 -timeout 20m ./...

## bench: registry requests, wall time and allocations (see README "Benchmarks")
bench: bench-tools
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./...

bench-tools: $(CACHE)/bin/helm $(CACHE)/bin/kustomize
$(CACHE)/bin/helm:
	GOBIN=$(CACHE)/bin $(GO) install helm.sh/helm/v3/cmd/helm@v3.22.0
$(CACHE)/bin/kustomize:
	GOBIN=$(CACHE)/bin $(GO) install sigs.k8s.io/kustomize/kustomize/v5@v5.8.2

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseImage -fuzztime 20s ./resolve/

clean:
	rm -rf $(BIN) $(CACHE)
