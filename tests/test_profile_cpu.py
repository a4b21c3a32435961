"""``--profile cpu``: perf on each arm's server and client, inferno's folds and flame
graphs, and the component shares by the per-stack maps.

The maps are checked on stacks as perf and inferno name them (frames taken from real
profiles of quicbed's servers); the profile itself is a real bulk cell's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import SharedLinks, reads_well

from quicbed.client import browsers
from quicbed.errors import QuicbedError
from quicbed.profile import check_profile
from quicbed.profile.components import (
    UNCLASSIFIED,
    categories,
    classify_stack,
    compiled,
    maps,
    parse_folded,
    shares,
)
from quicbed.profile.session import INFERNO_VERSION
from quicbed.report.profile import program_map
from quicbed.run.bulk import CLIENT as BULK_CLIENT
from quicbed.servers import stacks

ROOT = Path(__file__).resolve().parents[1]


def test_every_pattern_compiles_and_every_category_is_known() -> None:
    """Each plug-in's own map (its cpu_map_file beside its module) and the kernel's."""
    cats = set(categories())
    assert cats == {"packet_io", "crypto", "connection", "marshalling", "file_io", "other"}
    assert set(maps()) == {"categories", "kernel"}  # no program's map is kept here
    mapped = {
        (role, name): program_map(role, name)
        for role, names in (("server", stacks()), ("client", [*browsers(), BULK_CLIENT]))
        for name in names
    }
    for key, table in mapped.items():
        assert set(table) <= cats, (key, set(table) - cats)
        for pats in table.values():
            for p in pats:
                re.compile(p)
    have = {key for key, table in mapped.items() if table}
    assert have >= {("server", n) for n in ("quic-go", "quiche", "apache", "envoy")}
    assert have >= {("client", n) for n in ("quicbed-bulk", "chromium", "firefox")}


@pytest.mark.parametrize(
    ("kind", "name", "stack", "want"),
    [
        # the leaf decides, from the leaf up
        (
            "server",
            "quic-go",
            "quicbed-h3serve;runtime.goexit;github.com/quic-go/quic-go.(*connection).run;"
            "github.com/quic-go/quic-go.(*packetPacker).appendPacket;"
            "crypto/internal/fips140/aes/gcm.sealAsm",
            "crypto",
        ),
        (
            "server",
            "quic-go",
            "quicbed-h3serve;github.com/quic-go/quic-go.(*connection).run;"
            "github.com/quic-go/quic-go.(*packetPacker).appendPacket;runtime.mallocgc",
            "marshalling",  # the allocator decides nothing while a caller does
        ),
        (
            "server",
            "quic-go",
            "quicbed-h3serve;github.com/quic-go/quic-go.(*oobConn).WritePacket;"
            "syscall.Syscall;entry_SYSCALL_64;__sys_sendmsg;udp_sendmsg;ip_finish_output2",
            "packet_io",
        ),
        (
            "server",
            "quic-go",
            "quicbed-h3serve;github.com/quic-go/quic-go/internal/ackhandler."
            "(*sentPacketHandler).ReceivedAck",
            "connection",
        ),
        ("server", "quic-go", "quicbed-h3serve;runtime.schedule;runtime.findRunnable", "other"),
        ("server", "apache", "apache2;[unknown];[libcrypto.so.3]", "crypto"),
        ("server", "apache", "apache2;[unknown];[libnghttp2.so.14.24.1]", "marshalling"),
        ("server", "apache", "apache2;ap_sendfile;do_sendfile", "file_io"),
        (
            "server",
            "quiche",
            "quicbed-quiche-;quicbed_quiche_server::server::Server::run;"
            "quiche::Connection<F>::send_single",
            "marshalling",
        ),
        (
            "server",
            "quiche",
            "quicbed-quiche-;quiche::Connection<F>::recv;quiche::recovery::Recovery::on_ack_received",
            "connection",
        ),
        ("server", "quiche", "quicbed-quiche-;Server::run;__libc_sendto", "packet_io"),
        (
            "client",
            "quicbed-bulk",
            "quicbed-bulk;net/http.(*http2Framer).ReadFrame",
            "marshalling",
        ),
        ("client", "chromium", "chromium;[unknown];[unknown]", UNCLASSIFIED),
        # Debian's libxul is stripped: its frames say nothing; NSS's libraries do
        ("client", "firefox", "Socket Thread;[libxul.so];[libfreeblpriv3.so]", "crypto"),
        ("client", "firefox", "Socket Thread;[libxul.so];[libnspr4.so]", "packet_io"),
        ("client", "firefox", "firefox-esr;[libxul.so];[libxul.so]", UNCLASSIFIED),
    ],
)
def test_a_stack_is_classified_from_its_leaf_up(
    kind: str, name: str, stack: str, want: str
) -> None:
    assert classify_stack(stack.split(";"), compiled(program_map(kind, name))) == want


def test_shares_are_of_the_sampled_cpu_time() -> None:
    folded = parse_folded(
        "s;udp_sendmsg 3000000\ns;aesni_gcm_enc 1000000\n"
        "s;[unknown] 2000000\ns;udp_sendmsg 2000000\n"
    )
    got = shares(folded, program_map("server", "apache"))
    assert got["sampled_ms"] == 8.0
    assert got["packet_io"] == 5 / 8 and got["crypto"] == 1 / 8 and got[UNCLASSIFIED] == 2 / 8
    assert sum(v for k, v in got.items() if k != "sampled_ms") == pytest.approx(1.0)


def test_the_inferno_the_code_expects_is_the_one_the_role_builds() -> None:
    defaults = yaml.safe_load((ROOT / "roles" / "inferno" / "defaults" / "main.yml").read_text())
    assert defaults["inferno_version"] == INFERNO_VERSION


def test_an_unknown_profile_is_refused_by_name() -> None:
    with pytest.raises(QuicbedError, match="profile: unknown 'gpu' \\(one of none, cpu\\)"):
        check_profile("gpu")


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.browser  # the report check renders its report
def test_a_profiled_bulk_cell_keeps_folds_flame_graphs_and_shares(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """On the suite's shared unshaped link (conftest.SharedLinks; tests/test_unshaped.py's
    bulk cell runs on it too): the flows run as fast as the hosts can, so the profiles
    have CPU to sample."""
    from made_rows import bulk_config, measured_transfer

    from quicbed.model.link import make_condition
    from quicbed.report.build import build
    from quicbed.results.store import Store

    # a flow of a second or more: perf attaches in about 0.1 s
    cfg = bulk_config(make_condition(), size="300MB", shaper="none")
    r = measured_transfer(cfg, tmp_path / "r", shared_links, profile="cpu")
    assert all(run.flow.ok for run in r.runs)
    store = Store(tmp_path / "r")
    (att,) = store.latest_attempts().values()
    rec = att.provenance["profile"]  # type: ignore[index]
    store.close()
    assert rec["event"] == "cpu-clock" and rec["stacks"] == {"h2": "apache", "h3": "quic-go"}
    folder = tmp_path / "r" / rec["folder"]
    for arm in ("h2", "h3"):
        assert (folder / f"{arm}.svg").read_text().lstrip().startswith("<?xml")
        for role in ("server", "client"):
            folded = parse_folded((folder / f"{arm}.{role}.folded").read_text())
            assert sum(folded.values()) > 10e6, (arm, role)  # > 10 ms of CPU sampled
    rep = build(tmp_path / "r")
    reads_well(tmp_path / "r" / "report", "profiled-bulk")
    rows = {(x["arm"], x["role"]): x for x in rep.profile.rows}
    assert set(rows) == {(a, role) for a in ("h2", "h3") for role in ("server", "client")}
    for row in rows.values():
        total = sum(row[c] for c in [*categories(), UNCLASSIFIED])
        assert total == pytest.approx(1.0)
        assert row[UNCLASSIFIED] < 0.5, row  # the maps know most of what runs
    assert rows[("h3", "server")]["crypto"] > 0 and rows[("h3", "server")]["packet_io"] > 0
    html = (tmp_path / "r" / "report" / "index.html").read_text()
    assert "CPU profiles" in html and f"../{rec['folder']}/h3.svg" in html
    assert (tmp_path / "r" / "report" / "profile.csv").exists()
