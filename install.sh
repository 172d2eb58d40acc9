#!/usr/bin/env bash
# Installs bertlib and everything the course needs into the current Python; --dev adds the test tools.
# torch is installed only where it is missing, as the 2.13.0 build, so an existing (GPU) torch is kept.
set -euo pipefail
cd "$(dirname "$0")"
python=${PYTHON:-python3}
if ! "$python" -c "import torch" 2>/dev/null; then
    "$python" -m pip install --quiet "torch==2.13.0"
fi
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"
"$python" -m pip install --quiet -e ".${extras}"
# d2l (cross-checks in notebooks 04-05) pins numpy==1.23.5 and friends: install it without its pins.
"$python" -m pip install --quiet --no-deps "d2l==1.0.3"
