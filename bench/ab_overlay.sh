#!/usr/bin/env bash
# bench/ab_overlay.sh NAME [REV:PATH | PATH=FILE]... — writes
# .devcarry/ab_NAME.tar.xz, an overlay for gpu_session.sh's ab stage: each
# argument puts one file into the variant's tree, either as it is at a git
# revision (REV:PATH, e.g. HEAD~1:src/backend/cuda/k_attention.cu) or from
# a local file (PATH=FILE: the variant's PATH gets FILE's contents). The ab
# stage builds the variant beside this tree and measures both in one call;
# carry the tarball (.devcarry/ab_NAME.tar.xz) in the device call. A note
# on stderr names each REV:PATH whose file this tree changed since REV's
# merge base (the variant takes REV's whole file, those changes with it).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: bench/ab_overlay.sh NAME [REV:PATH | PATH=FILE]...}
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for a in "$@"; do
    case $a in
        *=*) path=${a%%=*}; mkdir -p "$tmp/ov/$(dirname "$path")"; cp "${a#*=}" "$tmp/ov/$path" ;;
        *:*) path=${a#*:}; rev=${a%%:*}; mkdir -p "$tmp/ov/$(dirname "$path")"; git show "$a" > "$tmp/ov/$path"
             # an overlay replaces the whole file: say where it also takes back this tree's later changes
             base=$(git merge-base HEAD "$rev" 2> /dev/null || true)
             if [ -n "$base" ] && ! git diff --quiet "$base" HEAD -- "$path"; then
                 echo "ab_overlay: note: $path changed here since $rev's merge base; the variant takes $rev's whole file" \
                      "(meant, for an older version; for a branch, rebase it on this tree to keep them)" >&2
             fi ;;
        *) echo "ab_overlay: $a is neither REV:PATH nor PATH=FILE" >&2; exit 2 ;;
    esac
done
mkdir -p .devcarry
tar -cJf ".devcarry/ab_$name.tar.xz" -C "$tmp" ov
echo "ab_overlay: .devcarry/ab_$name.tar.xz ($(tar -tJf ".devcarry/ab_$name.tar.xz" | grep -vc '/$') files)"
