#!/bin/sh
# Runs bin/<machine>/@BINARY@, the @BINARY@ built for this machine's architecture (`uname -m`:
# x86_64, aarch64, ...), with the same arguments; its exit code is this script's. When the bundle
# has no @BINARY@ for this machine, says so and names the build step (`bash build.sh` in the skill
# directory builds bin/<machine>/ from the bundle's own sources, offline).
self=$(readlink -f "$0" 2>/dev/null) || self=$0
here=$(cd "$(dirname "$self")" && pwd)
machine=$(uname -m)
case "$machine" in
    amd64 | x64) arch=x86_64 ;;
    arm64 | armv8l) arch=aarch64 ;;
    *) arch=$machine ;;
esac
binary="$here/$arch/@BINARY@"
if [ -x "$binary" ]; then
    exec "$binary" "$@"
fi
shipped=$(cd "$here" && for d in */; do [ -x "${d}@BINARY@" ] && printf '%s ' "${d%/}"; done)
shipped=${shipped% }
echo "@BINARY@: error: this bundle has no @BINARY@ for this machine ($machine: bin/$arch/@BINARY@ is missing;" \
    "it has ${shipped:-none}); build bin/$arch/ for this machine: bash $(dirname "$here")/build.sh" >&2
exit 2
