#!/usr/bin/env bash
# Installs what weft needs to build and test on Debian 12 (run as root).
# --peers also installs what the peer comparisons build against (Open MPI's headers) and
# iperf3, which measures the test bed's link beside them, and fio, the disk's rate beside
# the spill space's (perf/offload_bench.py).
set -euo pipefail

# binutils (nm, readelf), util-linux (unshare) and libudev-dev (hwloc's static link, in
# pkg-config --static) serve the packaging tests. NumPy, pytest and PyTorch serve the
# Python binding's tests (python/, tests/python), pip and setuptools its install test,
# matplotlib the PyTorch demo's loss plot (examples/run_torch_demo.sh). Slurm, munge and
# PMIx serve the Slurm test bed (tests/slurm/slurm_bed.sh): Slurm's pmix plug-in loads
# pmix2/lib/libpmix.so, which is in libpmix-dev, not libpmix2. openmpi-bin's mpirun is the
# other PMIx launcher the tests use. In a container without an init system the Slurm and
# munge packages install without starting their services (invoke-rc.d finds no runlevel).
# etcd-server, etcd-client and libcurl4 (opened at run time, no headers needed) serve the
# store's etcd backend and its tests (tests/comm/store/etcd_store.sh).
pkgs=(build-essential cmake ninja-build pkg-config libucx-dev ucx-utils libhwloc-dev hwloc
      libcmocka-dev libopenblas-dev libssl-dev libxxhash-dev liburing-dev python3 binutils
      util-linux libudev-dev python3-numpy python3-pytest python3-torch python3-pip
      python3-setuptools python3-matplotlib slurm-wlm munge libpmix2 libpmix-dev
      openmpi-bin etcd-server etcd-client libcurl4)
if [[ "${1:-}" == "--peers" ]]; then
    pkgs+=(libopenmpi-dev iperf3 fio)
fi

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
