"""The local testbed with sshd in each namespace: three "hosts" for the ssh backend.

This is how the Emulab path is exercised on one machine: the three namespaces of
the local testbed (experiment link and all) get a control network, like an Emulab
node's, and an sshd each; an inventory file names them as the ssh testbed's hosts.
Every role gets a work folder of its own, so a file the runner forgot to send to a
role is missing there, as it would be on a real host.

Control network: a bridge ``<prefix>ctl`` in the root namespace, 10.10.0.254/24,
and a veth ``ctl0`` into each namespace (server .1, client .2, bridge .3). Several
labs may be up at once (a sweep over several testbeds is tested on two): a lab takes
the first of 10.10.0.0/24, 10.11.0.0/24, ... that no route of this machine uses. The
throwaway client key and host key live in the testbed's state folder and go with
``quicbed testbed down``.

Each sshd runs in its namespace's mount namespace (``ip netns exec`` mounts a sysfs of
the network namespace's own over /sys), where the host's cgroup hierarchies are not
mounted; a testbed node has them, and quicbed accounts CPU per role in them
(quicbed.roles.cpuaccounting). So the sshd mounts them again first (:func:`cgroup_mounts`):
the same hierarchies, the same groups, seen from the "host".
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from quicbed import proc
from quicbed.errors import QuicbedError
from quicbed.paths import REPO_ROOT
from quicbed.roles import cgroups
from quicbed.testbed.lifecycle import RPath
from quicbed.testbed.local import LocalTestbed

#: the control networks a lab may take, in order (never the experiment's 10.10.1.0/24)
CONTROL_NETS = [ipaddress.ip_network(f"10.{n}.0.0/24") for n in range(10, 20)]
#: host numbers of the roles on a control network (the root namespace's bridge: .254)
CONTROL_HOSTS = {"server": 1, "client": 2, "bridge": 3}
SSHD = "/usr/sbin/sshd"
INVENTORY = "inventory.ini"


def cgroup_mounts(mounts_text: str | None = None) -> str:
    """Shell commands that mount this host's CPU accounting hierarchies (cgroup v1 with
    cpuacct or cpuset, cgroup v2) where the host has them, under a fresh sysfs: a tmpfs
    where the host has one for them, then each hierarchy with the host's own options
    (cgroup2's apply to its one superblock: other options would change the host's)."""
    text = mounts_text if mounts_text is not None else Path("/proc/self/mounts").read_text()
    cmds = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 4 or not f[1].startswith("/sys/fs/cgroup"):
            continue
        point, fstype, opts = f[1], f[2], f[3]
        if fstype == "tmpfs" and point == "/sys/fs/cgroup":
            cmds.append(f"mount -t tmpfs -o {opts} tmpfs {point}")
        elif fstype == "cgroup2" or (
            fstype == "cgroup" and {"cpuacct", "cpuset"} & set(opts.split(","))
        ):
            cmds.append(f"mkdir -p {point} && mount -t {fstype} -o {opts} {fstype} {point}")
    return " && ".join(cmds)


def control_bridge(prefix: str) -> str:
    """The root-namespace bridge's name (LocalTestbed.down removes it too)."""
    return f"{prefix}ctl"


class SshLab:
    """sshd in the namespaces of one local testbed, and the inventory that names them."""

    def __init__(self, prefix: str = "qb") -> None:
        self.tb = LocalTestbed(prefix)
        self.dir = self.tb.state_dir / "sshlab"

    @property
    def inventory(self) -> Path:
        return self.dir / INVENTORY

    def up(self) -> Path:
        """Make (or keep) the lab; returns the inventory's path. Idempotent."""
        if not Path(SSHD).exists():
            raise QuicbedError(f"{SSHD} is missing (openssh-server; install it: make setup-sshlab)")
        self.tb.up()
        if self._running():
            return self.inventory
        try:
            ips = self._control_network()
            self._keys()
            for role, ip in ips.items():
                self._sshd(role, ip)
            for role in ips:
                self.tb.wait_listening(role, "tcp", 22)
            self._write_inventory(ips)
        except BaseException:
            self.tb.down()
            raise
        return self.inventory

    def down(self) -> list[str]:
        """The lab gone: what an ssh testbed over it left (:meth:`clear_hosts`), then the
        namespaces."""
        return self.clear_hosts() + self.tb.down()

    def clear_hosts(self) -> list[str]:
        """What an ssh testbed over the lab left on its hosts: its daemons, work folders
        and CPU groups, removed by the ssh testbed's own ``down`` while the lab's sshd
        answers. The groups live in this machine's control groups (the lab's hosts share
        its kernel), so taking the namespaces down would leave them: where sshd no longer
        answers (a crashed lab), they are removed here directly; the daemons and work
        folders go with the namespaces. Nothing where there is no lab."""
        if not self.inventory.exists():
            return []
        from quicbed.testbed.ssh import SshTestbed  # the lab's user, imported on use

        ssh = SshTestbed.load(self.inventory)
        try:
            if self._running():
                return ssh.down()
            return cgroups.remove(ssh.cpu.folder)
        finally:
            ssh.close()

    def _running(self) -> bool:
        return self.inventory.exists() and all(
            self.tb.listening(role, "tcp", 22) for role in CONTROL_HOSTS
        )

    def _control_network(self) -> dict[str, str]:
        """Make the lab's control network on a free range; the roles' addresses on it."""
        br = control_bridge(self.tb.prefix)
        routes = json.loads(proc.run(["ip", "-json", "route", "show"]).stdout or "[]")
        used = []
        for r in routes:
            dst = r.get("dst", "")
            if dst in ("default", "") or r.get("dev") == br:
                continue
            net = ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False)
            if net.version == 4:
                used.append((net, f"{dst} (dev {r.get('dev')})"))
        free = [n for n in CONTROL_NETS if not any(n.overlaps(u) for u, _ in used)]
        if not free:
            taken = "; ".join(w for n, w in used if any(n.overlaps(c) for c in CONTROL_NETS))
            raise QuicbedError(
                f"no free control network for the ssh lab: {CONTROL_NETS[0]} to "
                f"{CONTROL_NETS[-1]} all overlap routes of this machine ({taken}); take "
                "other labs down (quicbed testbed down --prefix ...)"
            )
        net = free[0]
        ips = {role: str(net[h]) for role, h in CONTROL_HOSTS.items()}
        proc.run(["ip", "link", "del", br], check=False)
        proc.run(["ip", "link", "add", br, "type", "bridge"])
        proc.run(["ip", "addr", "add", f"{net[254]}/{net.prefixlen}", "dev", br])
        proc.run(["ip", "link", "set", br, "up"])
        for i, (role, ip) in enumerate(ips.items()):
            root_end = f"{self.tb.prefix}c{i}"
            proc.run(
                [
                    "ip",
                    "link",
                    "add",
                    root_end,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "ctl0",
                    "netns",
                    self.tb.ns(role),
                ]
            )
            proc.run(["ip", "link", "set", root_end, "master", br, "up"])
            self.tb.exec(role, ["ip", "addr", "add", f"{ip}/{net.prefixlen}", "dev", "ctl0"])
            self.tb.exec(role, ["ip", "link", "set", "ctl0", "up"])
        return ips

    def _keys(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        for name in ("id_ed25519", "ssh_host_ed25519_key"):
            if not (self.dir / name).exists():
                proc.run(
                    [
                        "ssh-keygen",
                        "-q",
                        "-t",
                        "ed25519",
                        "-N",
                        "",
                        "-C",
                        "quicbed-lab",
                        "-f",
                        str(self.dir / name),
                    ]
                )
        (self.dir / "authorized_keys").write_text((self.dir / "id_ed25519.pub").read_text())

    def _sshd(self, role: str, ip: str) -> None:
        conf = self.dir / f"sshd-{role}.conf"
        conf.write_text(
            f"ListenAddress {ip}\n"
            f"HostKey {self.dir / 'ssh_host_ed25519_key'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\n"
            f"PidFile {self.dir / f'sshd-{role}.pid'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "MaxSessions 50\nMaxStartups 50:30:100\n"
            # a command's shell starts as a nested one, so bash does not read the login's
            # ~/.bashrc for it (bash reads it for sshd only at level 1): a node's plain
            # environment, as on a testbed's image, not this machine's interactive set-up
            # (a pyenv init there cost 90 ms per command, most of each ssh round trip)
            "SetEnv SHLVL=1\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        mounts = cgroup_mounts()
        script = f'{mounts + " && " if mounts else ""}exec "$@"'
        self.tb.spawn(
            role,
            ["sh", "-c", script, "sshd", SSHD, "-D", "-e", "-f", str(conf)],
            log=RPath(self.dir / f"sshd-{role}.log"),
            die_with_parent=False,
        )

    def _write_inventory(self, ips: dict[str, str]) -> None:
        lines = [
            f"# quicbed ssh lab {self.tb.prefix}: the local testbed's namespaces as three "
            "hosts (made by `quicbed testbed up --sshd`)"
        ]
        for role, ip in ips.items():
            work = self.tb.state_dir / "sshlab-work" / role
            exp = {"server": self.tb.server_ip, "client": self.tb.client_ip}.get(role)
            lines += [
                f"[{role}]",
                f"{role} ansible_host={ip} quicbed_workdir={work}"
                + (f" quicbed_exp_ip={exp}" if exp else ""),
            ]
        lines += [
            "[all:vars]",
            "ansible_user=root",
            f"ansible_ssh_private_key_file={self.dir / 'id_ed25519'}",
            f"ansible_ssh_common_args='-o UserKnownHostsFile={self.dir / 'known_hosts'} "
            "-o StrictHostKeyChecking=no'",
            f"quicbed_repo_dir={REPO_ROOT}",
            "ansible_python_interpreter=/usr/bin/python3",
        ]
        tmp = self.inventory.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.inventory)
