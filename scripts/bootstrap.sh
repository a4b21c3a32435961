#!/bin/sh
# quicbed node bootstrap. profile.py's Execute service runs it at every boot:
#
#   sudo sh /local/repository/scripts/bootstrap.sh ROLE QUIC_VERSION [GIT_REF]
#
#   ROLE          server | client | bridge: the play of playbooks/site.yml to apply
#                 (the inventory is the single host ROLE, connection local)
#   QUIC_VERSION  RFCv1 | Q037, given to Ansible as -e quicbed_quic_version=...
#   GIT_REF       optional branch, tag or commit of quicbed to check out first
#
# It logs everything to /local/logs/quicbed-bootstrap.log, installs a pinned Ansible
# into the venv /local/quicbed-ansible, and leaves /local/quicbed-bootstrap.done on
# success or /local/quicbed-bootstrap.failed (exit code, then the failed step) on
# failure. Safe to re-run: the venv is rebuilt only when the pins change.
#
# Pins: the newest ansible-core that runs as a *controller* on the node's own Python
# (2.19 needs >= 3.11, 2.17 >= 3.10, 2.11 >= 2.7/3.5); the roles use ansible.builtin
# only, so no collection (and not the full `ansible` package) is installed:
#
#   node OS        controller Python            ansible-core  bootstrap pins
#   Ubuntu 22.04   /usr/bin/python3 (3.10)      2.17.14       -
#   Ubuntu 18.04   /usr/bin/python3 (3.6)       2.11.12       pip 21.3.1, setuptools
#                                                             59.6.0, wheel 0.37.1
#                                                             (last for 3.6)
#   FreeBSD 13     /usr/local/bin/python3       2.19.14       cryptography, PyYAML,
#                  (pkg's default, >= 3.11)                   Jinja2 from pkg (no
#                                                             FreeBSD wheels on PyPI)

# QUICBED_LOCAL only exists so that tests can run the argument checks elsewhere.
LOCAL=${QUICBED_LOCAL:-/local}
REPO=$LOCAL/repository
VENV=$LOCAL/quicbed-ansible
LOG=$LOCAL/logs/quicbed-bootstrap.log
DONE=$LOCAL/quicbed-bootstrap.done
FAILED=$LOCAL/quicbed-bootstrap.failed

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
HOME=${HOME:-/root}
DEBIAN_FRONTEND=noninteractive
ASSUME_ALWAYS_YES=yes
export PATH HOME DEBIAN_FRONTEND ASSUME_ALWAYS_YES

fail() {
    # fail CODE STEP...: leave the failure marker and stop.
    code=$1
    shift
    echo "bootstrap: FAILED (exit $code): $*"
    printf '%s\n%s\n' "$code" "$*" >"$FAILED"
    rm -f "$DONE"
    exit "$code"
}

apt_install() {
    apt-get -o DPkg::Lock::Timeout=600 update -q &&
        apt-get -o DPkg::Lock::Timeout=600 install -y -q "$@"
}

detect_os() {
    # Sets PY (venv and controller Python), TARGET_PY (module interpreter), PINS,
    # BOOT_PINS, VENV_OPTS, PKG (apt | pkg).
    VENV_OPTS=
    BOOT_PINS=
    if [ "$(uname -s)" = FreeBSD ]; then
        case "$(freebsd-version -u)" in
        13.*) ;;
        *) fail 69 "unsupported FreeBSD $(freebsd-version -u) (the pins table knows 13)" ;;
        esac
        PKG=pkg
        PY=/usr/local/bin/python3
        TARGET_PY=$PY
        PINS="ansible-core==2.19.14"
        VENV_OPTS=--system-site-packages
        # pkg builds py-* packages only for the ports' default Python: follow it.
        [ -x "$PY" ] || pkg install -y python3 || fail 71 "pkg install python3"
        "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
            fail 69 "pkg's default $("$PY" -V 2>&1) is older than ansible-core 2.19's 3.11"
        flavor=$("$PY" -c 'import sys; print("py%d%d" % sys.version_info[:2])')
        if ! "$PY" -c 'import cryptography, yaml, jinja2' 2>/dev/null; then
            pkg install -y "$flavor-cryptography" "$flavor-pyyaml" "$flavor-Jinja2" ||
                fail 71 "pkg install $flavor-cryptography $flavor-pyyaml $flavor-Jinja2"
        fi
        return
    fi
    [ -r /etc/os-release ] || fail 69 "unsupported OS $(uname -s): no /etc/os-release"
    # shellcheck disable=SC1091
    . /etc/os-release
    PKG=apt
    PY=/usr/bin/python3
    TARGET_PY=$PY
    case "$ID $VERSION_ID" in
    "ubuntu 22.04") PINS="ansible-core==2.17.14" ;;
    "ubuntu 18.04")
        PINS="ansible-core==2.11.12"
        BOOT_PINS="pip==21.3.1 setuptools==59.6.0 wheel==0.37.1"
        ;;
    *) fail 69 "unsupported OS $ID $VERSION_ID (the pins table knows Ubuntu 22.04, 18.04)" ;;
    esac
}

install_ansible() {
    stamp="$PY $("$PY" -V 2>&1) $VENV_OPTS | $BOOT_PINS | $PINS"
    if [ "$(cat "$VENV/.quicbed-pins" 2>/dev/null)" = "$stamp" ] &&
        "$VENV/bin/ansible-playbook" --version >/dev/null 2>&1; then
        echo "bootstrap: Ansible venv up to date ($PINS)"
        return
    fi
    rm -rf "$VENV"
    # shellcheck disable=SC2086
    if ! "$PY" -m venv $VENV_OPTS "$VENV"; then
        # Ubuntu ships venv's ensurepip in a package of its own.
        rm -rf "$VENV"
        [ "$PKG" = apt ] || fail 72 "$PY -m venv $VENV"
        apt_install python3-venv || fail 71 "apt-get install python3-venv"
        # shellcheck disable=SC2086
        "$PY" -m venv $VENV_OPTS "$VENV" || fail 72 "$PY -m venv $VENV"
    fi
    if [ -n "$BOOT_PINS" ]; then
        # shellcheck disable=SC2086
        "$VENV/bin/python" -m pip install -q $BOOT_PINS || fail 72 "pip install $BOOT_PINS"
    fi
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install -q $PINS || fail 72 "pip install $PINS"
    echo "$stamp" >"$VENV/.quicbed-pins"
}

checkout() {
    # checkout REF: the requested quicbed version (fetched first, else a local name).
    command -v git >/dev/null 2>&1 || {
        if [ "$PKG" = apt ]; then apt_install git; else pkg install -y git; fi
    } || fail 71 "install git"
    if git -c safe.directory="$REPO" -C "$REPO" fetch --quiet origin "$1"; then
        target=FETCH_HEAD
    elif git -c safe.directory="$REPO" -C "$REPO" rev-parse --quiet --verify "$1^{commit}" >/dev/null; then
        target=$1
    else
        fail 73 "git ref $1 is neither on origin nor in $REPO"
    fi
    git -c safe.directory="$REPO" -C "$REPO" checkout --quiet --detach "$target" ||
        fail 73 "git checkout $1 in $REPO (local changes?)"
    echo "bootstrap: $REPO at $1 = $(git -c safe.directory="$REPO" -C "$REPO" rev-parse HEAD)"
}

main() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: must run as root: sudo sh $0 $*" >&2
        return 77
    fi
    mkdir -p "$(dirname "$LOG")" || return 1
    exec >>"$LOG" 2>&1
    echo "=== $(date -u '+%Y-%m-%dT%H:%M:%SZ') bootstrap $*"
    rm -f "$DONE" "$FAILED"
    case $# in 2 | 3) ;; *) fail 64 "usage: bootstrap.sh ROLE QUIC_VERSION [GIT_REF]" ;; esac
    role=$1
    quic_version=$2
    ref=${3:-}
    case "$quic_version" in RFCv1 | Q037) ;; *) fail 64 "unknown QUIC version '$quic_version'" ;; esac
    case "$role" in server | client | bridge) ;; *) fail 64 "unknown role '$role'" ;; esac
    case "$ref" in
    -* | *..* | *[!A-Za-z0-9._/-]*) fail 64 "git ref '$ref' is not a branch, tag or commit name" ;;
    esac

    detect_os
    install_ansible
    [ -z "$ref" ] || checkout "$ref"

    cd "$REPO" || fail 66 "no repository at $REPO"
    ANSIBLE_CONFIG="$REPO/ansible.cfg" "$VENV/bin/ansible-playbook" \
        -i "$role," -c local \
        -e "quicbed_quic_version=$quic_version" \
        -e "ansible_python_interpreter=$TARGET_PY" \
        playbooks/site.yml
    rc=$?
    [ "$rc" -eq 0 ] || fail "$rc" "ansible-playbook playbooks/site.yml (role $role)"
    date -u '+%Y-%m-%dT%H:%M:%SZ' >"$DONE"
    echo "bootstrap: done ($role, $quic_version${ref:+, $ref})"
}

# One line, parsed whole before it runs: a checkout that rewrites this file cannot
# change what the shell reads next.
main "$@"; exit $?
