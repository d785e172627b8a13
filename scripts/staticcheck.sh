#!/usr/bin/env bash
# staticcheck.sh runs staticcheck (honnef.co/go/tools, pinned by a tool
# directive in the root go.mod, so it builds from the module cache without
# a download once fetched) over the root module and the sdk module, and
# over sdk/producer when it is a module of its own. make check runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
# go tool -n builds the pinned staticcheck into the build cache and prints
# its path, so that one binary checks every module.
bin=$("$GO" tool -n staticcheck)
status=0
for mod in . sdk sdk/producer; do
	[ -f "$mod/go.mod" ] || continue
	echo "staticcheck: $mod"
	(cd "$mod" && "$bin" ./...) || status=1
done
exit $status
