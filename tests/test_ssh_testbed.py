"""The ssh testbed, for real: the local namespaces with sshd, driven over SSH.

What runs on Emulab nodes is run here against three sshd "hosts" (an ssh lab): the
same commands, file transfers, daemons, receipt and cell. What cannot run here
(FreeBSD's ipfw, Emulab's manifest from a live experiment) is checked as far as it
goes: the Dummynet shaper refuses a bridge without Dummynet and drives a stand-in
ipfw over SSH all or nothing; a saved manifest is parsed.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SharedLinks

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.results import provenance, software_cache
from quicbed.results.software_cache import SoftwareCache
from quicbed.results.store import Store
from quicbed.run.cell import run_cell
from quicbed.shapers import get_shaper
from quicbed.shapers.dummynet import PIPES_FILE, DummynetShaper
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.lifecycle import RPath
from quicbed.testbed.local import LocalTestbed
from quicbed.testbed.ssh import SshTestbed
from quicbed.testbed.sshlab import CONTROL_NETS, SshLab, control_bridge


def _quicbed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quicbed", *args], capture_output=True, text=True, timeout=300
    )


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[str, Path]]:
    """An ssh lab made and removed by the CLI, proven gone afterwards."""
    import secrets

    prefix = "s" + secrets.token_hex(3)
    up = _quicbed("testbed", "up", "--sshd", "--prefix", prefix)
    assert up.returncode == 0, up.stderr
    inventory = SshLab(prefix).inventory
    assert inventory.exists()
    ssh = SshTestbed.load(inventory)
    folder = ssh.cpu.folder  # where the ssh testbed's CPU groups go: this machine's tree
    ssh.close()
    try:
        yield prefix, inventory
    finally:
        down = _quicbed("testbed", "down", "--prefix", prefix)
        assert down.returncode == 0, down.stderr
        assert LocalTestbed(prefix).leftovers() == []
        assert not _link_exists(control_bridge(prefix))
        # the cells over ssh made CPU groups in this machine's control groups, not in
        # the lab's namespaces: the lab's down clears them first
        from quicbed.roles import cgroups

        left = [m for m, _, _ in cgroups.mounts() if Path(m, cgroups.TOP, folder).exists()]
        assert left == [], f"the ssh testbed's CPU groups ({folder}) left in {left}"


@pytest.fixture
def tb(lab: tuple[str, Path]) -> Iterator[SshTestbed]:
    t = SshTestbed.load(lab[1])
    yield t
    t.close()


@pytest.mark.root
@pytest.mark.slow
def test_the_lab_is_three_reachable_hosts(lab: tuple[str, Path], tb: SshTestbed) -> None:
    status = tb.status()
    assert status["complete"], status
    assert tb.describe()["nodes"]["server"]["exp_ip"] == "10.10.1.1"
    assert tb.server_ip == "10.10.1.1" and tb.client_ip == "10.10.1.2"
    assert tb.experiment_interface("client", tb.client_ip) == "eth0"
    assert tb.shares_clock()  # one kernel: one-way delays are judged
    # each role has its own work folder: a file not sent to a role is not there
    assert len({tb.workdir(r) for r in ("server", "client", "bridge")}) == 3
    cli = _quicbed("testbed", "status", "--testbed", "ssh", "--hosts", str(lab[1]), "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["complete"] is True


@pytest.mark.root
@pytest.mark.slow
def test_files_and_daemons(tb: SshTestbed, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "x.bin").write_bytes(bytes(range(256)) * 100)
    dst = tb.workdir("server") / "t" / "tree"
    tb.push("server", tree, dst)
    assert tb.read_bytes("server", dst / "a" / "x.bin") == bytes(range(256)) * 100
    assert tb.read_bytes("server", dst / "a" / "x.bin", 25600 - 3) == bytes([253, 254, 255])
    assert not tb.has_file("client", tb.workdir("client") / "t" / "tree")  # sent to one host
    key = tmp_path / "k"
    key.write_text("secret")
    tb.push("server", key, tb.workdir("server") / "t" / "k", mode=0o600)
    mode = tb.exec("server", ["stat", "-c", "%a", str(tb.workdir("server") / "t" / "k")]).stdout
    assert mode.strip() == "600"
    tb.write_text("client", tb.workdir("client") / "t" / "f.txt", "one\ntwo\n")
    assert tb.size("client", tb.workdir("client") / "t" / "f.txt") == 8
    assert tb.read_bytes("client", RPath("/nonexistent/file")) == b""
    # the outbox comes home into the local folder and is emptied there
    box = tb.outbox("client", tmp_path / "home")
    tb.write_text("client", box / "log.txt", "hello")
    tb.collect("client", tmp_path / "home")
    assert (tmp_path / "home" / "log.txt").read_text() == "hello"
    assert not tb.has_file("client", box)
    # a daemon: runs, logs, stops by PID
    log = tb.workdir("bridge") / "t" / "sleep.log"
    p = tb.spawn(
        "bridge", ["sh", "-c", "echo started $QB_X; exec sleep 300"], log=log, env={"QB_X": "42"}
    )
    assert p.poll() is None
    assert tb.read_text("bridge", log).startswith("started 42")
    p.stop()
    assert p.poll() is not None and not tb.alive("bridge", p.pid)
    for role in ("server", "client", "bridge"):
        tb.remove(role, tb.workdir(role) / "t")


@pytest.mark.root
@pytest.mark.slow
def test_a_crashed_run_leaves_nothing_running_after_up(lab: tuple[str, Path]) -> None:
    """A daemon whose controller died (no stop) is stopped by the next ``up``."""
    first = SshTestbed.load(lab[1])
    p = first.spawn("server", ["sleep", "300"])
    first.close()  # the controller "dies": nobody stops p
    second = SshTestbed.load(lab[1])
    try:
        assert second.alive("server", p.pid)
        second.up()
        assert not second.alive("server", p.pid)
    finally:
        second.close()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_cell_over_ssh_stores_what_a_local_cell_stores(
    shared_links: SharedLinks, tb: SshTestbed, tmp_path: Path
) -> None:
    """The same cell on the ssh lab (its own receipt) and on the local testbed (the
    suite's kept link of that condition, as a user's kept link would serve it)."""
    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=36), page="10kb", runs=2, warmup=1
    )
    remote = run_cell(cfg, tmp_path / "ssh", testbed=tb, receipt_tcp_seconds=1)
    local = shared_links.run_cell(cfg, tmp_path / "local")
    for r in (remote, local):
        assert r.status == "done", r.problem
        assert r.invalid == {}, r.invalid
        assert (
            r.verified["h3"]["protocols"] == ["h3"]
            and r.verified["h3"]["used_0rtt"] == r.verified["h3"]["measured"] >= 2
        )
        assert (
            r.verified["h2"]["protocols"] == ["h2"]
            and r.verified["h2"]["tls_resumed"] == r.verified["h2"]["measured"] >= 2
        )
    assert remote.cell_id == local.cell_id  # the same cell, measured on two testbeds

    def stored(root: Path) -> tuple[set[str], set[str], set[str], list[str], dict]:
        store = Store(root)
        att = store.attempt(remote.cell_id)
        runs = store.runs(remote.cell_id)
        store.close()
        filled = {k for r in runs for k, v in r.model_dump().items() if v is not None}
        files = {p.name for p in (root / "logs").rglob("*") if p.is_file()}
        hars = {p.name for p in (root / "hars").rglob("*.har.gz")}
        checks = [c["name"] for c in att.receipt["checks"] if c["passed"] is not None]
        return filled, files, hars, checks, att.provenance

    r_filled, r_files, r_hars, r_checks, r_prov = stored(tmp_path / "ssh")
    l_filled, l_files, l_hars, l_checks, l_prov = stored(tmp_path / "local")
    assert r_filled == l_filled
    assert r_files == l_files, r_files ^ l_files  # server and browser logs came home
    assert {"access.log", "h3server.jsonl", "chromium-h3.log"} <= r_files
    assert r_hars == l_hars and len(r_hars) == 6
    assert r_checks == l_checks
    assert r_prov["testbed"]["kind"] == "ssh" and l_prov["testbed"]["kind"] == "local"
    assert set(r_prov["nodes"]) == {"server", "client", "bridge"}
    assert r_prov["software"]["chromium"] == l_prov["software"]["chromium"]
    # the servers served from the server host's own folder, the browser ran in the client's
    assert tb.has_file("server", tb.workdir("server") / "www" / "10kb" / "index.html")
    assert tb.has_file("client", tb.workdir("client") / "profile-h3")
    assert not tb.has_file("client", tb.workdir("client") / "www")
    assert tb._recorded("server") == [] and tb._recorded("client") == []  # all stopped


@pytest.mark.root
@pytest.mark.slow
def test_software_records_are_kept_per_host_over_ssh(
    tb: SshTestbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each component's record is kept under the host that answered it, and given again
    while its files there are the same: the second record over ssh probes nothing, and
    is the first (quicbed.results.software_cache asks each host in one command)."""
    monkeypatch.setattr(software_cache, "RACY_S", -3600.0)  # the lab's files may be new
    first_cache = SoftwareCache(tmp_path / "records.json")
    first = provenance.software(tb, cache=first_cache)
    second_cache = SoftwareCache(tmp_path / "records.json")
    assert provenance.software(tb, cache=second_cache) == first
    assert set(first_cache.outcomes.values()) == {"probed"}
    assert set(second_cache.outcomes.values()) == {"kept"}
    hosts = {key.split("\t")[0] for key in second_cache.outcomes}
    assert hosts == {tb.name(role) for role in ("server", "client", "bridge")}
    assert first["quicbed-linkem"]["sha256"]  # found on the bridge


@pytest.mark.root
@pytest.mark.slow
def test_cpu_per_role_is_read_on_each_node(tb: SshTestbed, tmp_path: Path) -> None:
    """A bulk cell over ssh: every flow's server, client and emulator CPU read from the
    groups on their own nodes (through the node-side module, with the node's Python);
    the nodes' groups outlive the cell as the hosts' work folders do, and go with
    ``down``."""
    from quicbed.roles import cgroups

    assert set(tb.cpu.describe().values()) == {"cgroup1 /sys/fs/cgroup/cpuacct"}
    top = Path("/sys/fs/cgroup/cpuacct", cgroups.TOP, tb.cpu.folder)
    try:
        _cpu_over_ssh(tb, tmp_path, top)
    finally:
        tb.down()
    assert not top.exists()


def _cpu_over_ssh(tb: SshTestbed, tmp_path: Path, top: Path) -> None:
    from quicbed.cli.bulk import run_bulk

    for _ in range(3):  # a receipt spoiled on a busy machine: measured again, as a sweep would
        try:
            r = run_bulk(
                make_condition(rate_mbit=20, rtt_ms=10),
                tmp_path / "r",
                arms=["h2", "h3"],
                reps=2,
                size="2MB",
                testbed=tb,
                receipt_tcp_seconds=1,
            )
            break
        except QuicbedError as exc:
            if "out of tolerance" not in str(exc):
                raise
    for run in r.runs:
        cpu = run.flow.cpu
        assert cpu is not None and cpu.missing == {}, cpu
        assert all(t.total_ms > 0 for t in cpu.roles.values()), cpu
    assert {p.name for p in top.iterdir() if p.is_dir()} == {
        "server-h2",
        "server-h3",
        "client-h2",
        "client-h3",
        "emulator",
    }
    removed = tb.down()
    assert any(x.startswith(f"cgroups {top} (") for x in removed), removed
    assert not top.exists()


@pytest.mark.root
@pytest.mark.slow
def test_dummynet_refuses_a_bridge_without_it(tb: SshTestbed) -> None:
    with pytest.raises(QuicbedError, match="has no ipfw"):
        get_shaper("dummynet", tb)
    assert get_shaper("auto", tb).name in ("netem", "userspace")  # a Linux bridge


@pytest.mark.root
@pytest.mark.slow
def test_dummynet_over_ssh_is_all_or_nothing(tb: SshTestbed, tmp_path: Path) -> None:
    """The Dummynet path over SSH with a stand-in for FreeBSD's ``ipfw`` (Linux has none):
    auto picks Dummynet where the bridge has ipfw and pipes.json, the pipe lines arrive
    as generated, and a pipe that refuses its configuration leaves both pipes reset,
    never one shaped and one not. (The stand-in is on this machine's PATH for the test
    only; the lab's hosts share this machine's files.)"""
    ipfw, pipes = Path("/usr/local/sbin/ipfw"), Path(str(PIPES_FILE))
    if ipfw.exists() or pipes.exists():
        pytest.skip(f"this machine has its own {ipfw if ipfw.exists() else pipes}")
    log = tmp_path / "ipfw.log"
    ipfw.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        'case "$*" in "pipe 60120 config bw 13Mbit/s"*) '
        'echo "ipfw: pipe 60120 refused" >&2; exit 71;; esac\n'
    )
    ipfw.chmod(0o755)
    made = not pipes.parent.exists()
    pipes.parent.mkdir(parents=True, exist_ok=True)
    pipes.write_text(json.dumps({"format": 1, "pipes": {"down": 60110, "up": 60120}}))
    try:
        shaper = get_shaper("auto", tb)
        assert shaper.name == "dummynet"
        good = make_condition(rate_mbit=20, rtt_ms=36, loss_pct=1)
        shaper.apply(tb, good)
        reset = ["pipe 60110 config bw 0 delay 0", "pipe 60120 config bw 0 delay 0"]
        assert log.read_text().splitlines() == reset + [
            x.removeprefix("ipfw ")
            for x in DummynetShaper.commands(good, {"down": 60110, "up": 60120})
        ]
        log.unlink()
        with pytest.raises(QuicbedError, match="pipe 60120 refused"):
            shaper.apply(tb, make_condition(rate_mbit=13, rtt_ms=36))
        sent = log.read_text().splitlines()
        assert sent[0:2] == reset and sent[2].startswith("pipe 60110 config bw 13Mbit/s")
        assert sent[-2:] == reset, "a refused pipe must leave both pipes reset"
    finally:
        ipfw.unlink()
        pipes.unlink()
        if made:
            pipes.parent.rmdir()


@pytest.mark.root
@pytest.mark.slow
def test_bad_hosts_files_name_the_problem(lab: tuple[str, Path], tmp_path: Path) -> None:
    inv = lab[1].read_text()
    no_bridge = tmp_path / "no-bridge.ini"
    no_bridge.write_text(inv.replace("[bridge]\n", "[other]\n"))
    with pytest.raises(QuicbedError, match="group 'bridge' must hold exactly one host"):
        SshTestbed.load(no_bridge)
    missing_key = tmp_path / "missing-key.ini"
    missing_key.write_text(inv.replace("sshlab/id_ed25519", "sshlab/nope"))
    with pytest.raises(QuicbedError, match=r"SSH key .*nope does not exist"):
        SshTestbed.load(missing_key)
    # the lab takes the first control network free on this machine (10.10.0.0/24 unless
    # the machine routes it already, as some CI runners do)
    server = SshTestbed.load(lab[1]).nodes["server"].host
    assert server.endswith(".0.1")
    refused = tmp_path / "refused.ini"
    refused.write_text(
        inv.replace(f"ansible_host={server} ", f"ansible_host={server} ansible_port=2222 ")
    )
    t = SshTestbed.load(refused)
    unreachable = rf"cannot reach server \(root@{re.escape(server)}:2222\)"
    with pytest.raises(QuicbedError, match=unreachable):
        t.up()
    t.close()
    with pytest.raises(QuicbedError, match="does not exist"):
        SshTestbed.load(tmp_path / "absent.ini")
    # a second lab takes the next free control network (several testbeds, one sweep)
    other = lab[0][:-1] + "z"
    try:
        second = _quicbed("testbed", "up", "--sshd", "--prefix", other)
        assert second.returncode == 0, second.stderr
        t2 = SshTestbed.load(SshLab(other).inventory)
        net = ipaddress.ip_network(f"{server}/24", strict=False)
        second_net = ipaddress.ip_network(f"{t2.nodes['server'].host}/24", strict=False)
        assert second_net != net and second_net in CONTROL_NETS, second_net
        assert t2.status()["complete"]
        t2.close()
    finally:
        assert _quicbed("testbed", "down", "--prefix", other).returncode == 0
    assert LocalTestbed(other).leftovers() == [] and not _link_exists(control_bridge(other))
    cli = _quicbed("cell", "--testbed", "ssh", "--page", "5kb", "--out", str(tmp_path / "o"))
    assert cli.returncode == 2 and "--testbed ssh needs --hosts" in cli.stderr
    cli = _quicbed("link", "check", "--hosts", str(lab[1]))
    assert cli.returncode == 2 and "go with --testbed ssh" in cli.stderr


MANIFEST = """<?xml version="1.0" encoding="UTF-8"?>
<rspec xmlns="http://www.geni.net/resources/rspec/3" type="manifest">
  <node client_id="server" component_id="urn:publicid:IDN+emulab.net+node+pc601">
    <hardware_type name="d430"/>
    <interface client_id="server:if0"><ip address="10.10.1.1" type="ipv4"/></interface>
    <services>
      <login authentication="ssh-keys" hostname="pc601.emulab.net" port="22" username="alice"/>
      <login authentication="ssh-keys" hostname="pc601.emulab.net" port="22" username="bob"/>
    </services>
    <host name="server.exp.proj.emulab.net" ipv4="155.98.36.1"/>
  </node>
  <node client_id="client">
    <interface client_id="client:if0"><ip address="10.10.1.2" type="ipv4"/></interface>
    <services><login hostname="pc702.emulab.net" port="22" username="alice"/></services>
  </node>
  <node client_id="link_bridge">
    <services><login hostname="pc703.emulab.net" port="2200" username="alice"/></services>
  </node>
</rspec>
"""


def test_a_portal_manifest_names_the_hosts(tmp_path: Path) -> None:
    m = tmp_path / "manifest.xml"
    m.write_text(MANIFEST)
    t = SshTestbed.load(m, user="bob")
    assert t.nodes["server"].host == "pc601.emulab.net" and t.nodes["server"].user == "bob"
    assert t.nodes["server"].hardware_type == "d430" and t.nodes["client"].hardware_type is None
    assert t.describe()["nodes"]["server"]["hardware_type"] == "d430"
    assert t.nodes["bridge"].port == 2200 and t.nodes["bridge"].exp_ip is None
    assert t.server_ip == "10.10.1.1" and t.client_ip == "10.10.1.2"
    assert all(n.sudo for n in t.nodes.values())  # Emulab users are not root
    assert t.argv("server", ["sysctl", "-n", "x"])[-1] == "sudo -n sysctl -n x"
    request = tmp_path / "request.xml"
    request.write_text(MANIFEST.replace('type="manifest"', 'type="request"'))
    with pytest.raises(QuicbedError, match="give the experiment's manifest"):
        SshTestbed.load(request)
    no_bridge = tmp_path / "nobridge.xml"
    no_bridge.write_text(MANIFEST.replace("link_bridge", "other"))
    with pytest.raises(QuicbedError, match="no node 'link_bridge or bridge'"):
        SshTestbed.load(no_bridge)


def test_a_sweep_needs_hosts_and_a_known_testbed(tmp_path: Path) -> None:
    """A spec that says ssh cannot run without hosts, an unknown testbed is named, and
    nothing is written. (A sweep over hosts, its stored spec and its report's rerun
    command: tests/test_two_testbeds.py.)"""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        "format: 1\nname: tiny-ssh\nreceipt_tcp_seconds: 1\ndefaults: {runs: 2, warmup: 1}\n"
        "scenarios:\n  base: {rate: [null], rtt: [10], pages: [5kb]}\n"
    )
    # a spec that says ssh cannot run without hosts, and nothing is written
    ssh_spec = tmp_path / "ssh.yaml"
    ssh_spec.write_text("testbed: ssh\n" + spec.read_text())
    bad = _quicbed("run", str(ssh_spec), "--out", str(tmp_path / "again"))
    assert bad.returncode == 2 and "--testbed ssh needs --hosts" in bad.stderr
    odd = _quicbed("run", str(spec), "--testbed", "emulab", "--out", str(tmp_path / "again"))
    assert odd.returncode == 2 and "--testbed: unknown 'emulab'" in odd.stderr
    assert not (tmp_path / "again").exists()
