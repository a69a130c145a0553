#!/usr/bin/env bash
# bench/ab_overlay.sh NAME [REV:PATH | PATH=FILE]... — writes
# .devcarry/ab_NAME.tar.xz, an overlay for gpu_session.sh's ab stage: each
# argument puts one file into the variant's tree, either as it is at a git
# revision (REV:PATH, e.g. HEAD~1:src/backend/cuda/k_attention.cu) or from
# a local file (PATH=FILE: the variant's PATH gets FILE's contents). The ab
# stage builds the variant beside this tree and measures both in one call;
# carry the tarball (.devcarry/ab_NAME.tar.xz) in the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: bench/ab_overlay.sh NAME [REV:PATH | PATH=FILE]...}
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for a in "$@"; do
    case $a in
        *=*) path=${a%%=*}; mkdir -p "$tmp/ov/$(dirname "$path")"; cp "${a#*=}" "$tmp/ov/$path" ;;
        *:*) path=${a#*:}; mkdir -p "$tmp/ov/$(dirname "$path")"; git show "$a" > "$tmp/ov/$path" ;;
        *) echo "ab_overlay: $a is neither REV:PATH nor PATH=FILE" >&2; exit 2 ;;
    esac
done
mkdir -p .devcarry
tar -cJf ".devcarry/ab_$name.tar.xz" -C "$tmp" ov
echo "ab_overlay: .devcarry/ab_$name.tar.xz ($(tar -tJf ".devcarry/ab_$name.tar.xz" | grep -vc '/$') files)"
