#!/usr/bin/env bash
# test.sh runs Herald's whole test suite against real servers: it brings up
# PostgreSQL and RabbitMQ (scripts/servers.sh), checks formatting, vet and the
# generated protobuf code, runs every package's tests with -race (the root
# module, then the sdk and sdk/producer modules), then the
# black-box integration suite (which stops and starts the broker, so it runs
# alone, one package at a time; it drives the web inbox in headless Chromium,
# installed from Debian's packages when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/servers.sh up

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

# go mod tidy -diff (scripts/tidy-check.sh) is in make check, not here: it
# loads the tests of every dependency, whose modules (testify, gonum, ...)
# a machine whose module cache holds only what Herald builds and tests with
# does not have, and with no module proxy it cannot fetch them.

echo "== one version of each dependency across the repository's modules"
scripts/modversions-check.sh

echo "== go vet"
go vet ./...
# The chaos tests (make test-chaos) build only with their tag.
go vet -tags chaos ./core/integration/
# The sdk and the producer are modules of their own (sdk/go.mod,
# sdk/producer/go.mod): ./... at the root does not reach them.
(cd sdk && go vet ./...)
(cd sdk/producer && go vet ./...)

# protoc for the generated-code check, Chromium for the web inbox's
# end-to-end test (core/integration/webinbox_test.go), installed from
# Debian's packages when missing (scripts/tools.sh, which make check shares).
scripts/tools.sh protoc
scripts/tools.sh chromium || echo "== no chromium: the web inbox test will fail"
# Debian's python3-grpcio and friends, for the Python plugin example
# (examples/plugins/telegram) and its end-to-end test.
scripts/tools.sh python-grpc || echo "== no python3-grpcio: the Python plugin's tests will fail"
# Debian's JDK and JDBC, PHP and PDO, python3-psycopg and node-pg, for the
# producer examples in every language (examples/producers): a language
# whose runtime is missing is skipped and named in the summary, or fails
# with HERALD_REQUIRE_PRODUCER_LANGS=1 (.ci/run sets it).
scripts/tools.sh producer-langs || echo "== PRODUCER EXAMPLES: a runtime is missing (above); its example will not run"

# podman and runc from Debian's packages, for the container image's test
# (core/integration/image_test.go), which skips without them unless
# HERALD_REQUIRE_PODMAN=1 (.ci/run sets it).
scripts/tools.sh podman || echo "== no podman: the container image test will skip (or fail with HERALD_REQUIRE_PODMAN=1)"

echo "== scripts/servers.sh's rabbitmq-env.conf editing"
scripts/servers_test.sh

if [ -x scripts/gen-proto.sh ]; then
	echo "== generated code in sync"
	scripts/gen-proto.sh check
fi

# The rest of make check that runs offline from the module cache (tidy-check
# does not; see above): no tracked executable or file over 1 MiB,
# staticcheck, and the generated configuration reference and schema in sync.
echo "== repository hygiene"
scripts/hygiene-check.sh
echo "== staticcheck"
scripts/staticcheck.sh
# TypeScript from the npm registry checks the inbox component's .d.ts
# (installed when missing; it is here, not in make check, because the
# install needs the network). Offline it skips with one line, unless
# HERALD_REQUIRE_COMPONENT_TYPES=1 (.ci/run sets it).
echo "== the inbox component's type declarations"
scripts/component-types.sh
echo "== docs/configuration.md in sync"
scripts/configdoc.sh check
echo "== migrations/schema.sql in sync"
scripts/schema.sh check

echo "== unit and component tests"
go test -race -count=1 -timeout=15m -p 2 $(go list ./... | grep -v /core/integration)

echo "== sdk (own module; its tests also check it imports nothing of the core)"
(cd sdk && go test -race -count=1 -timeout=6m -p 2 ./...)
echo "== sdk/producer (own module)"
(cd sdk/producer && go test -race -count=1 -timeout=2m ./...)

echo "== fuzz targets, briefly (a failing input lands in the package's testdata/fuzz)"
# One target per line: NAME PACKAGE. go test -fuzz runs one target at a
# time; keep the total under about two minutes.
while read -r target pkg; do
	[ -n "$target" ] || continue
	go test -run '^$' -fuzz "^${target}\$" -fuzztime 20s -fuzzminimizetime 5s -parallel 2 "$pkg" </dev/null
done <<'FUZZ'
FuzzLoadRulesHCL ./core/internal/rulesfile
FuzzLoadRulesYAML ./core/internal/rulesfile
FuzzParseSchedule ./core/internal/rules
FuzzDirectory ./core/internal/directory
FuzzDaemonHCL ./core/internal/config
FuzzParseQuery ./core/internal/api
FUZZ

if [ -n "$(go list ./core/integration/... 2>/dev/null)" ]; then
	echo "== integration tests (real herald serve, real plugins, broker and database faults)"
	HERALD_PRODUCER_LANGS_REPORT=$(mktemp)
	export HERALD_PRODUCER_LANGS_REPORT
	go test -count=1 -timeout=45m -p 1 ./core/integration/...
	echo "== producer examples (docs/producers.md): $(sort -u "$HERALD_PRODUCER_LANGS_REPORT" | paste -sd ';' | sed 's/;/; /g')"
	rm -f "$HERALD_PRODUCER_LANGS_REPORT"
fi

# The Helm chart's test: its own module (deploy/helm/test/go.mod), so that
# helm's and Kubernetes' modules stay out of Herald's; helm is built from
# its tool directive. Where its modules are neither in the module cache nor
# on a reachable proxy (an offline machine) it is skipped with one line,
# unless HERALD_REQUIRE_CHART=1 (.ci/run sets it).
if (cd deploy/helm/test && go mod download) >/dev/null 2>&1; then
	echo "== Helm chart (deploy/helm/test, own module: helm template + strict decoding, helm lint)"
	(cd deploy/helm/test && go vet ./... && go test -count=1 -timeout=15m ./...)
elif [ "${HERALD_REQUIRE_CHART:-0}" = 1 ]; then
	echo "== Helm chart: the modules of deploy/helm/test cannot be downloaded, and HERALD_REQUIRE_CHART=1" >&2
	exit 1
else
	echo "== Helm chart test SKIPPED: the modules of deploy/helm/test (helm, k8s.io/api) are not in the module cache and no module proxy answers"
fi

for mod in examples/plugins/*/; do
	if [ -f "$mod/go.mod" ]; then
		echo "== $mod (own module)"
		(cd "$mod" && go vet ./... && go test -count=1 -timeout=5m ./...)
	fi
done
echo "== all tests passed"
