#!/usr/bin/env bash
# component-types.sh type-checks the inbox component's declarations
# (web/herald-inbox/herald-inbox.d.ts) with TypeScript's tsc, strict: the
# .d.ts itself and web/herald-inbox/types-check.ts, which uses every
# declared name as a host app would. TypeScript comes from the npm registry
# (scripts/tools.sh typescript, a pinned version, kept in HERALD_TS_DIR).
#
# Without the registry (fresh-debian.sh's offline chroot) it skips with one
# line, unless HERALD_REQUIRE_COMPONENT_TYPES=1 (.ci/run sets it): then a
# missing tsc is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools.sh
source scripts/tools.sh

# The install's own messages go to the log: offline, the skip below is the
# one line printed.
if ! tool_typescript 2>>"$HERALD_APT_LOG"; then
	if [ "${HERALD_REQUIRE_COMPONENT_TYPES:-}" = 1 ]; then
		tail -20 "$HERALD_APT_LOG" >&2
		echo "component types: typescript@$HERALD_TS_VERSION could not be installed from the npm registry, and HERALD_REQUIRE_COMPONENT_TYPES=1" >&2
		exit 1
	fi
	echo "== component types: SKIPPED: no typescript@$HERALD_TS_VERSION and the npm registry is not reachable (scripts/tools.sh typescript)"
	exit 0
fi
node "$(tsc_path)" --noEmit --strict --exactOptionalPropertyTypes --noUnusedLocals \
	--target es2022 --module es2022 --moduleResolution bundler --lib es2022,dom,dom.iterable \
	--skipLibCheck false \
	web/herald-inbox/herald-inbox.d.ts web/herald-inbox/types-check.ts
echo "== component types: herald-inbox.d.ts checked by tsc $(node "$(tsc_path)" --version | cut -d' ' -f2)"
