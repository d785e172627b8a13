#!/usr/bin/env bash
# repro-check.sh builds herald and the bundled plugins twice, as make build
# does, into two empty directories, and fails unless every binary has the
# same SHA-256 both times (make repro-check). The second build uses an
# empty build cache when REPRO_FRESH_CACHE=1, so that it compiles every
# package again rather than linking the first build's objects (minutes on
# two cores).
set -euo pipefail
cd "$(dirname "$0")/.."

MAKE=${MAKE:-make}
work=$(mktemp -d "${TMPDIR:-/tmp}/herald-repro.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$MAKE" --no-print-directory build BIN="$work/a"
if [ "${REPRO_FRESH_CACHE:-0}" = 1 ]; then
	GOCACHE="$work/cache" "$MAKE" --no-print-directory build BIN="$work/b"
else
	"$MAKE" --no-print-directory build BIN="$work/b"
fi
(cd "$work/a" && find . -type f | sort | xargs sha256sum) >"$work/a.sum"
(cd "$work/b" && sha256sum -c --quiet "$work/a.sum") || {
	echo "repro: the two builds differ (above)" >&2
	exit 1
}
cat "$work/a.sum"
echo "repro: $(wc -l <"$work/a.sum") binaries, the same bytes in both builds" >&2
