"""Which congestion control Envoy's QUIC connections run, read from the running server.

Envoy logs no congestion control: QUICHE's debug logs are compiled out of its release
build and no access-log operator or stat names it. Its configuration cannot be taken at
its word either, because QUICHE picks a connection's sender from Envoy's runtime flags
*and* from connection options the client sent (QuicSentPacketManager::SetFromConfig),
replacing the first sender by another when those ask for it. So the evidence is the
server's own code path: each QUICHE sender class (``quic::TcpCubicSenderBytes`` for
CUBIC and Reno, ``quic::BbrSender`` for BBRv1, ``quic::Bbr2Sender`` for BBRv2) has its
own ``SetFromConfig``, which QuicSentPacketManager calls on the connection's sender once
the handshake's configuration is negotiated, and on a replacement sender too. A kernel
uprobe on each of the three counts the calls: a load whose connections were configured
by one class only ran that class.

The three functions are found in the running process the way the C++ ABI lays out
virtual tables, from the classes' RTTI names, which a stripped binary keeps:

- type name: the string ``N4quic9BbrSenderE`` in the binary, at an address the ELF
  program headers and the process's load base give;
- type_info: an object in the process's data whose second word points at that name;
- primary vtable: the one word that points at that type_info, preceded by an
  offset-to-top of 0; its address point is the word after it;
- ``SetFromConfig``: slot 2 of that table (after the two destructor slots), the first
  method SendAlgorithmInterface declares (send_algorithm_interface.h). Its address,
  less the load base, gives the file offset a uprobe takes.

The uprobes are defined once per binary (``quicbed_envoy/<class>_<offset>``) and enabled
in a tracefs instance of the arm's own, filtered to the server's threads, so another
Envoy on the host (another testbed) is not counted. ``arm`` sets it up, ``read`` counts
and clears, ``disarm`` removes the instance (and the definitions, unless another
instance still uses them). Reading another process's memory and tracefs needs root.

Runs on the server node (``python3 -m quicbed.servers.envoy_probe arm|read|disarm ...``):
standard library only; prints one JSON object.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

#: the sender classes by quicbed's names for what they run (Reno and CUBIC share one
#: class, told apart by a flag inside it that the client's connection options set)
SENDERS = {
    "cubic_or_reno": "N4quic19TcpCubicSenderBytesE",
    "bbr": "N4quic9BbrSenderE",
    "bbr2": "N4quic10Bbr2SenderE",
}
#: SendAlgorithmInterface's first declared method, after the two destructor slots
SET_FROM_CONFIG_SLOT = 2
GROUP = "quicbed_envoy"
TRACEFS = Path("/sys/kernel/tracing")
_MAP = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) ([0-9a-f]+) \S+ (\d+)\s*(.*)$")
#: a hit in the trace: "<task>-<tid> [cpu] <flags> <time>: <event>: (<address>)"
_EVENT = re.compile(r": (" + "|".join(sorted(SENDERS, key=len, reverse=True)) + r")_[0-9a-f]+: \(")


class ProbeError(Exception):
    """The process, its binary or the kernel is not what this reading assumes."""


def mappings(pid: int) -> list[tuple[int, int, str, int, str]]:
    """(start, end, permissions, file offset, path) of each mapping of ``pid``."""
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        m = _MAP.match(line)
        if m:
            out.append((int(m[1], 16), int(m[2], 16), m[3], int(m[4], 16), m[6].strip()))
    return out


def load_segments(exe: bytes) -> list[tuple[int, int, int]]:
    """(file offset, virtual address, file size) of each PT_LOAD of a 64-bit ELF."""
    if exe[:4] != b"\x7fELF" or exe[4] != 2 or exe[5] != 1:
        raise ProbeError("not a 64-bit little-endian ELF file")
    (phoff,) = struct.unpack_from("<Q", exe, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", exe, 0x36)
    out = []
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", exe, phoff + i * phentsize
        )
        if p_type == 1:  # PT_LOAD
            out.append((p_offset, p_vaddr, p_filesz))
    return out


def to_vaddr(segments: list[tuple[int, int, int]], offset: int) -> int:
    for off, vaddr, size in segments:
        if off <= offset < off + size:
            return vaddr + offset - off
    raise ProbeError(f"file offset {offset:#x} is in no loaded segment")


def to_offset(segments: list[tuple[int, int, int]], vaddr: int) -> int:
    for off, va, size in segments:
        if va <= vaddr < va + size:
            return off + vaddr - va
    raise ProbeError(f"address {vaddr:#x} is in no loaded segment")


def words(data: bytes, value: int) -> list[int]:
    """Offsets in ``data`` of the 8-byte-aligned little-endian word ``value``."""
    pat = struct.pack("<Q", value)
    out, i = [], data.find(pat)
    while i >= 0:
        if i % 8 == 0:
            out.append(i)
        i = data.find(pat, i + 1)
    return out


def functions(pid: int) -> tuple[Path, dict[str, int]]:
    """The binary of ``pid`` and the file offset of each sender class's SetFromConfig."""
    exe_path = Path(os.readlink(f"/proc/{pid}/exe"))
    own = [m for m in mappings(pid) if m[4] == str(exe_path)]
    base = next((m[0] - m[3] for m in own if m[3] == 0), None)
    if base is None:
        raise ProbeError(f"process {pid} maps no start of {exe_path}")
    exe = exe_path.read_bytes()
    segments = load_segments(exe)
    data: list[tuple[int, bytes]] = []
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for start, end, perm, _off, _path in own:
            if perm.startswith("r"):
                mem.seek(start)
                data.append((start, mem.read(end - start)))

    def read_word(addr: int) -> int:
        for start, d in data:
            if start <= addr < start + len(d) - 7:
                return int(struct.unpack_from("<Q", d, addr - start)[0])
        raise ProbeError(f"address {addr:#x} is not in {exe_path}'s mappings")

    out: dict[str, int] = {}
    for cc, name in SENDERS.items():
        at = exe.find(name.encode() + b"\0")
        if at < 0:
            raise ProbeError(f"{exe_path} has no RTTI name {name}")
        name_addr = base + to_vaddr(segments, at)
        infos = [s + i - 8 for s, d in data for i in words(d, name_addr)]
        tables = [
            s + i + 8
            for info in infos
            for s, d in data
            for i in words(d, info)
            if i >= 8 and struct.unpack_from("<q", d, i - 8)[0] == 0
        ]
        if len(tables) != 1:
            raise ProbeError(
                f"found {len(tables)} primary virtual tables of {name} in {exe_path} (expected one)"
            )
        fn = read_word(tables[0] + 8 * SET_FROM_CONFIG_SLOT)
        out[cc] = to_offset(segments, fn - base)
    return exe_path, out


def event_name(cc: str, offset: int) -> str:
    return f"{cc}_{offset:x}"


def _define(line: str) -> None:
    """One definition per write() call, appended without a seek (tracefs refuses the
    seek Python's append mode makes at open: EINVAL)."""
    fd = os.open(TRACEFS / "uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def arm(pid: int, instance: str) -> dict[str, Any]:
    if not (TRACEFS / "uprobe_events").exists():
        raise ProbeError(f"this kernel has no uprobe events ({TRACEFS}/uprobe_events)")
    exe, offsets = functions(pid)
    defined = (TRACEFS / "uprobe_events").read_text()
    events = {}
    for cc, off in offsets.items():
        name = event_name(cc, off)
        if f"{GROUP}/{name} " not in defined:
            _define(f"p:{GROUP}/{name} {exe}:{off:#x}")
        events[cc] = name
    d = TRACEFS / "instances" / instance
    if d.exists():  # left by a killed run of this arm: ours to replace
        remove_instance(d)
    d.mkdir()
    threads = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    (d / "set_event_pid").write_text(" ".join(threads))
    for name in events.values():
        (d / "events" / GROUP / name / "enable").write_text("1")
    (d / "tracing_on").write_text("1")
    return {
        "binary": str(exe),
        "offsets": {k: hex(v) for k, v in offsets.items()},
        "threads": len(threads),
    }


def read(instance: str) -> dict[str, Any]:
    """Calls per sender class since the last read, and the buffer cleared."""
    d = TRACEFS / "instances" / instance
    text = (d / "trace").read_text()
    (d / "trace").write_text("")  # clears the buffer
    counts = dict.fromkeys(SENDERS, 0)
    for m in _EVENT.finditer(text):
        counts[m.group(1)] += 1
    lost = "LOST" in text
    return {"senders": counts, **({"lost_events": True} if lost else {})}


def remove_instance(d: Path) -> None:
    for p in (d / "tracing_on", d / "events" / "enable"):
        with contextlib.suppress(OSError):
            p.write_text("0")
    with contextlib.suppress(FileNotFoundError):
        d.rmdir()


def disarm(instance: str) -> dict[str, Any]:
    remove_instance(TRACEFS / "instances" / instance)
    removed = []
    for line in (TRACEFS / "uprobe_events").read_text().splitlines():
        m = re.match(rf"^p:{GROUP}/(\w+) ", line)
        if m:
            try:  # busy while another arm's instance has it enabled: left for that one
                _define(f"-:{GROUP}/{m.group(1)}")
                removed.append(m.group(1))
            except OSError:
                pass
    return {"removed": removed}


def answer(argv: list[str]) -> dict[str, Any]:
    """``arm PID INSTANCE`` | ``read INSTANCE`` | ``disarm INSTANCE`` -> the JSON answer
    (``error``: why not). The local testbed calls this in its own process."""
    try:
        mount_tracefs()
        if len(argv) == 3 and argv[0] == "arm":
            return arm(int(argv[1]), argv[2])
        if len(argv) == 2 and argv[0] == "read":
            return read(argv[1])
        if len(argv) == 2 and argv[0] == "disarm":
            return disarm(argv[1])
    except (ProbeError, OSError, ValueError) as exc:
        return {"error": str(exc)}
    return {"error": f"usage: arm PID INSTANCE | read INSTANCE | disarm INSTANCE (got {argv})"}


def mount_tracefs() -> None:
    """tracefs at TRACEFS, mounted if it is not (a node may not mount it at boot)."""
    if (TRACEFS / "instances").is_dir():
        return
    subprocess.run(
        ["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, timeout=10
    )
    if not (TRACEFS / "instances").is_dir():
        raise ProbeError(f"tracefs is not mounted at {TRACEFS} and cannot be")


def main(argv: list[str]) -> int:
    out = answer(argv)
    print(json.dumps(out))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
