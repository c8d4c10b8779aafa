#!/usr/bin/env bash
# Sets up a fresh machine: Debian toolchain (only what is missing) and .venv with tinytrain[dev,cluster].
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf \
           qemu-system-misc dataset-fashion-mnist espeak-ng; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.tinytrain-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing tinytrain[dev,cluster] into .venv"
  .venv/bin/python -m pip install -q -e ".[dev,cluster]"
  touch "$stamp"
fi
