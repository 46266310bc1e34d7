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

n=0
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  n=$((n + 1))
  echo "fuzz: [$n/${#targets[@]}] $name ($pkg)" >&2
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" ${extra[@]+"${extra[@]}"} "$pkg"; then
    echo "fuzz: FAILED: $name in $pkg; a failing input found by fuzzing is kept under testdata/fuzz/$name/ of the package" >&2
    exit 1
  fi
done
echo "fuzz: all ${#targets[@]} targets passed" >&2
