#!/bin/sh
# Builds bin/ for this machine from the bundle's own sources (source/, every crate vendored),
# offline, with this machine's cargo: see scripts/build.py (`bash build.sh --help`).
here=$(cd "$(dirname "$0")" && pwd)
for python in python3 python; do
    if command -v "$python" >/dev/null 2>&1; then
        exec "$python" "$here/scripts/build.py" "$@"
    fi
done
echo "build.sh: error: no python3 on PATH; the build step and the scripts/*.py launchers need Python 3.8+" >&2
exit 2
