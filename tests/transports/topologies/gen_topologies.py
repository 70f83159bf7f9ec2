#!/usr/bin/env python3
"""Write the hwloc 2.x XML topologies that tests/transports uses.

The machines described here do not exist where the tests run: they give the transport
selection GPUs, NICs, PCIe switches and NVLink that a CPU-only build machine lacks.
The output follows what hwloc 2.9 exports on Linux (lstopo --of xml): CPU objects with
cpusets, PCI bridges and devices with their classes and ids, and the OS devices that
the CUDA, NVML, network and OpenFabrics backends add. Re-run after editing:

    /usr/bin/python3 tests/transports/topologies/gen_topologies.py tests/transports/topologies
Every file must load with `lstopo-no-graphics --input FILE`.
"""
import os
import sys


class Gen:
    def __init__(self):
        self.gp = 0
        self.lines = []

    def next_gp(self):
        self.gp += 1
        return self.gp

    def emit(self, depth, text):
        self.lines.append("  " * depth + text)


def mask(bits):
    value = 0
    for b in bits:
        value |= 1 << b
    return "0x%08x" % value


def sets(cpus, nodes):
    c, n = mask(cpus), mask(nodes)
    return ('cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"'
            % (c, c, n, n))


def emit_cpu_side(g, depth, pkg_index, cpus, node, memory):
    s = sets(cpus, [node])
    g.emit(depth, '<object type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="%d">'
           % (node, s, g.next_gp(), memory))
    g.emit(depth + 1, '<page_type size="4096" count="%d"/>' % (memory // 4096))
    g.emit(depth, '</object>')
    g.emit(depth, '<object type="L3Cache" os_index="%d" %s gp_index="%d" cache_size="33554432" '
           'depth="3" cache_linesize="64" cache_associativity="16" cache_type="0">'
           % (pkg_index, s, g.next_gp()))
    for cpu in cpus:
        cs = sets([cpu], [node])
        g.emit(depth + 1, '<object type="L2Cache" os_index="%d" %s gp_index="%d" '
               'cache_size="1048576" depth="2" cache_linesize="64" cache_associativity="8" '
               'cache_type="0">' % (cpu, cs, g.next_gp()))
        g.emit(depth + 2, '<object type="L1Cache" os_index="%d" %s gp_index="%d" '
               'cache_size="49152" depth="1" cache_linesize="64" cache_associativity="12" '
               'cache_type="1">' % (cpu, cs, g.next_gp()))
        g.emit(depth + 3, '<object type="Core" os_index="%d" %s gp_index="%d">'
               % (cpu, cs, g.next_gp()))
        g.emit(depth + 4, '<object type="PU" os_index="%d" %s gp_index="%d"/>'
               % (cpu, cs, g.next_gp()))
        g.emit(depth + 3, '</object>')
        g.emit(depth + 2, '</object>')
        g.emit(depth + 1, '</object>')
    g.emit(depth, '</object>')


def info(g, depth, name, value):
    g.emit(depth, '<info name="%s" value="%s"/>' % (name, value))


def emit_osdev(g, depth, dev):
    sub = ' subtype="%s"' % dev["subtype"] if dev.get("subtype") else ""
    g.emit(depth, '<object type="OSDev" gp_index="%d" name="%s"%s osdev_type="%d">'
           % (g.next_gp(), dev["name"], sub, dev["osdev_type"]))
    for k, v in dev.get("info", []):
        info(g, depth + 1, k, v)
    g.emit(depth, '</object>')
    return g.gp


def emit_pci(g, depth, dev, gps):
    """A PCI device or PCI-to-PCI bridge; records OS device gp indexes by name in gps."""
    pci_type = "%s [%s] [%s] %s" % (dev["class"], dev["id"], dev.get("subid", dev["id"]),
                                    dev.get("rev", "00"))
    speed = dev.get("link", "15.753846")
    if dev.get("children") is not None:
        g.emit(depth, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="%d" '
               'bridge_pci="%s" pci_busid="%s" pci_type="%s" pci_link_speed="%s">'
               % (g.next_gp(), dev["depth"], dev["range"], dev["busid"], pci_type, speed))
        for child in dev["children"]:
            emit_pci(g, depth + 1, child, gps)
        g.emit(depth, '</object>')
        return
    g.emit(depth, '<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s" '
           'pci_link_speed="%s">' % (g.next_gp(), dev["busid"], pci_type, speed))
    for k, v in dev.get("info", []):
        info(g, depth + 1, k, v)
    for osdev in dev.get("osdevs", []):
        gps[osdev["name"]] = emit_osdev(g, depth + 1, osdev)
    g.emit(depth, '</object>')


def emit_host_bridge(g, depth, hb, gps):
    g.emit(depth, '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" '
           'bridge_pci="%s">' % (g.next_gp(), hb["range"]))
    for child in hb["children"]:
        emit_pci(g, depth + 1, child, gps)
    g.emit(depth, '</object>')


def topology(host, packages, distances=None):
    """packages: list of dicts {cpus: [..], memory: bytes, io: [host bridges]}."""
    g = Gen()
    gps = {}
    all_cpus = [c for p in packages for c in p["cpus"]]
    all_nodes = list(range(len(packages)))
    g.emit(0, '<?xml version="1.0" encoding="UTF-8"?>')
    g.emit(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    g.emit(0, '<topology version="2.0">')
    g.emit(1, '<object type="Machine" os_index="0" %s allowed_cpuset="%s" allowed_nodeset="%s" '
           'gp_index="%d">' % (sets(all_cpus, all_nodes), mask(all_cpus), mask(all_nodes),
                               g.next_gp()))
    for k, v in [("Backend", "Linux"), ("OSName", "Linux"), ("OSRelease", "5.15.0"),
                 ("HostName", host), ("Architecture", "x86_64"), ("hwlocVersion", "2.9.0")]:
        info(g, 2, k, v)
    for index, pkg in enumerate(packages):
        g.emit(2, '<object type="Package" os_index="%d" %s gp_index="%d">'
               % (index, sets(pkg["cpus"], [index]), g.next_gp()))
        info(g, 3, "CPUVendor", pkg.get("vendor", "AuthenticAMD"))
        info(g, 3, "CPUModel", pkg.get("model", "AMD EPYC 7742 64-Core Processor"))
        emit_cpu_side(g, 3, index, pkg["cpus"], index, pkg.get("memory", 1 << 36))
        for hb in pkg.get("io", []):
            emit_host_bridge(g, 3, hb, gps)
        g.emit(2, '</object>')
    g.emit(1, '</object>')
    if distances:
        names, values = distances["objs"], distances["values"]
        n = len(names)
        g.emit(1, '<distances2 type="OSDev" nbobjs="%d" kind="%d" name="%s" indexing="gp">'
               % (n, distances["kind"], distances["name"]))
        # The length attribute counts the characters of the content, not the numbers.
        text = " ".join(str(gps[x]) for x in names) + " "
        g.emit(2, '<indexes length="%d">%s</indexes>' % (len(text), text))
        text = " ".join(str(values[i][j]) for i in range(n) for j in range(n)) + " "
        g.emit(2, '<u64values length="%d">%s</u64values>' % (len(text), text))
        g.emit(1, '</distances2>')
    g.emit(0, '</topology>')
    return "\n".join(g.lines) + "\n"


# ---- devices ----

def gpu(busid, index, model, cuda=True, nvml=True, pci_class="0302", pci_id="10de:20b0"):
    osdevs = []
    if cuda:
        osdevs.append({"name": "cuda%d" % index, "subtype": "CUDA", "osdev_type": 5, "info": [
            ("Backend", "CUDA"), ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", model),
            ("CUDAGlobalMemorySize", "41943040"), ("CUDAL2CacheSize", "40960"),
            ("CUDAMultiProcessors", "108"), ("CUDACoresPerMP", "64"),
            ("CUDASharedMemorySizePerMP", "48")]})
    if nvml:
        osdevs.append({"name": "nvml%d" % index, "subtype": "NVML", "osdev_type": 1, "info": [
            ("Backend", "NVML"), ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", model),
            ("NVIDIASerial", "13231200%05d" % index),
            ("NVIDIAUUID", "GPU-6b6e3e2a-0c3f-4d2c-9a1e-00000000%04d" % index)]})
    return {"busid": busid, "class": pci_class, "id": pci_id, "rev": "a1", "link": "31.507692",
            "info": [("PCIVendor", "NVIDIA Corporation"), ("PCIDevice", model)],
            "osdevs": osdevs}


def ib_nic(busid, index, netdev):
    return {"busid": busid, "class": "0207", "id": "15b3:101b", "subid": "15b3:0007",
            "link": "31.507692",
            "info": [("PCIVendor", "Mellanox Technologies"),
                     ("PCIDevice", "MT28908 Family [ConnectX-6]")],
            "osdevs": [
                {"name": netdev, "osdev_type": 2, "info": [
                    ("Address", "00:00:10:29:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:%02x:%02x:%02x"
                     % (index, index, index)), ("Port", "1")]},
                {"name": "mlx5_%d" % index, "osdev_type": 3, "info": [
                    ("NodeGUID", "0c42:a103:00%02x:%02x%02x" % (index, index, index)),
                    ("SysImageGUID", "0c42:a103:00%02x:%02x%02x" % (index, index, index)),
                    ("Port1State", "4"), ("Port1LID", "0x%x" % (index + 1)),
                    ("Port1LMC", "0"),
                    ("Port1GID0", "fe80:0000:0000:0000:0c42:a103:00%02x:%02x%02x"
                     % (index, index, index))]}]}


def eth_nic(busid, netdev, pci_id="8086:1521", vendor="Intel Corporation",
            device="I350 Gigabit Network Connection"):
    return {"busid": busid, "class": "0200", "id": pci_id, "link": "5.000000",
            "info": [("PCIVendor", vendor), ("PCIDevice", device)],
            "osdevs": [{"name": netdev, "osdev_type": 2,
                        "info": [("Address", "3c:ec:ef:00:11:22")]}]}


def nvme(busid, name):
    return {"busid": busid, "class": "0108", "id": "144d:a80a", "link": "7.876923",
            "osdevs": [{"name": name, "subtype": "Disk", "osdev_type": 0,
                        "info": [("Size", "1875374424"), ("SectorSize", "512")]}]}


def switch(busid, depth, bus_range, children):
    """A PCIe switch port (PCI-to-PCI bridge, class 0604)."""
    return {"busid": busid, "class": "0604", "id": "1000:c010", "depth": depth,
            "range": bus_range, "children": children}


# ---- machines ----

def dgx_like(host):
    """Two sockets, four PCIe switches with two A100 and one ConnectX-6 each, NVLink mesh.

    The NVLink pattern is a hybrid cube mesh like the first DGX generation: GPUs 0-3 and
    4-7 are fully linked among themselves and GPU i is linked to GPU i+4, so some pairs
    (0 and 5, for example) have no NVLink and go through PCIe across the sockets.
    """
    model = "NVIDIA A100-SXM4-40GB"
    packages = []
    gpu_index = 0
    nic_index = 0
    for sock in range(2):
        hbs = []
        for sw in range(2):
            base = 0x10 + 0x40 * sock + 0x20 * sw
            children = [gpu("0000:%02x:00.0" % (base + 2), gpu_index, model),
                        gpu("0000:%02x:00.0" % (base + 3), gpu_index + 1, model),
                        ib_nic("0000:%02x:00.0" % (base + 4), nic_index, "ib%d" % nic_index)]
            gpu_index += 2
            nic_index += 1
            port = switch("0000:%02x:00.0" % (base + 1), 2,
                          "0000:[%02x-%02x]" % (base + 2, base + 4), children)
            root = switch("0000:%02x:01.1" % base, 1,
                          "0000:[%02x-%02x]" % (base + 1, base + 4), [port])
            hbs.append({"range": "0000:[%02x-%02x]" % (base, base + 4), "children": [root]})
        if sock == 0:
            hbs.append({"range": "0000:[c0-c2]", "children": [
                eth_nic("0000:c1:00.0", "enp193s0f0"), nvme("0000:c2:00.0", "nvme0n1")]})
        packages.append({"cpus": list(range(8 * sock, 8 * sock + 8)), "io": hbs})
    links = [[0] * 8 for _ in range(8)]
    for quad in (0, 4):
        for i in range(quad, quad + 4):
            for j in range(quad, quad + 4):
                if i != j:
                    links[i][j] = 1 if (i + j) % 2 else 2
    for i in range(4):
        links[i][i + 4] = links[i + 4][i] = 2
    per_link = 25000  # MB/s per NVLink 2 link and direction
    values = [[(links[i][j] * per_link if i != j else 900000) for j in range(8)]
              for i in range(8)]
    dist = {"name": "NVLinkBandwidth", "kind": 1 | 8,  # FROM_OS | MEANS_BANDWIDTH
            "objs": ["nvml%d" % i for i in range(8)], "values": values}
    return topology(host, packages, dist)


def pcie2(host):
    """A workstation: two GeForce GPUs on separate root ports, an Ethernet NIC, no NVLink.

    Only PCI objects describe the GPUs (no CUDA/NVML OS devices), as when hwloc was built
    without its NVIDIA backends: selection must recognise them by PCI class and vendor.
    """
    model = "GA102 [GeForce RTX 3090]"
    g0 = gpu("0000:01:00.0", 0, model, cuda=False, nvml=False, pci_class="0300",
             pci_id="10de:2204")
    g1 = gpu("0000:02:00.0", 1, model, cuda=False, nvml=False, pci_class="0300",
             pci_id="10de:2204")
    hb = {"range": "0000:[00-05]", "children": [
        switch("0000:00:01.0", 1, "0000:[01-01]", [g0]),
        switch("0000:00:03.1", 1, "0000:[02-02]", [g1]),
        switch("0000:00:1c.0", 1, "0000:[05-05]", [eth_nic("0000:05:00.0", "enp5s0")]),
        nvme("0000:00:1d.0", "nvme0n1")]}
    return topology(host, [{"cpus": list(range(8)), "io": [hb],
                            "vendor": "GenuineIntel", "model": "Intel(R) Xeon(R) W-2245"}])


def far_nic(host):
    """Two sockets: two A100 PCIe cards on socket 0, the only InfiniBand NIC on socket 1.

    GPUDirect RDMA between GPU and NIC would cross the inter-socket link, so selection
    should not count on it.
    """
    model = "NVIDIA A100-PCIE-40GB"
    hb0 = {"range": "0000:[20-22]", "children": [
        switch("0000:20:01.1", 1, "0000:[21-21]", [gpu("0000:21:00.0", 0, model,
                                                       pci_id="10de:20f1")]),
        switch("0000:20:03.1", 1, "0000:[22-22]", [gpu("0000:22:00.0", 1, model,
                                                       pci_id="10de:20f1")])]}
    hb1 = {"range": "0000:[a0-a1]", "children": [
        switch("0000:a0:01.1", 1, "0000:[a1-a1]", [ib_nic("0000:a1:00.0", 0, "ib0")])]}
    return topology(host, [{"cpus": list(range(0, 8)), "io": [hb0]},
                           {"cpus": list(range(8, 16)), "io": [hb1]}])


def cpu_only(host):
    """Like the build machine: two cores, one NUMA node, a virtio NIC, no GPU."""
    hb = {"range": "0000:[00-00]", "children": [
        nvme("0000:00:02.0", "vda"),
        eth_nic("0000:00:03.0", "eth0", pci_id="1af4:1041", vendor="Red Hat, Inc.",
                device="Virtio network device")]}
    return topology(host, [{"cpus": [0, 1], "io": [hb], "memory": 6000168960}])


FILES = {
    "dgx8-a.xml": lambda: dgx_like("dgx-a"),
    "dgx8-b.xml": lambda: dgx_like("dgx-b"),
    "pcie2.xml": lambda: pcie2("ws-1"),
    "farnic.xml": lambda: far_nic("farnic-1"),
    "cpuonly.xml": lambda: cpu_only("cpu-1"),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, make in FILES.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(make())


if __name__ == "__main__":
    main()
