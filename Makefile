# argocd-image-resolver — the two commands a newcomer runs: `make demo`, `make test`.
SHELL := /bin/bash
GO ?= go
CACHE := $(CURDIR)/.cache
BIN := $(CURDIR)/bin
REGISTRY_BIN := $(CACHE)/bin/registry
export PATH := $(CACHE)/bin:$(PATH)

.PHONY: all build demo test test-unit test-e2e bench e2e-registry fmt vet lint fuzz clean

all: build

build:
	$(GO) build -o $(BIN)/argocd-image-resolver ./cmd/argocd-image-resolver

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
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseImage -fuzztime 20s ./resolve/

clean:
	rm -rf $(BIN) $(CACHE)
