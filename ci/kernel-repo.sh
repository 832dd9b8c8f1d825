#!/usr/bin/env bash
# Installs a built pacheck to a temporary prefix, moves the prefix (an installed pacheck must not depend on
# where it was installed or on the source tree), then configures, builds and tests examples/kernel-repo
# against it with ctest: the plugin through pacheck_add_tests (gate and tail-poison, 2 shards each) and the
# GoogleTest cells binary (tail-poison, 2 shards).
#
#   bash ci/kernel-repo.sh [BUILD_DIR] [WORK_DIR]      (defaults build/default and a mktemp directory)
#
# Exit 0 when every step and every test passed; otherwise the failing step's status.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
work=${2:-$(mktemp -d "${TMPDIR:-/tmp}/pacheck-kernel-repo.XXXXXX")}
jobs=${PACHECK_JOBS:-2}
rm -rf "$work/prefix" "$work/moved" "$work/build"
mkdir -p "$work"
start=$(date +%s)

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
mv "$work/prefix" "$work/moved"   # relocated: nothing may point into the old prefix
prefix=$work/moved
test -x "$prefix/bin/pacheck"
# The installed CLI finds its installed suites, with no variable set, from a directory with no checkout above.
(cd / && env -u PACHECK_SUITES_DIR "$prefix/bin/pacheck" list suites) | grep -q '^tail-poison'

# A kernel repository outside the tree: a copy, so no relative path can reach pacheck's sources.
rm -rf "$work/src"
cp -r examples/kernel-repo "$work/src"
env -u PACHECK_SUITES_DIR cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log"
cmake --build "$work/build" -j "$jobs" > "$work/build.log"
env -u PACHECK_SUITES_DIR ctest --test-dir "$work/build" -j "$jobs" --output-on-failure
echo "kernel-repo: installed, relocated, built and tested in $(( $(date +%s) - start )) s ($work)"
