#!/usr/bin/env bash
# Installs one etcd release from Debian's package pool into a folder of its own, for the tests:
#
#   tools/install-etcd.sh DEST SUITE VERSION SERVER_SHA256 CLIENT_SHA256
#
# It reads SUITE's package lists (e.g. sid) from the machine's own Debian mirror, the one named in
# its apt sources, into a temporary folder, downloads etcd-server and etcd-client of exactly
# VERSION, checks each .deb's SHA-256 against the pins, and unpacks both into DEST
# (DEST/usr/bin/{etcd,etcdctl,etcdutl}). The machine's apt sources, lists and installed packages
# are never touched. Debian's etcd binaries are statically linked Go: they need only libc.
#
# A suite moves on: when VERSION has left it, this says so and names the version it found.
set -euo pipefail

dest=${1:?DEST}
suite=${2:?SUITE}
version=${3:?VERSION}
declare -A pin=([etcd-server]=${4:?SERVER_SHA256} [etcd-client]=${5:?CLIENT_SHA256})

log() { echo "install-etcd: $*" >&2; }

if [ -x "$dest/usr/bin/etcd" ] && "$dest/usr/bin/etcd" --version 2>/dev/null | grep -q "etcd Version: ${version%%-*}$"; then
    exit 0
fi

# The mirror of the machine's first Debian source (deb822 or one-line format).
uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
if [ -z "$uri" ]; then
    uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
fi
[ -n "$uri" ] || { log "no Debian mirror in /etc/apt/sources.list{,.d}: cannot fetch etcd $version"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/debs"
echo "deb $uri $suite main" > "$work/sources.list"
apt=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache::archives=$work/debs" -o APT::Sandbox::User=root)
log "reading $suite's package lists from $uri"
apt-get "${apt[@]}" -qq update
for p in etcd-server etcd-client; do
    found=$(apt-cache "${apt[@]}" show "$p" 2>/dev/null | sed -n 's/^Version: //p' | sort -uV | tr '\n' ' ')
    if ! grep -qw -- "$version" <<< "$found"; then
        log "$p $version is no longer in $suite (found: ${found:-nothing}); pin a version that is, with its SHA-256 (Makefile, ETCD35_*)"
        exit 1
    fi
done
(cd "$work/debs" && apt-get "${apt[@]}" -qq download "etcd-server=$version" "etcd-client=$version")
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
for p in etcd-server etcd-client; do
    deb=$(echo "$work/debs/${p}_"*.deb)
    actual=$(sha256sum "$deb" | cut -d' ' -f1)
    if [ "$actual" != "${pin[$p]}" ]; then
        log "REFUSING $(basename "$deb"): SHA-256 $actual, pinned ${pin[$p]}"
        exit 1
    fi
    dpkg-deb -x "$deb" "$dest.tmp"
done
rm -rf "$dest"
mv "$dest.tmp" "$dest"
log "etcd $version in $dest/usr/bin: $("$dest/usr/bin/etcd" --version | head -1)"
