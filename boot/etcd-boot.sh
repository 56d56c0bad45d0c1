#!/bin/bash
# Boots one etcd member of an etcd-asg-lifecycle cluster.
#
# The instance decides nothing: it waits until the function has added it to the cluster and
# published its config in SSM Parameter Store (<prefix>/members/<instance id>), then starts etcd
# with exactly that config. The same file runs as EC2 user data (template.yaml embeds it) and in
# the local simulation (BOOT_MODE=exec).
#
# Settings (environment; the template sets them in front of this file):
#   PARAMETER_PREFIX   required, e.g. /etcd-asg-lifecycle/prod
#   INSTANCE_ID        default: from the instance metadata service
#   DATA_DIR           default /var/lib/etcd
#   CONFIG_FILE        default /etc/etcd/etcd-asg.env
#   BOOT_MODE          systemd (default: install a unit and start it) | exec (run etcd in the foreground)
#   ETCD_BIN           default /usr/local/bin/etcd; fetched from ETCD_DOWNLOAD_URL if missing
#   ETCD_DOWNLOAD_URL  a release tarball (etcd-vX.Y.Z-linux-<arch>.tar.gz) with etcd inside
#   POLL_SECONDS       default 5
set -euo pipefail

PARAMETER_PREFIX=${PARAMETER_PREFIX:?PARAMETER_PREFIX is required}
DATA_DIR=${DATA_DIR:-/var/lib/etcd}
CONFIG_FILE=${CONFIG_FILE:-/etc/etcd/etcd-asg.env}
BOOT_MODE=${BOOT_MODE:-systemd}
ETCD_BIN=${ETCD_BIN:-/usr/local/bin/etcd}
POLL_SECONDS=${POLL_SECONDS:-5}

log() { echo "etcd-boot: $*" >&2; }

imds() {
    local token
    token=$(curl -sf -X PUT http://169.254.169.254/latest/api/token \
        -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
    curl -sf -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}

install_etcd() {
    [ -x "$ETCD_BIN" ] && return 0
    : "${ETCD_DOWNLOAD_URL:?etcd is not at $ETCD_BIN and ETCD_DOWNLOAD_URL is not set}"
    log "installing etcd from $ETCD_DOWNLOAD_URL"
    local tmp
    tmp=$(mktemp -d)
    curl -fsSL "$ETCD_DOWNLOAD_URL" | tar xz -C "$tmp" --strip-components=1
    install -m 0755 "$tmp/etcd" "$ETCD_BIN"
    [ -f "$tmp/etcdctl" ] && install -m 0755 "$tmp/etcdctl" "$(dirname "$ETCD_BIN")/etcdctl"
    rm -rf "$tmp"
}

# Waits for this instance's published config and writes it, plus where to listen and store, to
# CONFIG_FILE. Only ETCD_* lines are kept: the file must not be able to set anything else.
fetch_config() {
    local name="$PARAMETER_PREFIX/members/$INSTANCE_ID" value
    log "waiting for $name"
    until value=$(aws ssm get-parameter --name "$name" --query Parameter.Value --output text 2>/dev/null); do
        sleep "$POLL_SECONDS"
    done
    mkdir -p "$(dirname "$CONFIG_FILE")" "$DATA_DIR"
    printf '%s\n' "$value" | grep -E '^ETCD_[A-Z_]+=[^[:space:]]*$' > "$CONFIG_FILE.tmp"
    local peer client
    peer=$(sed -n 's/^ETCD_INITIAL_ADVERTISE_PEER_URLS=//p' "$CONFIG_FILE.tmp")
    client=$(sed -n 's/^ETCD_ADVERTISE_CLIENT_URLS=//p' "$CONFIG_FILE.tmp")
    [ -n "$peer" ] && [ -n "$client" ] || { log "config at $name lacks advertise URLs"; exit 1; }
    {
        echo "ETCD_LISTEN_PEER_URLS=$peer"
        echo "ETCD_LISTEN_CLIENT_URLS=$client"
        echo "ETCD_DATA_DIR=$DATA_DIR"
    } >> "$CONFIG_FILE.tmp"
    mv "$CONFIG_FILE.tmp" "$CONFIG_FILE"
    log "config written to $CONFIG_FILE"
}

start_etcd() {
    case "$BOOT_MODE" in
    exec)
        local -a vars=()
        while IFS= read -r line; do vars+=("$line"); done < "$CONFIG_FILE"
        exec env -i PATH="$PATH" "${vars[@]}" "$ETCD_BIN"
        ;;
    systemd)
        cat > /etc/systemd/system/etcd-member.service <<UNIT
[Unit]
Description=etcd member (etcd-asg-lifecycle)
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile=$CONFIG_FILE
ExecStart=$ETCD_BIN
Restart=always
RestartSec=5
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
UNIT
        systemctl daemon-reload
        systemctl enable --now etcd-member.service
        ;;
    *)
        log "BOOT_MODE must be exec or systemd, not '$BOOT_MODE'"
        exit 2
        ;;
    esac
}

INSTANCE_ID=${INSTANCE_ID:-$(imds instance-id)}
install_etcd
fetch_config
start_etcd
