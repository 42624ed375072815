#!/bin/bash
# Installs the carried wheels and this checkout into SITE (emptied first), with no network: what a bare device
# machine needs before PYTHONPATH=SITE. Wheels: the arguments, else every .whl/*.whl (nvidia-cutlass; torchao
# optional). Usage, from the repo root: bash scripts/install_site.sh SITE [WHEEL ...]
set -uo pipefail
site=${1:?usage: install_site.sh SITE [WHEEL ...]}
shift
wheels=("$@")
[ ${#wheels[@]} -gt 0 ] || wheels=(.whl/*.whl)
rm -rf "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${wheels[@]}" || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --target "$site" . || exit 1
