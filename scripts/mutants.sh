#!/usr/bin/env bash
# The mutation suite: each test/mutants/NAME.patch is a small, realistic bug
# (what a reviewer fears most) with the tests and chaos schedules that must
# catch it. `run` applies each to a scratch copy of the tree and fails unless
# every test it names fails and every chaos schedule it names reports the run
# INVALID. A surviving mutant means a test that passes on a broken build.
#
#   scripts/mutants.sh run [--no-chaos] [--baseline] [NAME...]  # all when no NAME
#                               (MUTANTS_JOBS=N: N runs side by side)
#   scripts/mutants.sh new NAME      # a scratch git copy of the tree to write a bug in
#   scripts/mutants.sh save NAME 'the bug' [--chaos TARGET] [KILL...]
#   scripts/mutants.sh list
#
# A patch starts with header lines (git apply ignores them):
#   # mutant: the bug, in one line
#   # kill: arguments to `go test -count=1`, run from the repository root
#   # chaos: a chaos.mk target, run with --cohortd <mutant> --expect-invalid
# Every kill line must fail with the bug in. One that passes is run once
# more: failing then, the mutant is reported FLAKY (its test catches the
# bug only some of the time: strengthen it) without failing the run;
# passing again, it survived. --baseline also runs each on the
# unchanged tree, where it must pass. A kill line that does not build counts
# as a survivor (the bug must be in the code, not a compile error).
#
# Scratch copies live in $MUTANTS_DIR (default /tmp/cohort-mutants); they
# share the Go build cache, so each mutant rebuilds only what it touched.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mutdir=$root/test/mutants
scratch_base=${MUTANTS_DIR:-/tmp/cohort-mutants}
go=${GO:-go}
kill_timeout=${MUTANT_TEST_TIMEOUT:-10m}
# Kill lines run without the race detector unless MUTANTS_RACE=1: a mutant
# is a wrong behaviour, not a race, and `make test` runs the same tests with
# -race; a race build costs each mutant a minute more on two cores.
race=
[ "${MUTANTS_RACE:-0}" = 1 ] && race=-race

die() { echo "mutants: $*" >&2; exit 2; }

# copy_tree DIR: DIR becomes a git repository holding the working tree as it
# is now (tracked and untracked files, not ignored ones), one commit.
copy_tree() {
	local dest=$1
	rm -rf "$dest"
	mkdir -p "$dest"
	(cd "$root" && git ls-files -co --exclude-standard -z |
		tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -C "$dest" -xf -
	(cd "$dest" && git init -q && git add -A &&
		git -c user.name=mutants -c user.email=mutants@localhost commit -qm base)
}

header() { sed -n "s/^# $2: //p" "$1"; }

cmd_new() {
	local name=${1:?NAME}
	copy_tree "$scratch_base/$name"
	echo "$scratch_base/$name"
}

cmd_save() {
	local name=${1:?NAME} desc=${2:?'the bug, in one line'}
	shift 2
	local chaos=() kills=()
	while [ $# -gt 0 ]; do
		case $1 in
		--chaos) chaos+=("${2:?chaos target}"); shift 2 ;;
		*) kills+=("$1"); shift ;;
		esac
	done
	[ ${#kills[@]} -gt 0 ] || [ ${#chaos[@]} -gt 0 ] || die "$name: name at least one kill line or --chaos target"
	local dir=$scratch_base/$name
	[ -d "$dir/.git" ] || die "$name: no scratch copy; run: $0 new $name"
	local diff
	# Test runs in the scratch copy may leave files behind (rapid's
	# failure files in testdata): they are no part of the bug.
	diff=$(cd "$dir" && git add -A -- . ':!**/testdata/**' && git diff --cached)
	[ -n "$diff" ] || die "$name: the scratch copy has no change"
	if (cd "$dir" && git diff --cached --name-only) | grep -q '_test\.go$'; then
		die "$name: a mutant changes product code, not tests"
	fi
	mkdir -p "$mutdir"
	{
		echo "# mutant: $desc"
		local k
		for k in "${kills[@]}"; do echo "# kill: $k"; done
		for k in "${chaos[@]}"; do echo "# chaos: $k"; done
		echo "$diff"
	} >"$mutdir/$name.patch"
	echo "saved $mutdir/$name.patch"
}

cmd_list() {
	local p
	for p in "$mutdir"/*.patch; do
		printf '%-44s %s\n' "$(basename "$p" .patch)" "$(header "$p" mutant)"
	done
}

# touched_packages PATCH: the package directories the patch changes, for a
# compile check without linking every command.
touched_packages() {
	sed -n 's|^diff --git a/\(.*\)/[^/]*\.go b/.*|./\1/|p' "$1" | sort -u
}

# run_kill DIR ARGS: runs one kill line in DIR; prints killed, survived or
# no-build.
run_kill() {
	local dir=$1 args=$2 out rc
	set +e
	out=$(cd "$dir" && eval "$go test $race -count=1 -timeout $kill_timeout $args" 2>&1)
	rc=$?
	set -e
	if grep -qE '\[(build|setup) failed\]' <<<"$out"; then
		echo no-build
		printf '%s\n' "$out" | tail -20 >&2
	elif [ $rc -ne 0 ]; then
		echo killed
	else
		echo survived
	fi
}

cmd_run() {
	local with_chaos=1 baseline=0 names=()
	while [ $# -gt 0 ]; do
		case $1 in
		--no-chaos) with_chaos=0 ;;
		--baseline) baseline=1 ;;
		-*) die "unknown flag $1" ;;
		*) names+=("$1") ;;
		esac
		shift
	done
	if [ ${#names[@]} -eq 0 ] && [ -z "${MUTANTS_QUEUE:-}" ]; then
		local p
		for p in "$mutdir"/*.patch; do names+=("$(basename "$p" .patch)"); done
	fi
	if [ "${MUTANTS_JOBS:-1}" -gt 1 ] && [ ${#names[@]} -gt 1 ]; then
		run_shards "$with_chaos" "$baseline" "${names[@]}"
		return
	fi
	dir=$scratch_base/run.$$
	copy_tree "$dir"
	trap 'rm -rf "$scratch_base/run.$$"' EXIT
	local failed=0 name patch verdict start secs k out results=() next=0
	while :; do
		if [ -n "${MUTANTS_QUEUE:-}" ]; then
			name=$(pop_queue "$MUTANTS_QUEUE") || break
		else
			[ $next -lt ${#names[@]} ] || break
			name=${names[$next]}
			next=$((next + 1))
		fi
		patch=$mutdir/$name.patch
		[ -f "$patch" ] || die "no mutant $name ($patch)"
		start=$(date +%s)
		verdict=killed
		local by=()
		mapfile -t kills < <(header "$patch" kill)
		mapfile -t chaos < <(header "$patch" chaos)
		if [ $with_chaos -eq 0 ] && [ ${#kills[@]} -eq 0 ]; then
			echo "== $name: chaos only, skipped (--no-chaos)"
			continue
		fi
		echo "== $name: $(header "$patch" mutant)"
		if [ $baseline -eq 1 ]; then
			for k in "${kills[@]}"; do
				if [ "$(run_kill "$dir" "$k")" != survived ]; then
					echo "   baseline: fails without the bug: $k"
					verdict=bad-baseline
				else
					echo "   baseline: passes without the bug: $k"
				fi
			done
		fi
		# Only a chaos-only mutant is built here: a kill line builds
		# what it needs and reports a build failure itself, and a
		# package's own tests compile their own copy of it, so a build
		# first would be a compile no test reuses.
		if ! (cd "$dir" && git apply "$patch"); then
			echo "   does not apply: rewrite it against today's code"
			verdict=stale
		elif [ ${#kills[@]} -eq 0 ] && ! out=$(cd "$dir" && $go build $(touched_packages "$patch") 2>&1); then
			printf '%s\n' "$out" | tail -20
			echo "   does not build"
			verdict=no-build
		else
			for k in "${kills[@]}"; do
				local r
				r=$(run_kill "$dir" "$k")
				if [ "$r" = survived ]; then
					# Once more: a kill line that catches the bug only
					# some of the time is a weak test, named as such
					# (flaky) in the report, not a failed run.
					echo "   survived by: go test $k; running it again"
					r=$(run_kill "$dir" "$k")
					[ "$r" = killed ] && r=flaky
				fi
				echo "   $r by: go test $k"
				case $r in
				killed) by+=("$k") ;;
				flaky)
					by+=("$k")
					[ "$verdict" = killed ] && verdict=flaky
					;;
				*) verdict=$r ;;
				esac
			done
			if [ $with_chaos -eq 1 ]; then
				for k in "${chaos[@]}"; do
					(cd "$dir" && $go build -o "$dir/cohortd-mutant" ./cmd/cohortd)
					if make -s -C "$root" "$k" CHAOS_FLAGS="--cohortd $dir/cohortd-mutant --expect-invalid" >"$dir/chaos-$k.log" 2>&1; then
						echo "   killed by: make $k (run INVALID)"
						by+=("make $k")
					else
						echo "   survived: make $k (log: tail of $dir/chaos-$k.log)"
						tail -15 "$dir/chaos-$k.log"
						[ "$verdict" = killed ] && verdict=survived
					fi
				done
			fi
		fi
		(cd "$dir" && git reset -q --hard && git clean -qfd)
		secs=$(($(date +%s) - start))
		case $verdict in
		killed | flaky) ;;
		*) failed=1 ;;
		esac
		echo "   $verdict in ${secs}s"
		results+=("$(printf '%-44s %-9s %5ss  %s' "$name" "$verdict" "$secs" "$(
			IFS=';'
			echo "${by[*]:-}"
		)")")
	done
	echo
	echo "== mutants: ${#results[@]} run"
	printf '%s\n' "${results[@]}"
	# What needs a look, last, where a truncated log still shows it.
	local r
	for r in "${results[@]}"; do
		case $(awk '{print $2}' <<<"$r") in
		killed) ;;
		flaky) echo "mutants: FLAKY (killed only on a second run; strengthen its test): $r" ;;
		*) echo "mutants: FAILED: $r" ;;
		esac
	done
	if [ $failed -ne 0 ]; then
		echo "mutants: some survived or could not be judged" >&2
		return 1
	fi
}

# pop_queue prints the first name in the queue file and removes it; it
# fails when the queue is empty. The workers share the file under a lock.
pop_queue() {
	flock "$1.lock" bash -c 'n=$(head -n 1 "$1") && [ -n "$n" ] && sed -i 1d "$1" && echo "$n"' _ "$1"
}

# slow_first orders the names so that mutants whose kill lines start
# processes or clusters (the longest runs) are taken first: a long run
# taken last would leave the other workers idle at the end.
slow_first() {
	local name slow=() rest=()
	for name in "$@"; do
		if grep -qE '^# kill: .* \./(test/ops|kafka|cmd/cohortd|cluster|client)/' "$mutdir/$name.patch" 2>/dev/null; then
			slow+=("$name")
		else
			rest+=("$name")
		fi
	done
	printf '%s\n' "${slow[@]}" "${rest[@]}"
}

# run_shards WITH_CHAOS BASELINE NAME...: MUTANTS_JOBS runs of this script
# side by side, each on its own scratch copy, each taking the next mutant
# from a shared queue when it is done with one, so that no worker idles
# while another has a backlog; their reports follow one another once all
# are done. Most kill lines wait (for a timeout, for processes to start)
# more than they compute, so on two cores several at a time take less
# time than one after another.
run_shards() {
	local with_chaos=$1 baseline=$2
	shift 2
	local jobs=$MUTANTS_JOBS flags=() i pids=() failed=0
	[ "$with_chaos" -eq 0 ] && flags+=(--no-chaos)
	[ "$baseline" -eq 1 ] && flags+=(--baseline)
	local logs
	logs=$(mktemp -d)
	slow_first "$@" | grep -v '^$' >"$logs/queue"
	[ "$jobs" -le $# ] || jobs=$#
	for ((i = 0; i < jobs; i++)); do
		MUTANTS_JOBS=1 MUTANTS_QUEUE="$logs/queue" "$0" run "${flags[@]}" >"$logs/$i.log" 2>&1 &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed=1
	done
	for i in "${!pids[@]}"; do
		cat "$logs/$i.log"
	done
	# Every shard's verdicts needing a look, together at the very end.
	cat "$logs"/*.log | grep -E '^mutants: (FLAKY|FAILED)' || true
	rm -rf "$logs"
	if [ $failed -ne 0 ]; then
		echo "mutants: some survived or could not be judged" >&2
		return 1
	fi
}

case ${1:-} in
new) shift; cmd_new "$@" ;;
save) shift; cmd_save "$@" ;;
run) shift; cmd_run "$@" ;;
list) cmd_list ;;
*) sed -n '2,23p' "$0" >&2; exit 2 ;;
esac
