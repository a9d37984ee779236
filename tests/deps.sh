#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Install the Debian packages cjrelay needs that are not installed yet.
# Says what it installs; does nothing when everything is present.
set -e
PKGS="libevent-dev libmsgpack-dev libssl-dev libinih-dev libwslay-dev libnghttp2-dev libcmocka-dev pkg-config clang libclang-rt-14-dev make gcc systemd jq openssl procps valgrind python3 python3-pip python3-setuptools python3-wheel python3-venv python3-all python3-msgpack python3-cryptography python3-psutil python3-numpy python3-grpcio python3-aiohttp python3-h2 python3-yaml python3-requests python3-docker dh-python pybuild-plugin-pyproject debhelper dpkg-dev lintian prometheus"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "deps: all packages present"
    exit 0
fi
echo "deps: installing:$missing"
if [ "$(id -u)" != 0 ]; then
    echo "deps: not root; run as root: apt-get install$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "deps: installed:$missing"
