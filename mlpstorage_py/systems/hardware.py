"""What a recorded block device's raw facts honestly say about the drive, for `systems describe`.

The host survey (launch/host_config.py) records sysfs as it reads it: a virtio disk's vendor is
its PCI vendor ID ("0x1af4"), and a virtual disk's rotational flag is whatever the hypervisor
chose. A description states a vendor name and a media type, so each raw fact passes here first:
a PCI ID becomes the name the PCI ID database gives it (Debian's `pci.ids` package, where this
host has it installed) and stays the submitter's to fill in otherwise; a virtual disk's
rotational flag never becomes a media type (host_profile.is_boot_drive says which device boots).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

# Where Debian's pci.ids package (and hwdata, elsewhere) installs the PCI ID database.
PCI_IDS = (Path("/usr/share/misc/pci.ids"), Path("/usr/share/hwdata/pci.ids"))
PCI_ID = re.compile(r"0x([0-9a-fA-F]{4})")
VENDOR_LINE = re.compile(r"([0-9a-f]{4})  (.+)")

# PCI vendors whose block devices are a hypervisor's, not a drive: virtio (Red Hat, both IDs),
# VMware, Hyper-V, Xen, VirtualBox.
VIRTUAL_PCI = {"1af4": "virtio", "1b36": "QEMU", "15ad": "VMware", "1414": "Hyper-V", "5853": "Xen",
               "80ee": "VirtualBox"}
# The same, as a SCSI device's vendor or model string reports them (virtio-scsi, emulated disks).
VIRTUAL_WORDS = ("qemu", "vmware", "msft", "vbox", "virtual disk", "persistentdisk")
# virtio-blk and Xen's block front end name their devices so.
VIRTUAL_NAMES = re.compile(r"(vd|xvd)[a-z]+$")
# What libata reports as every SATA drive's vendor: the layer, not the maker.
NOT_A_VENDOR = frozenset({"ata"})


def pci_vendor_id(vendor: Any) -> str | None:
    """The four hex digits of a PCI vendor ID ("0x1af4" -> "1af4"); None for a vendor name."""
    found = PCI_ID.fullmatch(str(vendor).strip()) if isinstance(vendor, str) else None
    return found.group(1).lower() if found else None


def pci_ids_file(paths: tuple[Path, ...] | None = None) -> Path | None:
    """The PCI ID database this host has installed, if any."""
    return next((p for p in (PCI_IDS if paths is None else paths) if p.is_file()), None)


@functools.lru_cache(maxsize=4)
def _vendors(path: Path) -> dict[str, str]:
    """{four hex digits: vendor name} from a pci.ids file: its unindented lines before the
    device classes ("C ..."); a device or subsystem line is indented and skipped."""
    vendors: dict[str, str] = {}
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("C "):
                break
            found = VENDOR_LINE.fullmatch(line.rstrip("\n"))
            if found:
                vendors[found.group(1)] = found.group(2).strip()
    return vendors


def vendor_name(vendor: Any, paths: tuple[Path, ...] | None = None) -> tuple[str | None, str | None]:
    """(the vendor name a description may state, None) or (None, why it must be filled in).
    A PCI ID is named from pci.ids; a name the device reported is kept unless it names no maker."""
    if not isinstance(vendor, str) or not vendor.strip():
        return None, None
    pci = pci_vendor_id(vendor)
    if pci is None:
        if vendor.strip().casefold() in NOT_A_VENDOR:
            return None, f"the host reported {vendor.strip()!r}, the SATA layer's name, not the drive's maker"
        return vendor.strip(), None
    database = pci_ids_file(paths)
    if database is None:
        return None, f"the host reported PCI vendor ID 0x{pci}; no pci.ids here to name it (Debian package pci.ids)"
    try:
        name = _vendors(database).get(pci)
    except OSError as exc:
        return None, f"the host reported PCI vendor ID 0x{pci}; {database} could not be read ({exc.strerror})"
    return (name, None) if name else (None, f"the host reported PCI vendor ID 0x{pci}, which {database} does not list")


def virtual_kind(device: dict[str, Any]) -> str | None:
    """What makes a recorded device a hypervisor's virtual disk ("virtio, PCI vendor 0x1af4"),
    or None for a device nothing marks as virtual."""
    pci = pci_vendor_id(device.get("vendor"))
    if pci in VIRTUAL_PCI:
        return f"{VIRTUAL_PCI[pci]}, PCI vendor 0x{pci}"
    for field in ("vendor", "model"):
        text = str(device.get(field) or "").casefold()
        word = next((w for w in VIRTUAL_WORDS if w in text), None)
        if word:
            return f"{field} {device[field]!r}"
    if VIRTUAL_NAMES.fullmatch(str(device.get("name"))):
        return f"device name {device['name']}"
    return None
