#!/usr/bin/env bash
# repronet's one install path: Debian 12 (bookworm) or Ubuntu 22.04+ (universe enabled).
#
#   bash vagrant/provision.sh            set up: packages, Open vSwitch, link-delay daemon,
#                                        project importable by /usr/bin/python3, the command
#                                        /usr/local/bin/repronet, capability report
#   bash vagrant/provision.sh --test     set up, then run the test suite
#   bash vagrant/provision.sh --run      set up, then run the main experiment at default size
#   bash vagrant/provision.sh --run -- --scale smoke    (arguments after -- go to the experiment)
#
# Idempotent: apt runs only when a package is missing, OVS is started only when it is not
# running, the .pth file is rewritten only when it points elsewhere, make rebuilds only what
# changed. Runs as root, or re-executes itself with sudo. Never interactive.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3
OVS_CTL=/usr/share/openvswitch/scripts/ovs-ctl
BIN=/usr/local/bin/repronet
PACKAGES=(
    mininet openvswitch-switch openssh-server openssh-client
    python3-os-ken python3-scapy python3-numpy python3-pandas python3-matplotlib
    python3-seaborn python3-pytest python3-pytest-timeout python3-pytest-xdist
    python3-hypothesis
    python3-setuptools python3-pip
    redis-server redis-tools python3-redis python3-hiredis python3-uvloop
    python-is-python3 pypy3
    iperf3 uftp iptables ethtool bridge-utils cgroup-tools iproute2 iputils-ping procps psmisc
    kmod util-linux tcpdump git
    gcc make libc6-dev pkg-config libnetfilter-queue-dev
    qemu-system-x86 qemu-utils mmdebstrap
)
# vagrant/vm.py (a VM with a netem kernel) needs these on the machine that runs the VM, not
# inside the VM: its image leaves them out, and inside it (REPRONET_VM set by vm.py and the
# Vagrantfile, or /run/repronet-vm) they are skipped. pytest-xdist too: only --test's first
# phase uses it (below), and without it --test runs the suite in one session.
VM_HOST_ONLY=" qemu-system-x86 qemu-utils mmdebstrap python3-pytest-xdist "
IN_VM=0
{ [ -n "${REPRONET_VM:-}" ] || [ -e /run/repronet-vm ]; } && IN_VM=1

usage() {
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

ARGS=("$@")
DO_TEST=0
DO_RUN=0
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --test) DO_TEST=1 ;;
        --run) DO_RUN=1 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "provision.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
    esac
    shift
done

if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        exec sudo --preserve-env=CI,DEBIAN_FRONTEND bash "${BASH_SOURCE[0]}" \
            ${ARGS[@]+"${ARGS[@]}"}
    fi
    echo "provision.sh: needs root (run it as root, or install sudo)" >&2
    exit 1
fi

START=$SECONDS
step() { printf '\n== [%3ds] %s\n' "$((SECONDS - START))" "$*"; }

# ---- packages ---------------------------------------------------------------------------
step "packages"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "provision.sh: needs apt-get (Debian 12 or Ubuntu 22.04+)" >&2
    exit 1
fi
# One dpkg-query for the whole list: one per package took 11 s in the VM's emulated CPU.
installed=" $(dpkg-query -W -f '${Package} ${Status}\n' "${PACKAGES[@]}" 2>/dev/null |
              awk '$2 == "install" && $4 == "installed" { printf "%s ", $1 }' || true) "
missing=()
for pkg in "${PACKAGES[@]}"; do
    [ $IN_VM = 1 ] && [[ "$VM_HOST_ONLY" == *" $pkg "* ]] && continue
    [[ "$installed" == *" $pkg "* ]] || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "all ${#PACKAGES[@]} packages already installed"
else
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}"
fi

# ---- Open vSwitch -----------------------------------------------------------------------
step "Open vSwitch"
ovs_running() {
    ovs-vsctl --timeout=5 show >/dev/null 2>&1 &&
        ovs-appctl -T 5 -t ovs-vswitchd version >/dev/null 2>&1
}
if ovs_running; then
    echo "already running"
elif [ -d /run/systemd/system ]; then
    systemctl enable --now openvswitch-switch
else
    # No systemd (containers, CI machines): start the daemons with OVS's own script. On a
    # kernel without the openvswitch module it says so; the userspace datapath still works.
    "$OVS_CTL" start --system-id=random || true
fi
if ! ovs_running; then
    echo "provision.sh: Open vSwitch did not start (see above); --switch lxbr still works" >&2
fi

# ---- link-delay daemon --------------------------------------------------------------------
step "link-delay daemon"
if [ -f "$REPO/repronet/emu/linkdelay/Makefile" ]; then
    make -C "$REPO/repronet/emu/linkdelay"
else
    echo "repronet/emu/linkdelay/Makefile not present; nothing to build"
fi

# ---- make the checkout importable by the system interpreter ---------------------------------
step "project importable by $PY"
SITE="$("$PY" -c 'import site; print(site.getsitepackages()[0])')"
PTH="$SITE/repronet.pth"
mkdir -p "$SITE"
OLD_REPO="$(cat "$PTH" 2>/dev/null || true)"
if [ "$OLD_REPO" = "$REPO" ]; then
    echo "$PTH already points to $REPO"
else
    # Written in place (not renamed) so the file keeps its inode.
    printf '%s\n' "$REPO" > "$PTH"
    echo "wrote $PTH -> $REPO"
    if [ -n "$OLD_REPO" ]; then
        echo "note: it pointed to $OLD_REPO; /usr/bin/python3 now imports repronet from" \
             "this checkout (run provision.sh from the other one to switch back)"
    fi
fi
# A script run as `python topologies/NAME.py` has topologies/ (not the repo) as sys.path[0];
# check the import from elsewhere finds THIS checkout.
(cd / && "$PY" - "$REPO" <<'EOF'
import os, sys
repo = sys.argv[1]
sys.path = [p for p in sys.path if p not in ('', os.getcwd())]
import repronet
found = os.path.dirname(os.path.dirname(os.path.abspath(repronet.__file__)))
if os.path.realpath(found) != os.path.realpath(repo):
    sys.exit('provision.sh: import repronet finds %s, not %s' % (found, repo))
print('import repronet -> %s' % found)
EOF
)

# ---- the repronet command ------------------------------------------------------------------
step "command $BIN"
# A wrapper, not a copy: it runs this checkout's code with the system interpreter, from any
# directory (relative RUN_DIRs keep working), also under sudo (whose PATH has /usr/local/bin).
# -P: the current directory is not put on sys.path, so another checkout's repronet/ in it is
# never the one that runs.
WRAPPER="#!/bin/sh
# Written by vagrant/provision.sh: the repronet command line of the checkout $REPO.
PYTHONPATH=\"$REPO\${PYTHONPATH:+:\$PYTHONPATH}\" exec $PY -P -m repronet \"\$@\"
"
if [ "$(cat "$BIN" 2>/dev/null || true)" = "${WRAPPER%$'\n'}" ]; then
    echo "$BIN already runs $REPO"
else
    mkdir -p "$(dirname "$BIN")"
    printf '%s' "$WRAPPER" > "$BIN.tmp"
    chmod 755 "$BIN.tmp"
    mv -f "$BIN.tmp" "$BIN"
    echo "wrote $BIN -> $REPO"
fi
"$BIN" --help | sed -n 1p   # reads all: no broken pipe under pipefail

# ---- what this host can do -----------------------------------------------------------------
step "capabilities"
(cd "$REPO" && "$BIN" caps)
step "setup done"

# ---- optional: tests / main experiment -------------------------------------------------------
status=0
if [ $DO_TEST = 1 ]; then
    # pytest exits 5 when it collected no tests: that is a failure here too.
    if "$PY" -c 'import xdist' 2>/dev/null; then
        # Three sessions that together are `pytest tests` (README, Tests). First, side by
        # side: the VM test (QEMU, mostly CPU; it holds /run/repronet.lock) and, niced below
        # it so the emulated CPU keeps its pace, the tests that need no root on every core
        # (pytest-xdist; --dist loadfile keeps each file's tests and module fixtures on one
        # worker). Then the other root tests one at a time, on a machine left quiet for
        # their timing (link delay, fidelity, CPU limits).
        vm_test=tests/test_vm_root.py::test_netem_path_tests_pass_inside_the_vm
        vm_log=$(mktemp /tmp/repronet-vm-test.XXXXXX)
        step "in the background: $PY -m pytest $vm_test"
        # its own process group, so that leaving early stops it and vm.py (which then
        # removes the VM) and nothing else
        (cd "$REPO" && exec setsid "$PY" -m pytest "$vm_test" -p no:cacheprovider) \
            >"$vm_log" 2>&1 &
        vm_pid=$!
        trap 'kill -TERM -- "-$vm_pid" 2>/dev/null || true' EXIT
        workers=$(nproc)
        step "tests without root, on $workers workers: $PY -m pytest tests -m 'not root'"
        (cd "$REPO" && nice -n 10 "$PY" -m pytest tests -m 'not root' -n "$workers" \
            --dist loadfile -p no:cacheprovider --durations=15) || status=$?
        step "the VM test"
        wait "$vm_pid" || status=$?
        trap - EXIT
        cat "$vm_log"
        rm -f "$vm_log"
        step "the other root tests, one at a time: $PY -m pytest tests -m root"
        (cd "$REPO" && "$PY" -m pytest tests -m root --deselect "$vm_test" \
            -p no:cacheprovider --durations=15) || status=$?
    else
        step "tests: $PY -m pytest tests"
        (cd "$REPO" && "$PY" -m pytest tests -p no:cacheprovider --durations=15) || status=$?
    fi
fi
if [ $DO_RUN = 1 ]; then
    main=topologies/dht8.py
    [ -f "$REPO/$main" ] || main=topologies/smoke.py
    if [ ! -f "$REPO/$main" ]; then
        echo "provision.sh: neither topologies/dht8.py nor topologies/smoke.py exists" >&2
        exit 1
    fi
    step "experiment: $PY $main ${EXTRA[*]:-}"
    (cd "$REPO" && "$PY" "$main" ${EXTRA[@]+"${EXTRA[@]}"}) || status=$?
fi
step "finished (exit $status)"
exit $status
