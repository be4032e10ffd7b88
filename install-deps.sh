#!/bin/sh
# install-deps.sh: installs what the build and tests need on a Debian machine, if missing.
# Called by `make test`, `make fuzz` and CI; a no-op when everything is there.
#   Debian: build-essential pkg-config libopenblas-dev libcmocka-dev libcjson-dev clang
#           libclang-rt-dev (libFuzzer and sanitizer runtimes)
#   PyPI (golden generation only): the versions pinned in golden/requirements.txt
#   --plot: gnuplot-nox as well (make bench-plot and make bench-cuda only: the PNG of a
#           kernel-lab CSV); nothing else needs it
set -eu
want=""
have_pc() { pkg-config --exists "$1" 2>/dev/null; }
command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || want="$want build-essential"
command -v pkg-config >/dev/null 2>&1 || want="$want pkg-config"
if command -v pkg-config >/dev/null 2>&1; then
    have_pc openblas || want="$want libopenblas-dev"
    have_pc cmocka || want="$want libcmocka-dev"
    have_pc libcjson || want="$want libcjson-dev"
else
    want="$want libopenblas-dev libcmocka-dev libcjson-dev"
fi
command -v clang >/dev/null 2>&1 || want="$want clang"
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || want="$want libclang-rt-dev"
[ "${1:-}" = "--plot" ] && ! command -v gnuplot >/dev/null 2>&1 && want="$want gnuplot-nox"
if [ -n "$want" ]; then
    echo "install-deps: installing:$want"
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: not root; run: sudo apt-get install -y$want" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $want >/dev/null
fi
if [ "${1:-}" = "--python" ]; then
    req="$(dirname "$0")/golden/requirements.txt"
    if ! python3 -c 'import numpy, ml_dtypes' 2>/dev/null || \
       ! python3 - "$req" <<'PY' 2>/dev/null
import sys, numpy, ml_dtypes
pins = dict(l.strip().split("==") for l in open(sys.argv[1]) if "==" in l)
sys.exit(0 if pins.get("numpy") == numpy.__version__ and pins.get("ml_dtypes") == ml_dtypes.__version__ else 1)
PY
    then
        echo "install-deps: installing the pinned Python packages of golden/requirements.txt"
        command -v pip3 >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1 || apt-get install -y -qq python3-pip >/dev/null
        python3 -m pip install -q -r "$req" 2>/dev/null || python3 -m pip install -q --break-system-packages -r "$req"
    fi
fi
exit 0
