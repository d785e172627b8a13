#!/usr/bin/env bash
# hygiene-check.sh fails when the repository tracks a file it should not
# (make check runs it). It reads the index, which is what a commit holds, so
# a file counts once it is added (git add), and a clean checkout, as CI has,
# is checked exactly. The rules:
#
#   - no tracked file is over 1 MiB (build output, dumps and media belong
#     elsewhere; the largest source file today is a tenth of that);
#   - no tracked file is a native executable or object, whatever its mode:
#     ELF, Mach-O (thin or fat) or PE (MZ with a PE header);
#   - a file tracked executable (mode 100755) is a text script: it starts
#     with #! and holds no NUL byte in its first 8 KiB.
#
# Each offending file is printed with the reason; the exit status is 1 when
# there is any.
set -euo pipefail
cd "$(dirname "$0")/.."

max=$((1024 * 1024))
status=0
fail() {
	echo "hygiene: $1: $2" >&2
	status=1
}

# hex FILE-BLOB OFFSET COUNT prints COUNT bytes of the blob from OFFSET as
# lower-case hex without spaces.
hex() {
	git cat-file blob "$1" | od -An -v -tx1 -j "$2" -N "$3" | tr -d ' \n'
}

# native BLOB SIZE says which kind of native binary the blob is, or nothing.
native() {
	local blob=$1 size=$2 magic
	[ "$size" -ge 4 ] || return 0
	magic=$(hex "$blob" 0 4)
	case "$magic" in
	7f454c46) echo ELF ;;
	feedface | feedfacf | cefaedfe | cffaedfe) echo Mach-O ;;
	cafebabe | bebafeca) echo "Mach-O universal (or a Java class)" ;;
	4d5a*)
		# MZ: a PE file has "PE\0\0" at the offset stored at 0x3c.
		[ "$size" -ge 64 ] || return 0
		local le off
		le=$(hex "$blob" 60 4)
		off=$((16#${le:6:2}${le:4:2}${le:2:2}${le:0:2}))
		if [ "$off" -gt 0 ] && [ $((off + 4)) -le "$size" ] && [ "$(hex "$blob" "$off" 4)" = 50450000 ]; then
			echo PE
		fi
		;;
	esac
}

# One pass over the index: mode, blob and path; then the blobs' sizes.
declare -a modes blobs paths
while IFS= read -r -d '' entry; do
	meta=${entry%%$'\t'*}
	path=${entry#*$'\t'}
	read -r mode blob _ <<<"$meta"
	case "$mode" in
	100644 | 100755) ;;
	*) continue ;; # symlinks and submodules hold no content here
	esac
	modes+=("$mode")
	blobs+=("$blob")
	paths+=("$path")
done < <(git ls-files --stage -z)

mapfile -t sizes < <(printf '%s\n' "${blobs[@]}" | git cat-file --batch-check='%(objectsize)')

for i in "${!paths[@]}"; do
	path=${paths[$i]} blob=${blobs[$i]} size=${sizes[$i]}
	if [ "$size" -gt "$max" ]; then
		fail "$path" "$size bytes, over the 1 MiB limit"
	fi
	kind=$(native "$blob" "$size")
	if [ -n "$kind" ]; then
		fail "$path" "a native executable or object ($kind) is tracked"
		continue
	fi
	if [ "${modes[$i]}" = 100755 ]; then
		head=$(git cat-file blob "$blob" | head -c 8192 | od -An -v -tx1 | tr -d ' \n')
		if [ "${head:0:4}" != 2321 ]; then
			fail "$path" "tracked executable (mode 755) that is not a script starting with #! (git update-index --chmod=-x, or add the #! line)"
		elif [[ "$head" =~ ^(..)*00 ]]; then
			fail "$path" "tracked executable (mode 755) with a NUL byte: a binary, not a text script"
		fi
	fi
done
if [ "$status" = 0 ]; then
	echo "hygiene: ${#paths[@]} tracked files: none over 1 MiB, no native executable, every executable a #! script"
fi
exit $status
