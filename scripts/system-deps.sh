#!/usr/bin/env bash
# Checks the Debian packages Sluice needs and installs the missing ones; fails loudly when it cannot.
#   scripts/system-deps.sh demo   Java 17 (PySpark) only
#   scripts/system-deps.sh test   (default) also what the test suite runs: prometheus and promtool
#                                 (monitoring tests), openssl (TLS certificates), systemd-analyze
#                                 (the units' check), ip and nft (the fault campaign's network)
#                                 and chromium (the streaming page in a real browser)
set -euo pipefail
mode="${1:-test}"
case "$mode" in demo|test) ;; *) echo "usage: $0 [demo|test]" >&2; exit 2 ;; esac

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }

missing=()   # Debian packages to install
java_ok() { command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ]; }
java_ok || missing+=(openjdk-17-jre-headless)
if [ "$mode" = test ]; then
  # command:package
  for pair in prometheus:prometheus promtool:prometheus openssl:openssl systemd-analyze:systemd chromium:chromium \
      ip:iproute2 nft:nftables; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
fi
[ ${#missing[@]} -eq 0 ] && exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "missing Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing packages ${missing[*]} and no apt-get to install them: install their equivalents by hand" >&2
  exit 1
fi
echo "installing ${missing[*]} from Debian's packages"
"${sudo[@]}" apt-get update -qq >/dev/null \
  || { echo "apt-get update failed: Debian's package index is unreachable" >&2; exit 1; }
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
  || { echo "apt-get install ${missing[*]} failed" >&2; exit 1; }
java_ok || { echo "Java 17 or newer is still missing after installing ${missing[*]}" >&2; exit 1; }
