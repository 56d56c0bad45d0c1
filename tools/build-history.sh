#!/usr/bin/env bash
# Builds the history recorder and checker (tests/history: clientv3 and porcupine, pinned by its
# go.mod and go.sum) into DEST/history:
#
#   tools/build-history.sh DEST
#
# Skipped when DEST holds a build of exactly these sources (a stamp beside the binary).
# GOTOOLCHAIN=local: the machine's Go; -mod=readonly: go.sum pins every byte.
set -euo pipefail

dest=${1:?DEST}
src=$(cd "$(dirname "$0")/../tests/history" && pwd)
# Every .go file, in subfolders too (tests and any internal packages), in a fixed order.
stamp=$( (cat "$src/go.mod" "$src/go.sum"; find "$src" -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 cat) | sha256sum | cut -c1-16)
if [ -f "$dest/.stamp-$stamp" ] && [ -x "$dest/history" ]; then
    exit 0
fi
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
echo "build-history: the history recorder and checker into $dest" >&2
began=$(date +%s)
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
(cd "$src" && go build -trimpath -o "$dest.tmp/history" .)
touch "$dest.tmp/.stamp-$stamp"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "build-history: built in $(( $(date +%s) - began )) s" >&2
