"""Interface offloads as a cell setting: GSO, GRO, TSO and TX checksum per role interface.

A cell's ``offloads`` (``{gso: on, gro: on}``, or ``--offloads gso=on,gro=on``) are set
with ``ethtool -K`` on every role's experiment interface after the link is shaped, put
back as they were when the link is taken down, and read back with ``ethtool -k`` before
and after every load and flow: one whose read-back differs from the setting is invalid,
the reason naming the offload and the interface. An offload the cell does not name is
left as the testbed has it (the local testbed: off on every veth end).

Only with ``shaper: none``: an emulator or a qdisc on the path would see 64 KB
super-packets (rate, delay, loss and queue applied per super-packet), and a forwarded
frame with a partial checksum is dropped; so every shaping shaper needs them off
(docs/endpoints.md, "Interface offloads").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from quicbed.errors import QuicbedError

if TYPE_CHECKING:  # a report reads settings without importing the testbed
    from quicbed.roles.interface import Roles

#: the cell's names of the offloads, and ``ethtool -k``'s
FEATURES = {
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
    "tso": "tcp-segmentation-offload",
    "tx": "tx-checksumming",
}
_WORDS = {"on": "on", "off": "off", "true": "on", "false": "off"}
Setting = dict[str, str]


def parse(value: object) -> Setting:
    """A setting from a spec's mapping (YAML reads ``on`` as true) or the CLI's
    ``gso=on,gro=off``; unknown offloads and values are refused by name."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        pairs: list[tuple[object, object]] = []
        for part in value.split(","):
            left, eq, right = part.strip().partition("=")
            if not eq:
                raise QuicbedError(f"offloads: {part.strip()!r} is not NAME=on|off")
            pairs.append((left.strip(), right.strip()))
    elif isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        raise QuicbedError(f"offloads: {value!r} is not a mapping or NAME=on|off,...")
    out: Setting = {}
    for name, val in pairs:
        key = str(name)
        if key not in FEATURES:
            raise QuicbedError(f"offloads: unknown offload {key!r} (one of {', '.join(FEATURES)})")
        word = str(val).lower() if isinstance(val, bool | str) else None
        if word not in _WORDS:
            raise QuicbedError(f"offloads: {key}={val!r}: the value is on or off")
        out[key] = _WORDS[word]
    return dict(sorted(out.items()))


def text(setting: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(setting.items()))


def check_shaper(shaper: str, setting: Mapping[str, str]) -> None:
    """Offloads on are sound only without an emulator or qdisc on the path."""
    on = [k for k, v in setting.items() if v == "on"]
    if on and shaper != "none":
        raise QuicbedError(
            f"offloads {text(setting)} with shaper {shaper}: {', '.join(on)} on needs "
            "shaper none (an emulator or qdisc would shape 64 KB super-packets as one "
            "packet and drop frames with partial checksums)"
        )


def read(tb: Roles, role: str, dev: str) -> Setting:
    """``ethtool -k`` of one interface: each offload's state (``[fixed]`` dropped)."""
    out = tb.exec(role, ["ethtool", "-k", dev], check=False).stdout
    names = {v: k for k, v in FEATURES.items()}
    feats: Setting = {}
    for line in out.splitlines():
        key, _, val = line.strip().partition(":")
        if key in names and val.strip():
            feats[names[key]] = val.strip().split()[0]
    return feats


def read_all(tb: Any) -> dict[str, Setting]:
    """Every experiment interface's offloads, by ``role:interface``."""
    return {
        f"{role}:{dev}": read(tb, role, dev)
        for role, devs in tb.offload_interfaces().items()
        for dev in devs
    }


def differences(setting: Mapping[str, str], seen: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per offload of the setting that an interface does not have."""
    out = []
    for iface, feats in seen.items():
        for key, want in setting.items():
            got = feats.get(key, "absent")
            if got != want:
                out.append(f"offload {key} is {got} on {iface} (expected {want})")
    return out


def apply(tb: Any, setting: Mapping[str, str]) -> dict[str, Setting]:
    """Set the offloads on every experiment interface; returns what they were before
    (for :func:`restore`). Raises naming the interface if the read-back differs (e.g.
    TSO on needs TX checksum on)."""
    before = read_all(tb)
    if not setting:
        return before
    args = [w for k, v in setting.items() for w in (k, v)]
    for role, devs in tb.offload_interfaces().items():
        for dev in devs:
            tb.exec(role, ["ethtool", "-K", dev, *args], check=False)
    bad = differences(setting, read_all(tb))
    if bad:
        restore(tb, before)
        raise QuicbedError(f"offloads {text(setting)}: {'; '.join(bad)}")
    return before


def restore(tb: Any, before: Mapping[str, Mapping[str, str]]) -> None:
    """Put every interface's offloads back as :func:`apply` found them."""
    for iface, feats in before.items():
        role, _, dev = iface.partition(":")
        args = [w for k in FEATURES if k in feats for w in (k, feats[k])]
        if args:
            tb.exec(role, ["ethtool", "-K", dev, *args], check=False)


class Watch:
    """The setting read back around one load or flow: ``begin`` before it, ``end`` after
    (the facts to store and the reasons it is invalid, if any)."""

    def __init__(self, tb: Any, setting: Mapping[str, str]) -> None:
        self.tb, self.setting = tb, dict(setting)
        self.before: dict[str, Setting] = {}

    def begin(self) -> None:
        if self.setting:
            self.before = read_all(self.tb)

    def end(self) -> tuple[dict[str, Any], list[str]]:
        if not self.setting:
            return {}, []
        after = read_all(self.tb)
        reasons = list(dict.fromkeys(differences(self.setting, self.before)))
        reasons += [r for r in differences(self.setting, after) if r not in reasons]
        facts = {"offloads": {"set": self.setting, "before": self.before, "after": after}}
        return facts, reasons
