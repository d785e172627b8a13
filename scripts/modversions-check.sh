#!/usr/bin/env bash
# modversions-check.sh fails when a module of the repository (sdk,
# sdk/producer, the frozen protocol-1 plugin, examples/plugins/*) requires a
# version of a dependency other than the root module's (the repository's own
# modules aside). With one version of each, the root module's downloads build
# every module, so a machine whose module cache holds only what the root
# needs (no proxy) vets, builds and tests them all; make test runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

versions() { awk '/^require \(/{r=1; next} r && /^\)/{r=0} r && NF>=2 {print $1, $2} /^require [^(]/{print $2, $3}' "$1"; }

status=0
declare -A root
while read -r mod ver; do root[$mod]=$ver; done < <(versions go.mod)
for gomod in sdk/go.mod sdk/producer/go.mod sdk/host/testdata/sdkv1plugin/go.mod examples/plugins/*/go.mod core/internal/tools/watermillpeer/go.mod; do
	[ -f "$gomod" ] || continue
	while read -r mod ver; do
		want=${root[$mod]:-}
		if [ -n "$want" ] && [ "$want" != "$ver" ] && [[ $mod != github.com/heraldhq/herald/* ]]; then
			echo "$gomod requires $mod $ver, the root module $want: run go get $mod@$want there, then go mod tidy" >&2
			status=1
		fi
	done < <(versions "$gomod")
done
[ $status -eq 0 ] && echo "modversions: every module requires the root module's versions"
exit $status
