#!/usr/bin/env bash
# Installs everything pinhole needs to build and test, from Debian packages.
# Run as root (or with sudo) on Debian 12 or newer.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
  build-essential cmake pkg-config clang libclang-rt-dev valgrind \
  libjansson-dev libmicrohttpd-dev libspng-dev libturbojpeg0-dev libwebp-dev libgif-dev \
  libexif-dev libssl-dev libsqlite3-dev libedit-dev
