#!/usr/bin/env bash
# test.sh runs Herald's whole test suite against real servers: it brings up
# PostgreSQL and RabbitMQ (scripts/servers.sh), checks formatting, vet and the
# generated protobuf code, runs every package's tests with -race, then the
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

echo "== go vet"
go vet ./...

# protoc and the well-known .proto files it imports (google/protobuf/*.proto
# ship in libprotobuf-dev, which protobuf-compiler only recommends).
if ! command -v protoc >/dev/null || [ ! -f /usr/include/google/protobuf/duration.proto ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "== installing protobuf-compiler libprotobuf-dev"
		export DEBIAN_FRONTEND=noninteractive
		pkgs="protobuf-compiler libprotobuf-dev"
		# shellcheck disable=SC2086
		apt-get install -y --no-install-recommends $pkgs >/dev/null 2>&1 ||
			{ apt-get update >/dev/null && apt-get install -y --no-install-recommends $pkgs >/dev/null; }
	fi
fi

# Chromium drives the web inbox's end-to-end test (core/integration/
# webinbox_test.go), which fails without it; HERALD_CHROMIUM names another.
if [ -z "${HERALD_CHROMIUM:-}" ] && [ ! -x /usr/bin/chromium ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "== installing chromium"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 ||
			{ apt-get update >/dev/null && apt-get install -y --no-install-recommends chromium >/dev/null; }
	fi
fi

if [ -x scripts/gen-proto.sh ]; then
	echo "== generated code in sync"
	scripts/gen-proto.sh check
fi

echo "== unit and component tests"
go test -race -count=1 -timeout=6m -p 2 $(go list ./... | grep -v /core/integration)

if [ -n "$(go list ./core/integration/... 2>/dev/null)" ]; then
	echo "== integration tests (real herald serve, real plugins, broker and database faults)"
	go test -count=1 -timeout=25m -p 1 ./core/integration/...
fi

for mod in examples/plugins/*/; do
	if [ -f "$mod/go.mod" ]; then
		echo "== $mod (own module)"
		(cd "$mod" && go vet ./... && go test -count=1 -timeout=5m ./...)
	fi
done
echo "== all tests passed"
