"""Where the ssh testbed's hosts come from: an Ansible inventory or the portal's manifest.

- **Inventory** (INI or YAML, read by Ansible's own ``ansible-inventory``, so it means
  what it means to the playbooks): groups ``server``, ``client`` and ``bridge`` with
  one host each. Connection variables are Ansible's (``ansible_host``,
  ``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``,
  ``ansible_ssh_common_args``, ``ansible_become``); quicbed's own are ``quicbed_exp_ip``
  (the host's experiment-network address), ``quicbed_repo_dir``, ``quicbed_workdir``
  and ``quicbed_python``.
- **Manifest** (the GENI v3 manifest RSpec the Emulab/CloudLab portal shows for an
  experiment, "Manifest" tab, saved as XML): nodes ``server``, ``client`` and the
  bridged link's ``link_bridge``; login host, port and user from each node's
  ``services/login``; experiment addresses from its interfaces. Emulab users log in
  as themselves and run quicbed's commands with sudo.
"""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed import proc
from quicbed.errors import QuicbedError
from quicbed.testbed.lifecycle import ROLES, RPath, check_role

#: node names in profile.py's requests (its BridgedLink "link" names its bridge link_bridge)
MANIFEST_NODES = {"server": ("server",), "client": ("client",), "bridge": ("link_bridge", "bridge")}
_TRUE = {"true", "yes", "1", "on"}


#: where the portal clones the repository on every node (profile.py's REPOSITORY)
DEFAULT_REPO = RPath("/local/repository")
DEFAULT_WORKDIR = RPath("/var/tmp/quicbed")
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class Node:
    """One host and how to reach it; every field can come from an inventory."""

    role: str
    host: str
    port: int = 22
    user: str | None = None
    key: Path | None = None
    exp_ip: str | None = None  # its address on the experiment network (server, client)
    repo_dir: RPath = DEFAULT_REPO
    workdir: RPath = DEFAULT_WORKDIR
    sudo: bool = False  # Emulab users log in as themselves and have password-less sudo
    ssh_args: tuple[str, ...] = ()
    python: str = "python3"
    #: what the portal says the node is (Emulab's hardware type, e.g. d430; its disk
    #: image): recorded with every attempt, so a sweep over several testbeds can tell
    hardware_type: str | None = None
    image: str | None = None

    def __post_init__(self) -> None:
        check_role(self.role)
        if not self.host:
            raise QuicbedError(f"node {self.role}: no host to connect to")
        if not 0 < self.port < 65536:
            raise QuicbedError(f"node {self.role}: port {self.port} is not a TCP port")
        if self.key is not None and not self.key.is_file():
            raise QuicbedError(f"node {self.role}: SSH key {self.key} does not exist")
        if not self.workdir.is_absolute() or str(self.workdir) == "/":
            raise QuicbedError(f"node {self.role}: work folder {self.workdir} is not usable")

    @property
    def address(self) -> str:
        where = f"{self.user}@{self.host}" if self.user else self.host
        return where if self.port == 22 else f"{where}:{self.port}"


def read_nodes(path: Path, *, user: str | None = None, key: Path | None = None) -> dict[str, Node]:
    """The hosts that ``path`` (an inventory or a manifest) names, by role
    (quicbed.testbed.ssh.SshTestbed.load makes the testbed of them).

    ``user`` and ``key`` override what the file says (a manifest lists every
    project member's login; the portal's default key is the user's own).
    """
    if not path.is_file():
        raise QuicbedError(f"hosts file {path} does not exist")
    text = path.read_text(errors="replace")
    head = text.lstrip()[:2000]
    if head.startswith("<") and "rspec" in head:
        return from_manifest(text, str(path), user=user, key=key)
    return from_inventory(path, user=user, key=key)


def _inventory_tool() -> str:
    here = Path(sys.executable).parent / "ansible-inventory"
    found = str(here) if here.exists() else shutil.which("ansible-inventory")
    if not found:
        raise QuicbedError("ansible-inventory not found (run `make setup`)")
    return found


def from_inventory(path: Path, *, user: str | None, key: Path | None) -> dict[str, Node]:
    cp = proc.run([_inventory_tool(), "-i", str(path), "--list"], timeout=60, check=False)
    if cp.returncode != 0:
        raise QuicbedError(
            f"{path}: not an inventory Ansible can read: "
            f"{cp.stderr.strip().splitlines()[-1:] or cp.returncode}"
        )
    data = json.loads(cp.stdout)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    nodes = {}
    for role in ROLES:
        hosts = data.get(role, {}).get("hosts", [])
        if len(hosts) != 1:
            got = ", ".join(hosts) if hosts else "none"
            raise QuicbedError(f"{path}: group {role!r} must hold exactly one host (has {got})")
        name = hosts[0]
        nodes[role] = _node(role, name, hostvars.get(name, {}), f"{path}: host {name}", user, key)
    return nodes


def _node(
    role: str, name: str, v: dict[str, Any], where: str, user: str | None, key: Path | None
) -> Node:
    def opt(k: str) -> Any:
        return v.get(k)

    try:
        port = int(opt("ansible_port") or opt("ansible_ssh_port") or 22)
    except ValueError:
        raise QuicbedError(
            f"{where}: ansible_port {opt('ansible_port')!r} is not a number"
        ) from None
    keyfile = key or opt("ansible_ssh_private_key_file") or opt("ansible_private_key_file")
    become = str(opt("ansible_become") or "").lower() in _TRUE
    args = tuple(str(opt("ansible_ssh_common_args") or "").split()) + tuple(
        str(opt("ansible_ssh_extra_args") or "").split()
    )
    try:
        return Node(
            role=role,
            host=str(opt("ansible_host") or name),
            port=port,
            user=user or opt("ansible_user") or opt("ansible_ssh_user"),
            key=Path(keyfile).expanduser() if keyfile else None,
            exp_ip=opt("quicbed_exp_ip"),
            repo_dir=RPath(opt("quicbed_repo_dir") or "/local/repository"),
            workdir=RPath(opt("quicbed_workdir") or "/var/tmp/quicbed"),
            sudo=become,
            ssh_args=args,
            python=str(opt("quicbed_python") or "python3"),
            hardware_type=opt("quicbed_hardware_type"),
            image=opt("quicbed_image"),
        )
    except QuicbedError as exc:
        raise QuicbedError(f"{where}: {exc}") from None


def from_manifest(text: str, where: str, *, user: str | None, key: Path | None) -> dict[str, Node]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise QuicbedError(f"{where}: not XML: {exc}") from None
    if root.get("type") not in (None, "manifest"):
        raise QuicbedError(
            f"{where}: is a {root.get('type')} RSpec; give the experiment's manifest (the "
            "portal's Manifest tab), which has the hosts the portal chose"
        )
    by_id = {n.get("client_id"): n for n in root.iter() if _local(n.tag) == "node"}
    nodes = {}
    for role in ROLES:
        el = next((by_id[i] for i in MANIFEST_NODES[role] if i in by_id), None)
        if el is None:
            raise QuicbedError(
                f"{where}: no node {' or '.join(MANIFEST_NODES[role])!r} "
                "(is this a quicbed experiment?)"
            )
        logins = [e for e in el.iter() if _local(e.tag) == "login"]
        if user:
            logins = [e for e in logins if e.get("username") == user] or logins
        if not logins:
            raise QuicbedError(
                f"{where}: node {el.get('client_id')} has no login (not booted "
                "yet? save the manifest once the experiment is ready)"
            )
        login = logins[0]
        ips = [e.get("address") for e in el.iter() if _local(e.tag) == "ip" and e.get("address")]
        exp_ip = next((a for a in ips if a and a.startswith("10.")), None)
        hw = next((e.get("name") for e in el.iter() if _local(e.tag) == "hardware_type"), None)
        hw = hw or next(
            (
                e.get("hardware_type")
                for e in el.iter()
                if _local(e.tag) == "vnode" and e.get("hardware_type")
            ),
            None,
        )
        image = next((e.get("name") for e in el.iter() if _local(e.tag) == "disk_image"), None)
        try:
            nodes[role] = Node(
                role=role,
                host=login.get("hostname") or "",
                port=int(login.get("port") or 22),
                user=user or login.get("username"),
                key=key,
                exp_ip=exp_ip if role != "bridge" else None,
                sudo=True,
                hardware_type=hw,
                image=image,
            )
        except QuicbedError as exc:
            raise QuicbedError(f"{where}: {exc}") from None
    return nodes


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
