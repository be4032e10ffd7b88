#!/bin/sh
# gpu-deps.sh DIR: for a GPU host that has the CUDA toolkit but cannot install packages.
# On a Debian machine with network access, fetches cJSON and cmocka as Debian packages,
# unpacks them into DIR (default .gpu-deps, which git ignores) and adds a minimal pkg-config
# that answers for them, so that `PATH=DIR/bin:$PATH make` finds them on the GPU host.
# OpenBLAS is not carried: the GPU host builds the blas path as its stub.
set -eu
dir=${1:-.gpu-deps}
mkdir -p "$dir/debs" "$dir/root" "$dir/bin"
(cd "$dir/debs" && apt-get download libcjson1 libcjson-dev libcmocka0 libcmocka-dev >/dev/null)
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
cat > "$dir/bin/pkg-config" <<'PC'
#!/bin/sh
# pkg-config for the carried cJSON and cmocka only; everything else is reported missing.
root=$(cd "$(dirname "$0")/../root" && pwd)
mode=""; name=""
for a in "$@"; do case "$a" in --exists|--cflags|--libs) mode=$a ;; -*) ;; *) name=$a ;; esac; done
case "$name" in cmocka) lib=-lcmocka; inc=$root/usr/include ;; libcjson) lib=-lcjson; inc=$root/usr/include/cjson ;; *) exit 1 ;; esac
case "$mode" in
  --exists) exit 0 ;;
  --cflags) echo "-I$inc" ;;
  --libs) echo "-L$root/usr/lib/x86_64-linux-gnu -Wl,-rpath,$root/usr/lib/x86_64-linux-gnu $lib" ;;
esac
PC
chmod +x "$dir/bin/pkg-config"
grep -qx "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >> .git/info/exclude
echo "gpu-deps: cJSON and cmocka unpacked under $dir"
