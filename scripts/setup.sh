#!/usr/bin/env bash
# setup.sh — installs kestrel's Debian build dependencies (idempotent,
# non-interactive). Run as root or with sudo available.
set -euo pipefail
PKGS=(build-essential pkg-config libjansson-dev libpcre2-dev libutf8proc-dev
      libxxhash-dev libmicrohttpd-dev libcurl4-openssl-dev nodejs npm python3 gnuplot-nox)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere (nvm, tarball): accept them on PATH.
if command -v node >/dev/null && command -v npm >/dev/null; then
    tmp=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done
    missing=("${tmp[@]+"${tmp[@]}"}")
fi
if command -v python3 >/dev/null; then
    tmp=(); for p in "${missing[@]+"${missing[@]}"}"; do [[ $p == python3 ]] || tmp+=("$p"); done
    missing=("${tmp[@]+"${tmp[@]}"}")
fi
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all build dependencies present"
    exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "setup: installing ${missing[*]}"
$SUDO apt-get install -y -q "${missing[@]}" || { $SUDO apt-get update -q && $SUDO apt-get install -y -q "${missing[@]}"; }
