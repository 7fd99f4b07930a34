#!/bin/sh
# Installs the Debian packages kiln builds and tests with. Idempotent: it
# checks each package with dpkg first and installs only what is missing. A
# non-root user gets the exact apt-get line to run instead. Besides the
# libraries: zstd, zip and jq for the end-to-end tests (jq reads kiln's --json
# reports; the tests use no Python), time (GNU time) for `make bench`, and
# clang with libclang-rt-14-dev (the libFuzzer runtime) for `make fuzz`.
set -eu

PACKAGES="build-essential pkg-config libzstd-dev libarchive-dev libcmocka-dev \
libjansson-dev libpcre2-dev libunistring-dev zstd zip jq time curl ca-certificates clang libclang-rt-14-dev"

missing=""
for p in $PACKAGES; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=sudo
    else
        echo "kiln: missing packages:$missing" >&2
        echo "kiln: run: sudo apt-get install -y$missing" >&2
        exit 1
    fi
else
    SUDO=
fi
echo "kiln: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing >/dev/null
