#!/usr/bin/env bash
# Install the system packages the deploy tests need, from Debian:
#   prometheus              the server (end-to-end test) and promtool (check config / check rules / test rules)
#   prometheus-alertmanager amtool (check-config and routing tests of deploy/alertmanager/alertmanager.yml)
#   chromium                headless browser that opens the HTML report and the Phoenix UI for screenshots
#   fonts-ipafont-gothic    Japanese glyphs, so the demo's Japanese text renders in those screenshots
#
# Idempotent and non-interactive: when both tools are present it installs nothing. The packages ship services;
# the tests never use them (they start their own Prometheus on loopback, on a free port, with a temporary
# storage directory), so this script keeps dpkg from starting them and stops them where an init system did.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

missing=0
for tool in prometheus promtool amtool chromium; do
  command -v "$tool" >/dev/null 2>&1 || missing=1
done
[ -d /usr/share/fonts/opentype/ipafont-gothic ] || missing=1

if [ "$missing" -eq 1 ]; then
  # policy-rc.d exiting 101 means "action forbidden": invoke-rc.d then leaves the services unstarted. Create it
  # only if there is none (container images often ship one) and remove only what we created.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 0755 "$policy"
    created_policy=1
  fi
  cleanup() {
    if [ "$created_policy" -eq 1 ]; then
      $SUDO rm -f "$policy"
    fi
  }
  trap cleanup EXIT

  $SUDO apt-get update
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus prometheus-alertmanager \
    chromium fonts-ipafont-gothic fonts-dejavu-core
fi

# The packaged services are not needed: stop and disable them if systemd runs here (no-op otherwise).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus prometheus-alertmanager >/dev/null 2>&1 || true
fi

prometheus --version 2>&1 | head -n 1
promtool --version 2>&1 | head -n 1
amtool --version 2>&1 | head -n 1
chromium --version 2>/dev/null | head -n 1
