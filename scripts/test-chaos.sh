#!/usr/bin/env bash
# test-chaos.sh runs the chaos suite (Go build tag `chaos`, tests named
# TestChaos*): real network faults between herald and its servers (Linux
# network namespaces, tc netem) and broker node loss (a three-node RabbitMQ
# cluster of the test's own on private ports). Run it as root on Linux; it
# installs iproute2 from Debian's packages when ip or tc is missing. The
# machine's PostgreSQL and RabbitMQ are reused (scripts/servers.sh up), never
# stopped: every fault hits private servers the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/servers.sh up

if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
	# shellcheck source=scripts/tools.sh
	. scripts/tools.sh
	apt_install iproute2
fi

echo "== chaos tests (network faults, broker node loss)"
go test -tags chaos -count=1 -timeout=40m -p 1 -run '^TestChaos' ./core/integration/
