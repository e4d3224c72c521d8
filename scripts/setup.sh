#!/usr/bin/env bash
# Installs everything pinhole needs to build and test, from Debian packages.
# Run as root (or with sudo) on Debian 12 or newer.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# (chromium: tests/api/webchat.test.mjs drives the web chat page in it, headless;
# redis-server, haproxy: tests/cluster starts them on loopback, deploy/ uses them)
$SUDO apt-get install -y --no-install-recommends \
  build-essential cmake pkg-config clang libclang-rt-dev valgrind \
  libjansson-dev libmicrohttpd-dev libspng-dev libturbojpeg0-dev libwebp-dev libgif-dev \
  libexif-dev libssl-dev libsqlite3-dev libxxhash-dev libhiredis-dev libedit-dev libcurl4-openssl-dev \
  chromium redis-server haproxy

# The API tests run the official npm clients, which need Node.js 20 or later.
if ! command -v node >/dev/null 2>&1; then
  $SUDO apt-get install -y --no-install-recommends nodejs npm
fi
node -e 'if (+process.versions.node.split(".")[0] < 20) { console.error("setup: the API tests need Node.js 20 or later, found " + process.version); process.exit(1) }'
