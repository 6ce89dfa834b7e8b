#!/usr/bin/env bash
# Runs every fuzz target of a package for a while and keeps what it found:
# the inputs that reached new code (go's fuzz cache) are copied into the
# package's testdata/fuzz/<Target>/, where `make test` runs them as plain
# tests.
#
#   scripts/fuzz.sh <package dir> [fuzztime] [target regexp]
#   e.g. scripts/fuzz.sh ./rpc 5m '^FuzzCluster'
#
# Targets run one after the other, one worker each (-parallel 1) and at low
# priority, so the machine stays usable. FUZZMINIMIZETIME (default 0s) is how
# long each new input is minimized: go's default of 60 s per input leaves a
# target whose input takes 0.1 s (the ClusterService ones start a cluster)
# doing nothing but minimizing.
set -euo pipefail
pkg=${1:?package dir, e.g. ./rpc}
fuzztime=${2:-5m}
match=${3:-^Fuzz}
minimize=${FUZZMINIMIZETIME:-0s}
go=${GO:-go}
import=$($go list "$pkg")
cache="$($go env GOCACHE)/fuzz/$import"
targets=$($go test -list "$match" "$pkg" | grep '^Fuzz')
for t in $targets; do
	echo "== $t for $fuzztime"
	nice -n 19 $go test "$pkg" -run '^$' -fuzz "^$t\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" -parallel 1 2>&1 | tail -3
	if [ -d "$cache/$t" ]; then
		mkdir -p "$pkg/testdata/fuzz/$t"
		cp -n "$cache/$t"/* "$pkg/testdata/fuzz/$t/" 2>/dev/null || true
	fi
	echo "   corpus: $(ls "$pkg/testdata/fuzz/$t" 2>/dev/null | wc -l) inputs in $pkg/testdata/fuzz/$t"
done
