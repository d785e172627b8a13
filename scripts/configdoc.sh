#!/usr/bin/env bash
# configdoc.sh regenerates docs/configuration.md from the doc comments of the
# Config types (go run ./core/internal/config/cmd/gendocs); `configdoc.sh
# check` regenerates it to a temporary file and fails when the committed one
# differs (make check and scripts/test.sh run it).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
if [ "${1:-}" != check ]; then
	exec $GO run ./core/internal/config/cmd/gendocs -o docs/configuration.md
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
$GO run ./core/internal/config/cmd/gendocs > "$tmp"
if ! diff -u docs/configuration.md "$tmp"; then
	echo "docs/configuration.md is out of date: run make docs" >&2
	exit 1
fi
echo "docs/configuration.md in sync"
