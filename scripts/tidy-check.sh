#!/usr/bin/env bash
# tidy-check.sh fails when `go mod tidy` would change the go.mod or go.sum of
# the root module, the sdk and sdk/producer modules, the Helm chart's test
# module (deploy/helm/test) or a Go module under examples/plugins/
# (printing the change to make). make check runs it;
# scripts/test.sh does not (it loads the tests of every dependency, which a
# machine with only Herald's module cache and no proxy cannot fetch).
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
for mod in . sdk sdk/producer deploy/helm/test examples/plugins/*/ core/internal/tools/watermillpeer; do
	mod=${mod%/}
	[ -f "$mod/go.mod" ] || continue
	if ! diff=$(cd "$mod" && go mod tidy -diff 2>&1); then
		echo "go mod tidy would change $mod (run: cd $mod && go mod tidy):"
		echo "$diff"
		status=1
	fi
done
exit $status
