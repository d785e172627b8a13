# Herald's build, test and run targets. `make help` lists them.
GO ?= go
BIN := bin
PLUGINS := email push sms slack websocket
# VERSION stamps herald (main.Version, `herald version`) and every bundled
# plugin (main.Version, the PluginVersion that Describe and `herald plugins ls`
# report) from git.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)
# herald version also reports the commit and its date. The date is the
# commit's (SOURCE_DATE_EPOCH when set, as scripts/dist.sh takes it), never
# the clock's: with -trimpath and no VCS stamp of go build's own, two builds
# of one tree are the same bytes (make repro-check shows it).
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE := $(shell if [ -n "$$SOURCE_DATE_EPOCH" ]; then date -u -d "@$$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ; \
	else TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null; fi)
LDFLAGS := -X main.Version=$(VERSION) -X main.Commit=$(COMMIT) -X main.BuildDate=$(BUILD_DATE)
BUILDFLAGS := -trimpath -buildvcs=false

.PHONY: help build plugins bench-plugins run up test test-chaos check proto docs schema repro-check bench dist image clean

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

# Each binary is named before it is built: a first build compiles every
# dependency and takes up to a minute on two cores.
build: ## build bin/herald and the plugins
	@echo "build: $(BIN)/herald $(VERSION) (a first build compiles every dependency: up to a minute)"
	@$(GO) build $(BUILDFLAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/herald ./core/cmd/herald
	@$(MAKE) --no-print-directory plugins

plugins: ## build bin/plugins/herald-plugin-*
	@for p in $(PLUGINS); do echo "build: $(BIN)/plugins/herald-plugin-$$p"; $(GO) build $(BUILDFLAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/plugins/herald-plugin-$$p ./plugins/$$p || exit 1; done
	@# herald serve refuses a plugin directory or binary others could write (umask 002)
	@chmod go-w $(BIN)/plugins $(BIN)/plugins/herald-plugin-*

up: ## install and start PostgreSQL and RabbitMQ on loopback when missing
	scripts/servers.sh up

run: ## bring everything up and run herald serve with the example config
	scripts/run.sh

test: ## run the whole test suite against real servers
	scripts/test.sh

test-chaos: ## network faults and broker node loss (root: Linux namespaces, iptables; this kernel has no tc netem)
	scripts/test-chaos.sh

check: ## repository hygiene, gofmt, go mod tidy -diff (every module), vet and staticcheck (root, sdk and sdk/producer modules), sdk tests with -race, generated code, docs/configuration.md and migrations/schema.sql in sync (installs protoc when missing; starts PostgreSQL)
	scripts/hygiene-check.sh
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || (gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'); exit 1)
	scripts/tidy-check.sh
	$(GO) vet ./...
	@# the chaos tests build only with their tag (make test-chaos)
	$(GO) vet -tags chaos ./core/integration/
	scripts/staticcheck.sh
	cd sdk && $(GO) vet ./... && $(GO) test -race -count=1 -timeout=6m ./...
	cd sdk/producer && $(GO) vet ./...
	@# the Watermill peer (herald bench's comparison, docs/performance): its own module, checked here only, since make test runs offline
	cd core/internal/tools/watermillpeer && $(GO) vet ./... && "$$($(GO) -C ../../../.. tool -n staticcheck)" ./...
	@# protoc from Debian's packages when missing, as scripts/test.sh does
	scripts/tools.sh protoc
	scripts/gen-proto.sh check
	scripts/configdoc.sh check
	scripts/schema.sh check

docs: ## regenerate docs/configuration.md from the doc comments of the Config types
	scripts/configdoc.sh

schema: ## regenerate migrations/schema.sql: migrate a throw-away database, dump its schema (starts PostgreSQL)
	scripts/schema.sh

repro-check: ## build herald and the plugins twice and compare their SHA-256 (REPRO_FRESH_CACHE=1: the second from an empty build cache)
	scripts/repro-check.sh

proto: ## regenerate the protobuf code with the pinned generators
	scripts/gen-proto.sh

bench-plugins: ## build the recording sink plugin the benchmark uses
	$(GO) build $(BUILDFLAGS) -ldflags "-X main.version=$(VERSION)" -o $(BIN)/bench-plugins/herald-plugin-sink ./core/internal/tools/sinkplugin
	@chmod go-w $(BIN)/bench-plugins $(BIN)/bench-plugins/herald-plugin-sink

bench: build bench-plugins up ## run the pipeline benchmark (BENCH_ARGS="--json" etc.)
	$(BIN)/herald bench --plugins-dir $(BIN)/bench-plugins $(BENCH_ARGS)

# VERSION given on the command line or in the environment is stamped as it
# is; otherwise scripts/dist.sh takes git describe (0.0.0-dev outside git).
dist: ## build dist/herald_<version>_linux_amd64.tar.gz and dist/herald_<version>_amd64.deb (static, -trimpath; dpkg-deb)
	@VERSION='$(if $(filter command line environment,$(origin VERSION)),$(VERSION))' scripts/dist.sh

# The container image: the static binaries and the packaged tree of make
# dist, written as an OCI archive by core/internal/tools/ociimage, with no
# base image, registry or container runtime.
image: ## build dist/herald_<version>_linux_amd64.oci.tar, the container image (podman load -i / docker load -i)
	@VERSION='$(if $(filter command line environment,$(origin VERSION)),$(VERSION))' scripts/image.sh

clean:
	rm -rf $(BIN) dist
