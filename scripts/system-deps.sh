#!/usr/bin/env bash
# Checks the system packages Sluice needs and installs the missing ones from Debian when root.
# Java 17 runs PySpark; prometheus/promtool serve the monitoring tests and the deploy checks.
set -euo pipefail
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  echo "Java 17 or newer is missing: PySpark needs it (Debian: apt-get install openjdk-17-jre-headless)"
  exit 1
fi
missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} from Debian's packages"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
      || { echo "apt-get install ${missing[*]} failed: the monitoring tests need it"; exit 1; }
  else
    echo "missing ${missing[*]} (Debian package prometheus): the monitoring tests will be skipped" >&2
  fi
fi
