"""quicbed on Emulab/CloudLab: the repository-based geni-lib profile.

The portal clones this repository to /local/repository on every node and runs this
script with *its own, maintained* geni-lib to make the request RSpec. Offline (tests,
a laptop) it renders with the PyPI release geni-lib 0.9.9.4, which needs small Python
3.11 fixes applied at install time by ``python tools/genilib_compat.py`` (the
Makefile's ``venv`` target runs it); those fixes serve offline rendering only.

Render offline the way the portal does (parameters from a JSON file):

    GENILIB_PORTAL_MODE=1 GENILIB_PORTAL_PARAMS_PATH=params.json \\
    GENILIB_PORTAL_REQUEST_PATH=request.xml .venv/bin/python profile.py

The profile only declares: three nodes, one bridged link (or, with ``direct_link``,
two nodes on one plain link), parameters validated by name. Everything on the nodes
is configured by Ansible (playbooks/site.yml), started by scripts/bootstrap.sh (see
scripts/README.md). It cannot import quicbed (the portal has only geni-lib), so the
addresses below are kept equal to quicbed.testbed.local's by a test.
"""

from __future__ import annotations

import math
import re
import shlex
from argparse import Namespace

import geni.portal as portal
import geni.rspec.emulab  # noqa: F401  (registers request.BridgedLink)
import geni.rspec.igext as igext
import geni.rspec.pg as pg

# --- names and addresses, defined once ----------------------------------------------
SERVER = "server"  #: role and node name
CLIENT = "client"  #: role and node name
BRIDGE = "bridge"  #: role; the node is named by BridgedLink: BRIDGE_NODE
LINK = "link"  #: the bridged link; geni-lib derives the bridge's and the two halves' names
BRIDGE_NODE = LINK + "_bridge"  #: geni-lib's BridgedLink names its bridge node this way
SERVER_IP = "10.10.1.1"  #: = quicbed.testbed.local.SERVER_IP (a test checks)
CLIENT_IP = "10.10.1.2"  #: = quicbed.testbed.local.CLIENT_IP (a test checks)
NETMASK = "255.255.255.0"  #: /24 = quicbed.testbed.local.PREFIX_LEN (a test checks)

REPOSITORY = "/local/repository"  #: where the portal clones this repository on every node
BOOTSTRAP = REPOSITORY + "/scripts/bootstrap.sh"

# --- what the parameters may be ---------------------------------------------------
RFCV1 = "RFCv1"
Q037 = "Q037"
QUIC_VERSIONS = [
    (RFCV1, "IETF QUIC v1 (RFC 9000) vs TCP/TLS 1.3/HTTP2, Chromium 111 era"),
    (Q037, "Google QUIC v37 (2017) vs TCP/TLS 1.2/HTTP2, Chromium 60 era"),
]

_EMULAB_IMAGE = "urn:publicid:IDN+emulab.net+image+emulab-ops//"
UBUNTU22 = _EMULAB_IMAGE + "UBUNTU22-64-STD"
UBUNTU18 = _EMULAB_IMAGE + "UBUNTU18-64-STD"
FBSD135 = _EMULAB_IMAGE + "FBSD135-64-STD"
FBSD132 = _EMULAB_IMAGE + "FBSD132-64-STD"
AUTO_IMAGE = "auto"
NODE_IMAGES = [
    (AUTO_IMAGE, "The one the QUIC version needs (22.04 for RFCv1, 18.04 for Q037)"),
    (UBUNTU22, "Ubuntu 22.04"),
    (UBUNTU18, "Ubuntu 18.04"),
]
#: The server and client software of each QUIC version is provisioned for one release.
IMAGE_FOR_VERSION = {RFCV1: UBUNTU22, Q037: UBUNTU18}
BRIDGE_IMAGES = [
    (FBSD135, "FreeBSD 13.5"),
    (FBSD132, "FreeBSD 13.2 (the 2024 study's; only where the cluster still has it)"),
]

#: x86-64 hardware types that boot the -64-STD images above. Emulab (Utah): d430
#: (the study's server), d710 (the study's client and bridge), d820, d840; CloudLab
#: types for the same images. Extend this set to use another type.
HARDWARE_TYPES = frozenset(
    {"d430", "d710", "d820", "d840"}
    | {"m510", "xl170", "c6525-25g", "c6525-100g", "d6515"}
    | {"c220g2", "c220g5", "c240g5", "c6320", "c6420"}
)

# Shaping limits: Emulab gives pipe capacity in kbit/s and delay in whole ms per
# direction; the caps catch unit mix-ups (kbit/s typed as Mbit/s, us as ms).
MAX_BANDWIDTH_MBIT = 10000.0
MAX_RTT_MS = 10000.0
SHAPING_DEFAULTS = {"bandwidth_mbit": 100.0, "rtt_ms": 36.0, "loss": 0.0}

# A git ref that is safe on a command line and plausible for git (branch, tag, sha).
_GIT_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")

tourDescription = f"""
**quicbed**: QUIC vs TCP page-load experiments, as code.

Three nodes on one layer-2 segment: `{SERVER}` (Apache HTTP/2 and a QUIC server, the
same files) and `{CLIENT}` (headless Chromium, probes), joined by a transparent
**FreeBSD bridge** node that shapes the link with Dummynet (Emulab's bridged link).
Every node runs `scripts/bootstrap.sh` at boot, which installs a pinned Ansible and
applies `playbooks/site.yml` for its role. Choose the QUIC version (IETF QUIC v1 on
Ubuntu 22.04, or Google QUIC v37 on Ubuntu 18.04); link shaping at instantiation is
optional, quicbed shapes the link itself for every measured condition. For
implementation studies at the NICs' rate, the direct link puts server and client on
one plain link with no bridge node and nothing shaping it.
"""

tourInstructions = f"""
1. Wait until every node has finished provisioning: the file
   `/local/quicbed-bootstrap.done` appears on `{SERVER}`, `{CLIENT}` and the bridge
   `{BRIDGE_NODE}` (a failure leaves `/local/quicbed-bootstrap.failed` with the exit
   code; the log is `/local/logs/quicbed-bootstrap.log`).
2. Run a sweep over SSH, from the `{CLIENT}` node or from your laptop, with the ssh
   testbed and this experiment's manifest (or an Ansible inventory of the three
   nodes), for example:

       quicbed run sweeps/demo.yaml --testbed ssh --hosts <manifest or inventory> --out results/x

3. Build the report from the results folder (`quicbed report results/x`).

The node roles are `{SERVER}`, `{CLIENT}` and `{BRIDGE}`; the experiment addresses are
`{SERVER_IP}` (server) and `{CLIENT_IP}` (client). See `docs/testbed.md` in the
repository for the full workflow.
"""


def bootstrap_command(role: str, quic_version: str, git_ref: str) -> str:
    """The Execute command of one node: the bootstrap script, its role and choices.

    Execute services run as the experiment's user, so the script gets root with sudo.
    Arguments are quoted although the validation already restricts them.
    """
    args = ["sudo", "sh", BOOTSTRAP, role, quic_version]
    if git_ref:
        args.append(git_ref)
    return " ".join(shlex.quote(a) for a in args)


def node_image(params: Namespace) -> str:
    """The Ubuntu image of server and client: the chosen one, or the version's own."""
    if params.node_image == AUTO_IMAGE:
        return IMAGE_FOR_VERSION[params.quic_version]
    return params.node_image


def _label(urn: str) -> str:
    return dict(NODE_IMAGES).get(urn, urn)


def parameter_errors(params: Namespace) -> list[tuple[str, list[str]]]:
    """Every problem with the bound parameters as (message naming the value, [params]).

    Ranges and combinations that legalValues cannot express; checked before anything
    is requested, so the portal shows each message next to its parameters.
    """
    p = params
    errors: list[tuple[str, list[str]]] = []

    need = IMAGE_FOR_VERSION[p.quic_version]
    image = node_image(p)
    if image != need:
        errors.append(
            (
                f"{p.quic_version} needs {_label(need)} on server and client (its servers "
                f"and Chromium build are provisioned for that release), not {_label(image)}",
                ["quic_version", "node_image"],
            )
        )

    for name, role in (("server_type", SERVER), ("client_type", CLIENT), ("bridge_type", BRIDGE)):
        hw = getattr(p, name)
        if hw not in HARDWARE_TYPES:
            errors.append(
                (
                    f"unknown hardware type {hw!r} for the {role}; known x86-64 types: "
                    f"{', '.join(sorted(HARDWARE_TYPES))}",
                    [name],
                )
            )

    if p.direct_link and p.shape_link:
        errors.append(
            (
                "a direct link has no bridge node to shape with: turn shape_link off "
                "(quicbed measures such a link unshaped, --shaper none)",
                ["direct_link", "shape_link"],
            )
        )
    if p.shape_link:
        bw, rtt, loss = p.bandwidth_mbit, p.rtt_ms, p.loss
        if not (math.isfinite(bw) and 0 < bw <= MAX_BANDWIDTH_MBIT):
            errors.append(
                (
                    f"bandwidth must be > 0 and <= {MAX_BANDWIDTH_MBIT:g} Mbit/s (got {bw:g})",
                    ["bandwidth_mbit"],
                )
            )
        elif abs(bw * 1000 - round(bw * 1000)) > 1e-6:
            errors.append(
                (
                    f"bandwidth {bw:g} Mbit/s is not a whole number of kbit/s "
                    "(Emulab shapes in kbit/s)",
                    ["bandwidth_mbit"],
                )
            )
        if not (math.isfinite(rtt) and 0 <= rtt <= MAX_RTT_MS):
            errors.append((f"RTT must be >= 0 and <= {MAX_RTT_MS:g} ms (got {rtt:g})", ["rtt_ms"]))
        elif rtt / 2 != int(rtt / 2):
            errors.append(
                (
                    f"RTT {rtt:g} ms does not split into whole ms per direction "
                    "(Dummynet delays are whole ms): use an even number",
                    ["rtt_ms"],
                )
            )
        if not (math.isfinite(loss) and 0 <= loss < 1):
            errors.append((f"loss must be in [0, 1) (got {loss:g})", ["loss"]))

    ref = p.git_ref
    if ref and (not _GIT_REF.match(ref) or ".." in ref or ref.endswith((".lock", "/", "."))):
        errors.append(
            (
                f"git ref {ref!r} is not a branch, tag or commit name (letters, digits, "
                "'.', '_', '-', '/'; no '..'); leave it empty to keep the profile's own commit",
                ["git_ref"],
            )
        )
    return errors


def shaping_warning(params: Namespace) -> tuple[str, list[str]] | None:
    """Shaping values that were changed but will be ignored because shaping is off."""
    if params.shape_link:
        return None
    changed = [n for n, d in SHAPING_DEFAULTS.items() if getattr(params, n) != d]
    if not changed:
        return None
    return (
        f"{', '.join(changed)} set but link shaping is off, so the bridge starts "
        "unshaped; turn on shape_link to apply them",
        ["shape_link", *changed],
    )


pc = portal.Context()

pc.defineParameter(
    "quic_version",
    "QUIC version",
    portal.ParameterType.STRING,
    RFCV1,
    QUIC_VERSIONS,
    longDescription="Which QUIC (and its era's TCP/TLS/HTTP2 and Chromium) to provision. "
    "It decides the Ubuntu release of server and client: 22.04 for RFCv1, 18.04 for Q037.",
)
pc.defineParameter(
    "shape_link",
    "Shape the link at instantiation",
    portal.ParameterType.BOOLEAN,
    False,
    longDescription="Off: the bridge starts as a plain transparent bridge (quicbed shapes "
    "the link itself for every measured condition). On: Emulab configures the bridge's "
    "Dummynet pipes with the three values below.",
)
pc.defineParameter(
    "direct_link",
    "Direct server-client link (no bridge node)",
    portal.ParameterType.BOOLEAN,
    False,
    longDescription="On: server and client on one plain best-effort link at their NICs' "
    "rate, with no bridge node and nothing shaping it, for implementation studies where "
    "the endpoints must be the bottleneck (goodput and CPU per stack at NIC rate). Off: "
    "the bridged link through a FreeBSD Dummynet node, which quicbed shapes per "
    "condition.",
)
pc.defineParameter(
    "bandwidth_mbit",
    "Bottleneck rate (Mbit/s, each direction)",
    portal.ParameterType.BANDWIDTH,
    SHAPING_DEFAULTS["bandwidth_mbit"],
    longDescription="Used only when shaping at instantiation. "
    f"Must be > 0 and <= {MAX_BANDWIDTH_MBIT:g}.",
)
pc.defineParameter(
    "rtt_ms",
    "Base RTT (ms)",
    portal.ParameterType.LATENCY,
    SHAPING_DEFAULTS["rtt_ms"],
    longDescription="Used only when shaping at instantiation; split evenly over the two "
    "directions, so it must be an even number of ms (the study used 36 and 112).",
)
pc.defineParameter(
    "loss",
    "End-to-end random loss (probability)",
    portal.ParameterType.LOSSRATE,
    SHAPING_DEFAULTS["loss"],
    longDescription="Used only when shaping at instantiation; in [0, 1), split evenly over "
    "the two directions (0.01 end to end = 0.005 each way, as in the study).",
)
pc.defineParameter(
    "git_ref",
    "quicbed git ref to provision",
    portal.ParameterType.STRING,
    "",
    longDescription="Branch, tag or commit of this repository that bootstrap checks out "
    "before running Ansible. Empty: the commit the portal cloned.",
    advanced=True,
)
pc.defineParameter(
    "server_type", "Server hardware type", portal.ParameterType.NODETYPE, "d430", advanced=True
)
pc.defineParameter(
    "client_type", "Client hardware type", portal.ParameterType.NODETYPE, "d710", advanced=True
)
pc.defineParameter(
    "bridge_type", "Bridge hardware type", portal.ParameterType.NODETYPE, "d710", advanced=True
)
pc.defineParameter(
    "node_image",
    "Server and client disk image",
    portal.ParameterType.IMAGE,
    AUTO_IMAGE,
    NODE_IMAGES,
    advanced=True,
)
pc.defineParameter(
    "bridge_image",
    "Bridge disk image (FreeBSD, Dummynet)",
    portal.ParameterType.IMAGE,
    FBSD135,
    BRIDGE_IMAGES,
    advanced=True,
)

params = pc.bindParameters()
for message, names in parameter_errors(params):
    pc.reportError(portal.ParameterError(message, names))
warning = shaping_warning(params)
if warning is not None:
    pc.reportWarning(portal.ParameterWarning(*warning))
pc.verifyParameters()

request = pc.makeRequestRSpec()
tour = igext.Tour()
tour.Description(igext.Tour.MARKDOWN, tourDescription)
tour.Instructions(igext.Tour.MARKDOWN, tourInstructions)
request.addTour(tour)

image = node_image(params)
interfaces = []
for role, address, hardware_type in (
    (SERVER, SERVER_IP, params.server_type),
    (CLIENT, CLIENT_IP, params.client_type),
):
    node = request.RawPC(role)
    node.hardware_type = hardware_type
    node.disk_image = image
    interfaces.append(node.addInterface("if0", pg.IPv4Address(address, NETMASK)))
    node.addService(
        pg.Execute(shell="sh", command=bootstrap_command(role, params.quic_version, params.git_ref))
    )

if params.direct_link:
    # server if0 -- link -- client if0: no bridge node, no shaping properties (so no
    # delay node either), best effort: the NICs' own rate
    direct = request.Link(LINK)
    for iface in interfaces:
        direct.addInterface(iface)
    direct.best_effort = True
else:
    # server if0 -- link_left -- [bridge: Dummynet] -- link_right -- client if0
    link = request.BridgedLink(LINK)
    for iface in interfaces:
        link.addInterface(iface)
    link.bridge.hardware_type = params.bridge_type
    link.bridge.disk_image = params.bridge_image
    link.bridge.addService(
        pg.Execute(
            shell="sh", command=bootstrap_command(BRIDGE, params.quic_version, params.git_ref)
        )
    )
    if params.shape_link:
        link.bandwidth = round(params.bandwidth_mbit * 1000)  # kbit/s, each pipe
        link.latency = int(params.rtt_ms / 2)  # ms, each pipe
        link.plr = params.loss / 2  # each pipe, as quicbed splits end-to-end loss

pc.printRequestRSpec(request)
