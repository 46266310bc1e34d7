#!/usr/bin/env bash
# Measures the whole system at another commit and at this working tree, in the same run,
# and prints each figure of BenchmarkSystemThroughput as a ratio: this tree's over the
# other's. The figures of one machine move by 2x with what else runs on it; two systems
# measured side by side, alternating which goes first, move together.
#
#   deploy/local/bench-compare.sh BASE [RUNS]   (RUNS of each, alternating; default 2)
#   BENCH_ORDERS=300 deploy/local/bench-compare.sh BASE 1   (a quick look)
#
# `make bench-compare BASE=<commit>` runs it. The instrument is this tree's benchmark
# (e2e/throughput_bench_test.go and procstat_test.go, copied over BASE's): both systems
# are measured by the same code, BASE's services built from BASE. Each run's output is
# kept in a directory it names at the end.
set -euo pipefail

base="${1:?usage: bench-compare.sh BASE [RUNS]}"
runs="${2:-2}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
tree="$(mktemp -d /tmp/bookstore-bench-base.XXXXXX)"
out="$(mktemp -d /tmp/bookstore-bench-compare.XXXXXX)"
trap 'git -C "$root" worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"' EXIT
git -C "$root" worktree add --detach -q "$tree" "$base"
cp "$root/e2e/throughput_bench_test.go" "$root/e2e/procstat_test.go" "$tree/e2e/"

bench() { # bench DIR NAME: one run of the system benchmark in DIR, its output in $out/NAME
	echo "== $2" >&2
	(cd "$1" && go test -count=1 -run '^$' -bench BenchmarkSystemThroughput -benchtime=1x -timeout 20m ./e2e/) | tee "$out/$2" >&2
}
for i in $(seq 1 "$runs"); do
	if ((i % 2)); then
		bench "$tree" "base-$i"; bench "$root" "head-$i"
	else
		bench "$root" "head-$i"; bench "$tree" "base-$i"
	fi
done

# The benchmark line is "BenchmarkSystemThroughput-2 1 <ns> ns/op <value> <unit> ...":
# the median of each unit over the runs of each side, and head/base.
awk -v base="$(git -C "$root" rev-parse --short "$base")" '
	/^BenchmarkSystemThroughput/ {
		side = (FILENAME ~ /\/base-/) ? "base" : "head"
		for (i = 5; i < NF; i += 2) { n = ++count[side, $(i+1)]; v[side, $(i+1), n] = $i; units[$(i+1)] = 1 }
	}
	function median(side, unit,   n, i, j, t, a) {
		n = count[side, unit]
		for (i = 1; i <= n; i++) a[i] = v[side, unit, i]
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		printf "%-30s %12s %12s %8s\n", "median of each side", base, "this tree", "ratio"
		for (u in units) if (count["base", u] && count["head", u]) {
			b = median("base", u); h = median("head", u)
			printf "%-30s %12.3f %12.3f %8.2f\n", u, b, h, (b ? h / b : 0)
		}
	}' "$out"/base-* "$out"/head-* | { read -r header; echo "$header"; sort; }
echo "runs kept in $out"
