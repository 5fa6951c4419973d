#!/usr/bin/env bash
# Packs this machine's iproute2 (ip, tc), every library they load and the dynamic loader into one
# folder that runs on another x86-64 Linux without iproute2 (a GPU image, say):
#   bash scripts/pack_iproute2.sh [dir]     (default: .carry/iproute2, ignored by git)
# then put <dir>/bin first on PATH there. Each wrapper starts the packed binary through the packed
# loader, so it never mixes its libraries with the machine's; a command that `ip netns exec` starts
# runs with the machine's own libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.carry/iproute2}
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/libexec" "$DIR/lib"
loader=
for tool in ip tc; do
  path=$(command -v "$tool" || true)
  [ -n "$path" ] || { echo "pack_iproute2: no $tool on this machine" >&2; exit 1; }
  cp -L "$path" "$DIR/libexec/$tool"
  # ldd lines: "libx.so.1 => /path/libx.so.1 (0x...)" and the loader's "/lib64/ld-linux-x86-64.so.2 (0x...)"
  while read -r lib; do cp -L "$lib" "$DIR/lib/"; done < <(ldd "$path" | awk '$3 ~ /^\// {print $3}')
  loader=$(ldd "$path" | awk '$1 ~ /^\/.*ld-linux/ {print $1}')
  cat > "$DIR/bin/$tool" <<WRAP
#!/bin/sh
d=\$(dirname "\$(readlink -f "\$0")")/..
exec "\$d/lib/$(basename "$loader")" --library-path "\$d/lib" "\$d/libexec/$tool" "\$@"
WRAP
  chmod +x "$DIR/bin/$tool"
done
cp -L "$loader" "$DIR/lib/"
"$DIR/bin/ip" -V
echo "packed into $DIR ($(du -sh "$DIR" | cut -f1))"
