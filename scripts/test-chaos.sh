#!/usr/bin/env bash
# test-chaos.sh runs the chaos suite (build tag chaos, tests TestChaos*):
# real network faults between herald and its servers (network namespaces,
# a veth pair, netfilter) and broker node loss. It needs root on Linux; the
# network tests skip, saying why, where namespaces cannot be created.
# iproute2 (ip, tc) and iptables come from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/servers.sh up

# shellcheck source=tools.sh
source scripts/tools.sh
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
	apt_install iproute2
fi
# The network fault tests inject delay, loss and partitions with iptables
# (NFQUEUE, statistic, DROP): kernels built without sch_netem have no tc
# netem (core/integration/chaos_netem_delay_test.go).
if ! command -v iptables >/dev/null; then
	apt_install iptables
fi

go test -tags chaos -count=1 -timeout=40m -p 1 -run '^TestChaos' ./core/integration/
