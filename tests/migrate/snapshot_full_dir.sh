#!/usr/bin/env bash
# snapshot_full_dir.sh WEFTRUN TEST: runs TEST on 2 ranks with its SSD directory on a
# 2 MiB tmpfs mounted in a mount namespace of its own (so nothing is left mounted), where
# the third snapshot cannot fit. Needs root; exits 77 (skipped) where mounting is refused.
set -u
weftrun=$1 test=$2
dir=$(mktemp -d /tmp/weft-full-XXXXXX)
trap 'rmdir "$dir" 2>/dev/null' EXIT
if ! unshare -m sh -c "mount -t tmpfs -o size=2m weft-full '$dir'" 2>/dev/null; then
    echo "snapshot_full_dir: cannot mount a tmpfs in a mount namespace here: skipped"
    exit 77
fi
unshare -m sh -c "mount -t tmpfs -o size=2m weft-full '$dir' &&
    '$weftrun' -n 2 --timeout 60 -- '$test' '$dir'"
