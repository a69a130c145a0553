#!/usr/bin/env bash
# bench/make_devcarry.sh — builds the git-ignored .devcarry/ that a device
# call carries to the lent H200 (bench/gpu_session.sh reads it): that machine
# has nvcc but not the Debian -dev packages, no network, and takes at most
# 64 MiB of working tree, so everything travels from here:
#   libs.tar.xz              sysroot/usr/include: the headers of kestrel's
#                            libraries (this host's); sysroot/usr/lib/...:
#                            their lib*.so link names; runlib/: the shared
#                            objects build/kestrel loads beyond glibc and the
#                            GCC runtime (its ldd closure here); gpu_session.sh
#                            unpacks it into .devcarry/ there
#   gpu.tar.xz               tinycoder: config, weights, tokenizer, prompts/,
#                            reference/, dflash/ (as shared/models/tinycoder)
#   drafter.tar.xz           tinycoder/drafter
#   qwen3tok.tar.xz          the Qwen3 tokenizer for the random checkpoints
#                            (from scripts/fetch_tokenizers.sh's cache)
#   node.tar.xz (--node)     this host's node and tests/e2e/node_modules, for
#                            the e2e stage (26 MB: with gpu.tar.xz past the
#                            64 MiB of one call, so a call of its own first)
# Run after `make` (the closure is read off build/kestrel). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${KESTREL_SHARED:-../shared}
TC=$SHARED/models/tinycoder
[ -f build/kestrel ] || { echo "make_devcarry: build/kestrel first (make)" >&2; exit 1; }
[ -f "$TC/config.json" ] || { echo "make_devcarry: no tinycoder at $TC" >&2; exit 1; }
D=.devcarry
rm -rf "$D/sysroot" "$D/runlib"
mkdir -p "$D/sysroot/usr/include/x86_64-linux-gnu" "$D/sysroot/usr/lib/x86_64-linux-gnu" "$D/runlib"
for h in jansson.h jansson_config.h pcre2.h utf8proc.h microhttpd.h xxhash.h xxh3.h curl; do
    if [ -e "/usr/include/$h" ]; then cp -a "/usr/include/$h" "$D/sysroot/usr/include/"
    elif [ -e "/usr/include/x86_64-linux-gnu/$h" ]; then cp -a "/usr/include/x86_64-linux-gnu/$h" "$D/sysroot/usr/include/x86_64-linux-gnu/"
    else echo "make_devcarry: header $h not found (scripts/setup.sh installs it)" >&2; exit 1; fi
done
# the closure, less what every Linux machine has (glibc, the GCC runtime)
ldd build/kestrel | awk '$3 ~ /^\// {print $3}' |
    grep -vE '/(libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$D/runlib/"; done
for l in jansson pcre2-8 utf8proc microhttpd curl xxhash; do
    so=$(ls "$D"/runlib/lib$l.so.* | head -1)
    ln -sf "../../../../runlib/$(basename "$so")" "$D/sysroot/usr/lib/x86_64-linux-gnu/lib$l.so"
done
tar -C "$D" -cf "$D/libs.tar.xz" --owner=0 --group=0 -I 'xz -6 -T2' sysroot runlib
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/shared/models/tinycoder"
(cd "$TC" && cp -a config.json generation_config.json model*.safetensors* tokenizer.json tokenizer_config.json \
    prompts reference dflash "$tmp/shared/models/tinycoder/")
tar -C "$tmp" -cf "$D/gpu.tar.xz" --owner=0 --group=0 -I 'xz -1 -T2' shared
mkdir -p "$tmp/d/shared/models/tinycoder"
cp -a "$TC/drafter" "$tmp/d/shared/models/tinycoder/"
tar -C "$tmp/d" -cf "$D/drafter.tar.xz" --owner=0 --group=0 -I 'xz -1 -T2' shared
QT=${HOME}/.cache/kestrel/tokenizers/qwen3
if [ -f "$QT/tokenizer.json" ]; then
    mkdir -p "$tmp/qwen3tok"
    cp "$QT"/tokenizer*.json "$tmp/qwen3tok/"
    tar -C "$tmp" -cJf "$D/qwen3tok.tar.xz" --owner=0 --group=0 qwen3tok
else
    echo "make_devcarry: no Qwen3 tokenizer in $QT (scripts/fetch_tokenizers.sh): the random checkpoints get tinycoder's" >&2
fi
if [ "${1:-}" = --node ]; then # node and the e2e clients (run `npm ci --prefix tests/e2e` first), for the e2e stage
    [ -f tests/e2e/node_modules/.package-lock.json ] || { echo "make_devcarry: npm ci --prefix tests/e2e first" >&2; exit 1; }
    mkdir -p "$tmp/node/bin"
    cp -L "$(command -v node)" "$tmp/node/bin/"
    cp -a tests/e2e/node_modules "$tmp/node/"
    tar -C "$tmp/node" -cf "$D/node.tar.xz" --owner=0 --group=0 -I 'xz -9 -T2' bin node_modules
fi
du -sh "$D"/*.tar.xz | sed 's/^/make_devcarry: /'
echo 'make_devcarry: carry [".devcarry/gpu.tar.xz", ".devcarry/libs.tar.xz", ".devcarry/qwen3tok.tar.xz"] (and ".devcarry/drafter.tar.xz" for the spec stage'"'"'s drafter row, where the 64 MiB allow it)'
