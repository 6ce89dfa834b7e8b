#!/usr/bin/env bash
# Installs what the chaos suite's netns mode needs (ip from iproute2,
# iptables) when it is missing. Debian/Ubuntu; run as root (CI is).
set -euo pipefail
if command -v ip >/dev/null && command -v iptables >/dev/null; then
	echo "chaos deps: ip and iptables present"
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq iproute2 iptables >/dev/null
echo "chaos deps: installed iproute2 and iptables"
