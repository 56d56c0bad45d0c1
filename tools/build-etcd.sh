#!/usr/bin/env bash
# Builds one etcd minor from etcd's own Go modules, pinned by tools/etcd/MINOR/go.mod and go.sum:
#
#   tools/build-etcd.sh MINOR DEST          e.g. tools/build-etcd.sh 3.6 /var/tmp/etcd-asg-lifecycle/etcd-3.6
#
# DEST/bin/{etcd,etcdctl,etcdutl}, side by side. The module requires the three main modules as
# tools (`go get -tool`): `go install module@version` cannot build etcd, whose go.mod files carry
# `replace` directives (https://github.com/etcd-io/etcd/issues/18501); as requirements of this
# module those are ignored and go.sum pins every byte. One module per minor: in one module, version
# selection would raise api/v3, whose version.Version is what `etcd --version` prints.
# The build is skipped when DEST holds a build of exactly this go.sum (a stamp beside the binaries).
# GOTOOLCHAIN=local: the machine's Go, never one downloaded; CGO_ENABLED=0 as etcd's releases
# (https://github.com/etcd-io/etcd/blob/main/scripts/build_lib.sh).
set -euo pipefail

minor=${1:?MINOR}
dest=${2:?DEST}
here=$(cd "$(dirname "$0")" && pwd)
mod=$here/etcd/$minor
[ -f "$mod/go.mod" ] || { echo "build-etcd: no $mod/go.mod (minors: $(ls "$here/etcd" | tr '\n' ' '))" >&2; exit 1; }
stamp=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)
if [ -f "$dest/.stamp-$stamp" ] && [ -x "$dest/bin/etcd" ]; then
    exit 0
fi
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
version=$(cd "$mod" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
echo "build-etcd: etcd $version from Go modules into $dest (a few minutes the first time)" >&2
began=$(date +%s)
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp/bin"
for tool in etcd:go.etcd.io/etcd/server/v3 etcdctl:go.etcd.io/etcd/etcdctl/v3 etcdutl:go.etcd.io/etcd/etcdutl/v3; do
    (cd "$mod" && go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$version" \
        -o "$dest.tmp/bin/${tool%%:*}" "${tool#*:}")
done
touch "$dest.tmp/.stamp-$stamp"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "build-etcd: $("$dest/bin/etcd" --version | head -1) in $(( $(date +%s) - began )) s" >&2
