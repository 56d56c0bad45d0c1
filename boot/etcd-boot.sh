#!/bin/bash
# Boots one etcd member of an etcd-asg-lifecycle cluster.
#
# The instance decides nothing: it waits until the function has added it to the cluster and
# published its config in SSM Parameter Store (<prefix>/members/<instance id>), then starts etcd
# with exactly that config. The same file runs as EC2 user data (template.yaml embeds it, less its comments) and in
# the local simulation (BOOT_MODE=exec).
#
# Modes (the first argument, else BOOT_MODE):
#   systemd  default, the user data: install etcd, an `etcd` user and the etcd-member service,
#            start it. The service runs `fetch` before every start and `run` as its main process.
#   exec     install etcd, fetch the config, run etcd in the foreground (the simulation).
#   fetch    write CONFIG_FILE from the member's parameter, waiting for it, unless the member
#            already has data (a WAL): a member with data keeps the config it was created with,
#            one without takes the latest (rewritten while the member is unstarted).
#            A config with ETCD_ASG_RESTORE_URL and _SHA256 (a seed after every member was lost)
#            restores that snapshot first, if the member has no WAL; the lines never reach etcd.
#   run      exec etcd with exactly CONFIG_FILE's variables.
#
# Settings (environment; the template sets them in front of this file):
#   PARAMETER_PREFIX   required, e.g. /etcd-asg-lifecycle/prod
#   INSTANCE_ID        default: from the instance metadata service
#   DATA_DIR           default /var/lib/etcd
#   CONFIG_FILE        default /etc/etcd/etcd-asg.env
#   ETCD_BIN           default /usr/local/bin/etcd; fetched from ETCD_DOWNLOAD_URL if missing
#   ETCD_DOWNLOAD_URL  a release tarball (etcd-vX.Y.Z-linux-<arch>.tar.gz) with etcd inside
#   ETCD_SHA256        the tarball's SHA-256: etcd is installed only if the download matches it
#   ETCDUTL_BIN        default: etcdutl beside ETCD_BIN (3.5+), which restores snapshots; without
#   ETCDCTL_BIN        it, ETCDCTL_API=3 etcdctl does (3.4); default: etcdctl beside ETCD_BIN
#   ETCD_USER          default etcd: the service's user (systemd mode)
#   RESTORE_BUMP_REVISION  default 1000000000: how far a restore moves the revision past the
#                      snapshot's (etcdutl 3.5.10+ only; see restore_snapshot)
#   TLS_DIR            default /etc/etcd/pki: a TLS=managed member's certificate, key and CA
#                      certificate (0600, the etcd user's), from <prefix>/tls/<instance id>
#   POLL_SECONDS       default 5: pause between polls for a parameter not there yet; after
#   POLL_MAX_SECONDS   ten times that of waiting, a tenth of the wait, at most this (default 30)
#   DENIED_GRACE_SECONDS  default 900: how long AccessDenied on a parameter is a wait (see
#                      wait_for_parameter); DENIED_LOG_SECONDS default 600: then how often it says so
#   MAX_BACKOFF        default 60: longest pause (seconds) between retries after errors
set -euo pipefail

MODE=${1:-${BOOT_MODE:-systemd}}
PARAMETER_PREFIX=${PARAMETER_PREFIX:?PARAMETER_PREFIX is required}
DATA_DIR=${DATA_DIR:-/var/lib/etcd}
CONFIG_FILE=${CONFIG_FILE:-/etc/etcd/etcd-asg.env}
ETCD_BIN=${ETCD_BIN:-/usr/local/bin/etcd}
ETCD_USER=${ETCD_USER:-etcd}
TLS_DIR=${TLS_DIR:-/etc/etcd/pki}
POLL_SECONDS=${POLL_SECONDS:-5}
POLL_MAX_SECONDS=${POLL_MAX_SECONDS:-30}
DENIED_GRACE_SECONDS=${DENIED_GRACE_SECONDS:-900}
DENIED_LOG_SECONDS=${DENIED_LOG_SECONDS:-600}
MAX_BACKOFF=${MAX_BACKOFF:-60}
RESTORE_BUMP_REVISION=${RESTORE_BUMP_REVISION:-1000000000}
# Where systemd mode installs itself and its settings, and the unit (overridable for tests).
SCRIPT_PATH=${SCRIPT_PATH:-/usr/local/sbin/etcd-boot}
SETTINGS_FILE=${SETTINGS_FILE:-/etc/etcd/etcd-boot.env}
UNIT_FILE=${UNIT_FILE:-/etc/systemd/system/etcd-member.service}
IMDS=http://169.254.169.254/latest

log() { echo "etcd-boot: $*" >&2; }

# The next pause after one of DELAY seconds: doubled, at most MAX_BACKOFF.
backoff() {
    local next=$(($1 * 2))
    if [ "$next" -gt "$MAX_BACKOFF" ]; then next=$MAX_BACKOFF; fi
    echo "$next"
}

# retry WHAT TRIES COMMAND...: runs COMMAND until it succeeds, at most TRIES times, pausing 1, 2,
# 4, ... seconds in between; every failure is logged (COMMAND's own errors go to stderr too).
retry() {
    local what=$1 tries=$2 n=1 delay=1
    shift 2
    until "$@"; do
        if [ "$n" -ge "$tries" ]; then
            log "$what failed $n times; giving up"
            return 1
        fi
        log "$what failed (try $n of $tries); retrying in ${delay}s"
        sleep "$delay"
        delay=$(backoff "$delay")
        n=$((n + 1))
    done
}

# The pause before the next poll for a parameter not there yet, after WAITED seconds of waiting:
# POLL_SECONDS, or a tenth of the wait if longer, at most POLL_MAX_SECONDS (fractions allowed; a
# POLL_MAX_SECONDS below POLL_SECONDS is POLL_SECONDS).
# A config is usually published seconds after launch and is seen within POLL_SECONDS; an instance
# held for long (a restore awaiting an operator, a launch behind a dead member) sees it at most a
# tenth of its wait late, and spends less of the account's Parameter Store throughput (40 TPS by
# default, shared by GetParameter(s) and GetParametersByPath across the account and Region:
# https://docs.aws.amazon.com/general/latest/gr/ssm.html#limits_ssm).
poll_pause() {
    awk -v w="$1" -v p="$POLL_SECONDS" -v m="$POLL_MAX_SECONDS" \
        'BEGIN { if (m < p) m = p; x = w / 10; if (x < p) x = p; if (x > m) x = m; print x }'
}

imds_get() {
    local token
    token=$(curl -sSf --max-time 5 -X PUT "$IMDS/api/token" \
        -H 'X-aws-ec2-metadata-token-ttl-seconds: 300') || return 1
    curl -sSf --max-time 5 -H "X-aws-ec2-metadata-token: $token" "$IMDS/meta-data/$1"
}

imds() { retry "instance metadata $1" 8 imds_get "$1"; }

download() { curl -fsSL --connect-timeout 10 --max-time 600 -o "$2" "$1"; }

install_etcd() {
    [ -x "$ETCD_BIN" ] && return 0
    : "${ETCD_DOWNLOAD_URL:?etcd is not at $ETCD_BIN and ETCD_DOWNLOAD_URL is not set}"
    : "${ETCD_SHA256:?ETCD_SHA256 is required: etcd is installed only from a tarball of known SHA-256}"
    log "installing etcd from $ETCD_DOWNLOAD_URL"
    local tmp actual
    tmp=$(mktemp -d)
    retry "download of $ETCD_DOWNLOAD_URL" 8 download "$ETCD_DOWNLOAD_URL" "$tmp/etcd.tar.gz"
    actual=$(sha256sum "$tmp/etcd.tar.gz" | cut -d' ' -f1)
    if [ "$actual" != "${ETCD_SHA256,,}" ]; then
        log "REFUSING to install etcd: $ETCD_DOWNLOAD_URL has SHA-256 $actual, expected ETCD_SHA256=$ETCD_SHA256"
        rm -rf "$tmp"
        exit 3
    fi
    log "SHA-256 of $ETCD_DOWNLOAD_URL verified: $actual"
    tar xzf "$tmp/etcd.tar.gz" -C "$tmp" --strip-components=1
    install -D -m 0755 "$tmp/etcd" "$ETCD_BIN"
    for t in etcdctl etcdutl; do
        if [ -f "$tmp/$t" ]; then install -m 0755 "$tmp/$t" "$(dirname "$ETCD_BIN")/$t"; fi
    done
    rm -rf "$tmp"
}

# Whether this member has started with its config before: etcd wrote its WAL. (A start that
# failed early leaves member/snap behind but no WAL, and must take the latest config.)
has_data() { compgen -G "$DATA_DIR/member/wal/*.wal" > /dev/null; }

# Prints the parameter's value once it exists. Not found yet is the normal wait. So, for
# DENIED_GRACE_SECONDS, is AccessDenied: the instance may read a parameter only once it carries
# this instance's tag, so one not yet written is denied, not "not found" (aws:ResourceTag, see
# template.yaml). Past the grace, AccessDenied is logged as the likely IAM failure it then is, with
# AWS's message, every DENIED_LOG_SECONDS, and waiting goes on. Any other AWS error (throttling,
# no network) is logged with AWS's message and retried with backoff.
# Further arguments go to get-parameter (--with-decryption for a SecureString).
wait_for_parameter() {
    local name=$1 err value polls=0 delay=1 since=$SECONDS noted=$SECONDS said=$((SECONDS - DENIED_LOG_SECONDS))
    shift
    err=$(mktemp)
    log "waiting for $name"
    while :; do
        if value=$(aws ssm get-parameter --cli-connect-timeout 10 --cli-read-timeout 30 \
            --name "$name" "$@" --query Parameter.Value --output text 2> "$err"); then
            rm -f "$err"
            printf '%s\n' "$value"
            return 0
        fi
        if grep -q -e ParameterNotFound -e AccessDenied "$err"; then
            polls=$((polls + 1))
            if grep -q AccessDenied "$err" && [ $((SECONDS - since)) -ge "$DENIED_GRACE_SECONDS" ] &&
                [ $((SECONDS - said)) -ge "$DENIED_LOG_SECONDS" ]; then
                said=$SECONDS
                log "ERROR: $name still denied after $((SECONDS - since))s: either the function has not published it yet (is it running? etcd-asg status), or this instance may not read it (its etcd-asg-instance-arn tag must be this instance's ARN; the instance role needs ssm:GetParameter and kms:Decrypt): $(tr -s '\n' ' ' < "$err" | cut -c1-600)"
            elif [ $((SECONDS - noted)) -ge 600 ]; then
                noted=$SECONDS
                log "still waiting for $name ($polls polls in $((SECONDS - since))s)"
            fi
            delay=1
            sleep "$(poll_pause $((SECONDS - since)))" || sleep "$POLL_SECONDS"
        else
            log "aws ssm get-parameter $name failed; retrying in ${delay}s: $(tr -s '\n' ' ' < "$err" | cut -c1-600)"
            sleep "$delay"
            delay=$(backoff "$delay")
        fi
    done
}

# Restores snapshot URL (s3://) of SHA-256 SHA into DATA_DIR: downloads and restores it in a
# fresh directory beside DATA_DIR, then moves the member directory in (a rename: no WAL shows
# before all of it). Any failure exits 4 with nothing left, so etcd does not start.
#
# Revisions only move forward: where the restore tool has them (etcdutl 3.5.10+; etcd-io/etcd
# #16029, #16165), the restored revision is the snapshot's plus RESTORE_BUMP_REVISION and marked
# compacted, so a client's watch from a revision before the loss ends with "required revision has
# been compacted" (and re-lists) instead of silently missing the writes the snapshot lacks, and
# no revision a client saw is handed out again. etcd's guidance is a bump larger than the writes
# since the snapshot; its recovery guide uses 1,000,000,000 (at 10,000 writes a second, a day
# and more of writes; an int64 revision takes nine billion such bumps).
# https://etcd.io/docs/v3.5/op-guide/recovery/#restoring-a-cluster
restore_snapshot() {
    local url=$1 sha=${2,,} work="${DATA_DIR%/}.restore" tool actual size rev=unknown bumped help
    local -a args=()
    refuse() { log "$*; etcd not started"; rm -rf "$work" "$CONFIG_FILE.tmp"; exit 4; }
    [[ $url =~ ^s3://[^/]+/. && $sha =~ ^[0-9a-f]{64}$ ]] ||
        refuse "REFUSING to restore: ETCD_ASG_RESTORE_URL='$url' ETCD_ASG_RESTORE_SHA256='$sha' (need an s3:// URL and a SHA-256)"
    if [[ $url =~ -rev([0-9]+)\.db$ ]]; then rev=${BASH_REMATCH[1]}; fi
    for v in NAME INITIAL_CLUSTER INITIAL_CLUSTER_TOKEN INITIAL_ADVERTISE_PEER_URLS; do
        args+=("--$(tr 'A-Z_' 'a-z-' <<< "$v")" "$(sed -n "s/^ETCD_$v=//p" "$CONFIG_FILE.tmp")")
        [ -n "${args[-1]}" ] || refuse "REFUSING to restore $url: the config lacks ETCD_$v"
    done
    rm -rf "$work" "$DATA_DIR/member.restored"
    mkdir -m 0700 "$work"
    log "restoring $url (revision $rev) into $DATA_DIR"
    retry "download of $url" 8 aws s3 cp --only-show-errors --cli-connect-timeout 10 \
        --cli-read-timeout 60 "$url" "$work/snapshot.db" || refuse "could not download $url"
    actual=$(sha256sum "$work/snapshot.db" | cut -d' ' -f1)
    size=$(stat -c %s "$work/snapshot.db")
    [ "$actual" = "$sha" ] ||
        refuse "REFUSING to restore $url: its SHA-256 is $actual ($size bytes), expected ETCD_ASG_RESTORE_SHA256=$sha"
    tool=${ETCDUTL_BIN:-$(dirname "$ETCD_BIN")/etcdutl}
    if [ ! -x "$tool" ]; then tool=${ETCDCTL_BIN:-$(dirname "$ETCD_BIN")/etcdctl}; fi
    # The help whole, then searched: `grep -q` in a pipe would end it early, and with pipefail
    # the tool's SIGPIPE would read as "no such flag".
    help=$(ETCDCTL_API=3 "$tool" snapshot restore --help 2>&1 || true)
    if grep -q -- '--bump-revision' <<< "$help"; then
        args+=(--bump-revision "$RESTORE_BUMP_REVISION" --mark-compacted)
        bumped="revision moved $RESTORE_BUMP_REVISION forward, marked compacted"
    else
        bumped="revision NOT moved forward: $tool has no --bump-revision (etcd 3.5.10+ has); watchers resuming from a later revision miss writes"
        log "$bumped"
    fi
    ETCDCTL_API=3 "$tool" snapshot restore "$work/snapshot.db" "${args[@]}" --data-dir "$work/data" ||
        refuse "$tool snapshot restore of $url failed"
    if [ "$MODE" != exec ]; then chown -R "$ETCD_USER:$ETCD_USER" "$work/data"; fi
    rm -rf "$DATA_DIR/member"
    mv "$work/data/member" "$DATA_DIR/member.restored"
    mv "$DATA_DIR/member.restored" "$DATA_DIR/member"
    rm -rf "$work"
    log "restored $url (revision $rev, SHA-256 $actual, $size bytes) into $DATA_DIR with $tool; $bumped"
}

# TLS=managed: this instance's bundle (CA certificate, its certificate and key, and the cluster's
# token key; a SecureString only it may read) split into TLS_DIR, 0600 for the etcd user. Prints
# the lines that point etcd at them. Keys are never logged.
#
# Tokens: with the token key, etcd signs and verifies JWTs with it (the function's root tokens,
# password users' logins, and the leader's own root token when it revokes an expired lease,
# which a verify-only key cannot sign: etcd-io/etcd#14616). A bundle from before the token key
# (three parts) verifies the function's tokens with the CA's certificate, as it always did.
# https://etcd.io/docs/v3.5/op-guide/authentication/jwt/
fetch_tls() {
    local name="$PARAMETER_PREFIX/tls/$INSTANCE_ID" bundle f
    bundle=$(wait_for_parameter "$name" --with-decryption)
    (
        umask 077
        mkdir -p "$TLS_DIR"
        rm -f "$TLS_DIR/ca.crt" "$TLS_DIR/member.crt" "$TLS_DIR/member.key" "$TLS_DIR/token.key"
        awk -v dir="$TLS_DIR" '/^-----BEGIN /{ n++ }
            n == 1 { print > (dir "/ca.crt") }
            n == 2 { print > (dir "/member.crt") }
            n == 3 { print > (dir "/member.key") }
            n >= 4 { print > (dir "/token.key") }' <<< "$bundle"
    )
    for f in ca.crt member.crt member.key; do
        [ -s "$TLS_DIR/$f" ] || { log "the bundle at $name lacks its ${f%.*} part: etcd not started"; exit 1; }
    done
    for f in member.key token.key; do
        [ -e "$TLS_DIR/$f" ] || continue
        grep -q -- '-----BEGIN [A-Z ]*PRIVATE KEY-----' "$TLS_DIR/$f" ||
            { log "the bundle at $name holds no private key as its ${f%.*} part: etcd not started"; exit 1; }
    done
    if [ "$MODE" != exec ]; then chown -R "$ETCD_USER:$ETCD_USER" "$TLS_DIR"; fi
    log "certificate and keys for $INSTANCE_ID written to $TLS_DIR"
    echo "ETCD_CERT_FILE=$TLS_DIR/member.crt"
    echo "ETCD_KEY_FILE=$TLS_DIR/member.key"
    echo "ETCD_TRUSTED_CA_FILE=$TLS_DIR/ca.crt"
    echo "ETCD_PEER_CERT_FILE=$TLS_DIR/member.crt"
    echo "ETCD_PEER_KEY_FILE=$TLS_DIR/member.key"
    echo "ETCD_PEER_TRUSTED_CA_FILE=$TLS_DIR/ca.crt"
    if [ -e "$TLS_DIR/token.key" ]; then
        echo "ETCD_AUTH_TOKEN=jwt,priv-key=$TLS_DIR/token.key,sign-method=ES256"
    else
        echo "ETCD_AUTH_TOKEN=jwt,pub-key=$TLS_DIR/ca.crt,sign-method=ES256"
    fi
}

# Writes this member's published config, plus where to listen and store, to CONFIG_FILE. Only
# ETCD_* lines are kept, the restore lines (ETCD_ASG_*) taken out: the file must not be able to
# set anything else.
fetch_config() {
    if has_data; then
        if [ -s "$CONFIG_FILE" ]; then
            log "member data in $DATA_DIR: keeping the config it started with ($CONFIG_FILE)"
            return 0
        fi
        log "member data in $DATA_DIR but no $CONFIG_FILE: fetching it again"
    fi
    local name="$PARAMETER_PREFIX/members/$INSTANCE_ID" value peer client url sha want have
    value=$(wait_for_parameter "$name")
    # The config names the etcd release the function planned for (this instance's
    # etcd-asg-etcd-version tag): never start another one with it.
    want=$(sed -n 's/^ETCD_ASG_ETCD_VERSION=//p' <<< "$value")
    if [ -n "$want" ]; then
        # A pre-release (3.7.0-rc.0) counts as its release, as the function reads versions.
        have=$("$ETCD_BIN" --version 2>/dev/null | sed -n 's/^etcd Version: //p')
        have=${have%%-*}
        if [ "$have" != "$want" ]; then
            log "REFUSING to start: the config is for etcd $want (this instance's etcd-asg-etcd-version tag), but $ETCD_BIN is etcd ${have:-unknown}: the stack's EtcdVersion and EtcdDownloadUrl disagree"
            exit 5
        fi
    fi
    url=$(sed -n 's/^ETCD_ASG_RESTORE_URL=//p' <<< "$value")
    sha=$(sed -n 's/^ETCD_ASG_RESTORE_SHA256=//p' <<< "$value")
    mkdir -p "$(dirname "$CONFIG_FILE")"
    grep -E '^ETCD_[A-Z_]+=[^[:space:]]*$' <<< "$value" | grep -v '^ETCD_ASG_' > "$CONFIG_FILE.tmp" || true
    peer=$(sed -n 's/^ETCD_INITIAL_ADVERTISE_PEER_URLS=//p' "$CONFIG_FILE.tmp")
    client=$(sed -n 's/^ETCD_ADVERTISE_CLIENT_URLS=//p' "$CONFIG_FILE.tmp")
    if [ -z "$peer" ] || [ -z "$client" ]; then
        log "config at $name lacks advertise URLs"
        exit 1
    fi
    {
        echo "ETCD_LISTEN_PEER_URLS=$peer"
        echo "ETCD_LISTEN_CLIENT_URLS=$client"
        echo "ETCD_DATA_DIR=$DATA_DIR"
    } >> "$CONFIG_FILE.tmp"
    if grep -q '^ETCD_CLIENT_CERT_AUTH=true$' "$CONFIG_FILE.tmp"; then
        fetch_tls >> "$CONFIG_FILE.tmp"
    fi
    if [ "$MODE" != exec ]; then
        chown "root:$ETCD_USER" "$CONFIG_FILE.tmp"
        chmod 0640 "$CONFIG_FILE.tmp"
        install -d -o "$ETCD_USER" -g "$ETCD_USER" -m 0700 "$DATA_DIR"
    else
        mkdir -p "$DATA_DIR"
    fi
    if [ -n "$url$sha" ]; then
        if has_data; then log "member data in $DATA_DIR: not restoring $url again"; else restore_snapshot "$url" "$sha"; fi
    fi
    mv "$CONFIG_FILE.tmp" "$CONFIG_FILE"
    log "config written to $CONFIG_FILE"
}

# Replaces this process with etcd, its environment exactly CONFIG_FILE's variables (and PATH).
run_etcd() {
    [ -s "$CONFIG_FILE" ] || { log "no config at $CONFIG_FILE: not starting etcd"; exit 1; }
    local -a vars=()
    local line
    while IFS= read -r line; do vars+=("$line"); done < "$CONFIG_FILE"
    log "starting $ETCD_BIN as $(id -un) with $CONFIG_FILE"
    exec env -i PATH="$PATH" "${vars[@]}" "$ETCD_BIN"
}

# Installs this script, its settings and the etcd-member service, and starts the service (which
# waits for the config in its ExecStartPre: user data does not block on it).
install_service() {
    if ! getent passwd "$ETCD_USER" > /dev/null; then
        useradd --system --home-dir "$DATA_DIR" --no-create-home --shell /sbin/nologin "$ETCD_USER"
    fi
    install -d -o "$ETCD_USER" -g "$ETCD_USER" -m 0700 "$DATA_DIR"
    install -D -m 0755 "${BASH_SOURCE[0]}" "$SCRIPT_PATH"
    mkdir -p "$(dirname "$SETTINGS_FILE")"
    {
        printf 'PARAMETER_PREFIX=%s\n' "$PARAMETER_PREFIX"
        printf 'INSTANCE_ID=%s\n' "$INSTANCE_ID"
        printf 'DATA_DIR=%s\n' "$DATA_DIR"
        printf 'CONFIG_FILE=%s\n' "$CONFIG_FILE"
        printf 'ETCD_BIN=%s\n' "$ETCD_BIN"
        for v in ETCDUTL_BIN ETCDCTL_BIN AWS_DEFAULT_REGION RESTORE_BUMP_REVISION; do
            if [ -n "${!v:-}" ]; then printf '%s=%s\n' "$v" "${!v}"; fi
        done
        printf 'ETCD_USER=%s\n' "$ETCD_USER"
        printf 'POLL_SECONDS=%s\n' "$POLL_SECONDS"
        printf 'POLL_MAX_SECONDS=%s\n' "$POLL_MAX_SECONDS"
        printf 'DENIED_GRACE_SECONDS=%s\n' "$DENIED_GRACE_SECONDS"
        printf 'DENIED_LOG_SECONDS=%s\n' "$DENIED_LOG_SECONDS"
        printf 'MAX_BACKOFF=%s\n' "$MAX_BACKOFF"
    } > "$SETTINGS_FILE"
    cat > "$UNIT_FILE" <<UNIT
[Unit]
Description=etcd member (etcd-asg-lifecycle)
After=network-online.target
Wants=network-online.target
StartLimitIntervalSec=0

[Service]
Type=simple
User=$ETCD_USER
Group=$ETCD_USER
EnvironmentFile=$SETTINGS_FILE
# Before every start, as root ('+'): while the member has no data, fetch its latest config.
ExecStartPre=+$SCRIPT_PATH fetch
ExecStart=$SCRIPT_PATH run
# The wait for the config is part of the start.
TimeoutStartSec=infinity
Restart=always
RestartSec=5
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
UNIT
    systemctl daemon-reload
    systemctl enable --now --no-block etcd-member.service
    log "etcd-member.service installed and starting (journalctl -u etcd-member)"
}

instance_id() {
    if [ -z "${INSTANCE_ID:-}" ]; then INSTANCE_ID=$(imds instance-id); fi
}

case "$MODE" in
exec)
    instance_id
    install_etcd
    fetch_config
    run_etcd
    ;;
systemd)
    instance_id
    install_etcd
    install_service
    ;;
fetch)
    instance_id
    fetch_config
    ;;
run)
    run_etcd
    ;;
*)
    log "the mode must be systemd, exec, fetch or run, not '$MODE'"
    exit 2
    ;;
esac
