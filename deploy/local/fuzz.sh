#!/usr/bin/env bash
# Runs every Go fuzz target in the repository, one after another, each for FUZZTIME
# (default 30s), and stops at the first that fails, naming it. `make fuzz` runs it;
# `make test` runs only the targets' seed corpora.
#
#   deploy/local/fuzz.sh [PACKAGE_PATTERN ...]   (default github.com/bookstore-go/bookstore/...)
#   FUZZTIME=3s deploy/local/fuzz.sh              (a go test -fuzztime: 30s, 1m, 5000x)
#   FUZZFLAGS='-parallel 1' deploy/local/fuzz.sh   (more go test flags for each run)
#
# A failing input is written by go test under the package's testdata/fuzz/<Target>/; fix
# the code and commit that file, so the seed corpus keeps the bug fixed.
set -euo pipefail

cd "$(dirname "$0")/../.."
FUZZTIME="${FUZZTIME:-30s}"
read -r -a extra <<<"${FUZZFLAGS:-}"
patterns=("$@")
[ ${#patterns[@]} -gt 0 ] || patterns=(github.com/bookstore-go/bookstore/...)

# The packages whose test files declare a fuzz target: found by reading the files, so
# only those packages are compiled to be asked for their targets' names.
candidates=()
while read -r pkg dir files; do
  for f in $files; do
    if grep -qE '^func Fuzz[A-Za-z0-9_]*\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\)' "$dir/$f"; then
      candidates+=("$pkg")
      break
    fi
  done
done < <(go list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' "${patterns[@]}")

targets=()
for pkg in ${candidates[@]+"${candidates[@]}"}; do
  while read -r name; do
    [[ "$name" == Fuzz* ]] && targets+=("$pkg $name")
  done < <(go test -list '^Fuzz' "$pkg" | grep -v '^ok ')
done

if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets in ${patterns[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${FUZZTIME} each" >&2

# Go before 1.27 can end a duration -fuzztime with a bare "context deadline exceeded" and
# no failing input: a race in its fuzzing coordinator under CPU load (go.dev/issue/75804),
# not a finding. A run counts as failed when it writes an input under testdata/fuzz/, or
# fails for any other reason; the coordinator's race is run again, up to three times.
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
n=0
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  n=$((n + 1))
  corpus="$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$name"
  for attempt in 1 2 3; do
    echo "fuzz: [$n/${#targets[@]}] $name ($pkg)" >&2
    before="$(inputs "$corpus")"
    if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" ${extra[@]+"${extra[@]}"} "$pkg" 2>&1 | tee "$out"; then
      break
    fi
    after="$(inputs "$corpus")"
    if [ "$after" -eq "$before" ] && grep -q '^    context deadline exceeded$' "$out" && [ "$attempt" -lt 3 ]; then
      echo "fuzz: $name stopped on Go's fuzztime race (go.dev/issue/75804), no failing input: running it again" >&2
      continue
    fi
    echo "fuzz: FAILED: $name in $pkg; a failing input found by fuzzing is kept under $corpus" >&2
    exit 1
  done
done
echo "fuzz: all ${#targets[@]} targets passed" >&2
