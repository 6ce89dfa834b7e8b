#!/usr/bin/env bash
# Runs every fuzz target of the given packages for a while, one after the
# other, and keeps what they found: the small inputs that reached new code
# (go's fuzz cache) are copied into each package's testdata/fuzz/<Target>/,
# where plain `go test` replays them.
#
#   scripts/fuzz.sh [-t FUZZTIME] [-m REGEXP] [--no-keep] [PKG...]
#   scripts/fuzz.sh -t 3s --no-keep ./fsm ./assign  # CI (make fuzz-ci): every target of ./fsm ./assign, 3 s each
#   scripts/fuzz.sh -t 5m ./rpc -m '^FuzzCluster'
#   scripts/fuzz.sh ./rpc 5m '^FuzzCluster'  # the older form: PKG [FUZZTIME [REGEXP]]
#
# Packages default to ./fsm ./assign ./rpc ./kafka, FUZZTIME to 5m, REGEXP to ^Fuzz.
# A target that fails (a crash, a failed check, a build error) fails the
# script, after the other targets have run: its whole output is printed,
# and go has written the failing input to testdata/fuzz/<Target>/ (commit
# it with the fix: it becomes a regression test). --no-keep copies nothing
# from the cache (the failing input is still written). Go 1.26 may fail a
# target with a bare "context deadline exceeded" as FUZZTIME ends (the
# toolchain's, not a finding): with no failing input written, that is
# reported and not counted.
#
# Environment: FUZZMINIMIZETIME (default 0s) is how long each new input is
# minimized: go's default of 60 s per input leaves a target whose input
# takes 0.1 s (the ClusterService ones start a cluster) doing nothing but
# minimizing. FUZZPARALLEL (default 1) is the workers per target.
# FUZZKEEPBYTES (default 4096) is the largest input kept. Targets run at
# low priority, so the machine stays usable.
set -euo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-5m}
match='^Fuzz'
keep=1
minimize=${FUZZMINIMIZETIME:-0s}
parallel=${FUZZPARALLEL:-1}
keepbytes=${FUZZKEEPBYTES:-4096}
pkgs=()

is_duration() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h|x)$ ]]; }

while [ $# -gt 0 ]; do
	case $1 in
	-t) fuzztime=${2:?-t FUZZTIME}; shift 2 ;;
	-m) match=${2:?-m REGEXP}; shift 2 ;;
	--no-keep) keep=0; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
	*)
		# The older form: PKG FUZZTIME [REGEXP].
		if [ ${#pkgs[@]} -eq 1 ] && is_duration "$1"; then
			fuzztime=$1
			if [ $# -ge 2 ] && [[ $2 != -* ]]; then
				match=$2
				shift
			fi
		else
			pkgs+=("$1")
		fi
		shift
		;;
	esac
done
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./fsm ./assign ./rpc ./kafka)
is_duration "$fuzztime" || { echo "fuzz.sh: FUZZTIME $fuzztime is not a go duration (10s, 5m) or count (1000x)" >&2; exit 2; }

# corpus_files DIR: the names of the inputs in DIR, one a line.
corpus_files() { [ -d "$1" ] && ls "$1" || true; }

# deadline_race OUT: go's output is the -fuzztime deadline race and nothing
# else: the one FAIL line is followed by the bare deadline error.
deadline_race() {
	[ "$(grep -c -- '^--- FAIL' "$1")" -eq 1 ] &&
		grep -A1 -- '^--- FAIL' "$1" | tail -1 | grep -qx '    context deadline exceeded'
}

out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=()
flaked=()
ntargets=0
start=$SECONDS
for pkg in "${pkgs[@]}"; do
	import=$($go list "$pkg")
	cache="$($go env GOCACHE)/fuzz/$import"
	targets=$($go test -list "$match" "$pkg" | grep '^Fuzz' || true)
	[ -n "$targets" ] || { echo "== $pkg: no target matches $match"; continue; }
	for t in $targets; do
		ntargets=$((ntargets + 1))
		t0=$SECONDS
		status=0
		corpus_before=$(corpus_files "$pkg/testdata/fuzz/$t")
		nice -n 19 $go test "$pkg" -run '^$' -fuzz "^$t\$" -fuzztime "$fuzztime" \
			-fuzzminimizetime "$minimize" -parallel "$parallel" >"$out" 2>&1 || status=$?
		if [ $status -ne 0 ] && deadline_race "$out" && [ "$(corpus_files "$pkg/testdata/fuzz/$t")" = "$corpus_before" ]; then
			# A race in the toolchain: the -fuzztime deadline can
			# escape go's own filter and fail a target that found
			# nothing. A real failure writes its input.
			flaked+=("$pkg $t")
			echo "== $pkg $t: ok in $((SECONDS - t0)) s, though go reported its own fuzztime deadline (no failing input written)"
		elif [ $status -ne 0 ]; then
			failed+=("$pkg $t")
			echo "== $pkg $t FAILED after $((SECONDS - t0)) s (exit $status):"
			cat "$out"
		else
			last=$(grep '^fuzz: elapsed' "$out" | tail -1 || true)
			echo "== $pkg $t: ok in $((SECONDS - t0)) s; ${last#fuzz: }"
		fi
		if [ $keep -eq 1 ] && [ -d "$cache/$t" ]; then
			mkdir -p "$pkg/testdata/fuzz/$t"
			added=0
			for f in "$cache/$t"/*; do
				[ -f "$f" ] || continue
				dest="$pkg/testdata/fuzz/$t/$(basename "$f")"
				if [ ! -e "$dest" ] && [ "$(stat -c %s "$f")" -le "$keepbytes" ]; then
					cp "$f" "$dest"
					added=$((added + 1))
				fi
			done
			echo "   corpus: $(find "$pkg/testdata/fuzz/$t" -type f | wc -l) inputs in $pkg/testdata/fuzz/$t ($added new)"
		fi
	done
done
echo "== $ntargets targets, ${fuzztime} each, in $((SECONDS - start)) s"
if [ ${#flaked[@]} -gt 0 ]; then
	echo "go's own deadline race, not counted as failures:"
	printf '  %s\n' "${flaked[@]}"
fi
[ $ntargets -gt 0 ] || { echo "fuzz.sh: no target matches $match in ${pkgs[*]}" >&2; exit 2; }
if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
