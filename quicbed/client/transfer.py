"""The client of transfer cells (bulk and compete): quicbed-bulk (go/cmd/quicbed-bulk),
Go's net/http over TCP+TLS for h2 and quic-go's HTTP/3 client for h3.

A page cell's client is its arm's browser, which declares what it can advertise itself
(:attr:`quicbed.client.browser.Browser.transport_support`); a transfer cell's client is
this one program whatever the arm, so what it can advertise is declared here, once, for
the spec to check an arm's ``client_`` keys before anything runs.
"""

from __future__ import annotations

from quicbed.settings.tparams import AUTOTUNE, STREAM_DATA, ClientSupport

#: what quic-go advertises whatever it is asked (internal/protocol's constants, which
#: connection.go puts into its transport parameters), client and server alike: the
#: quic-go server (quicbed.servers.quic_go) refuses the same keys for the same reasons
QUIC_GO_CONSTANTS = {
    "max_udp_payload_size": "advertises quic-go's constant MaxPacketBufferSize, 1452 bytes",
    "max_ack_delay": "advertises quic-go's constant 26 ms (MaxAckDelay 25 ms + 1 ms "
    "timer granularity)",
    "ack_delay_exponent": "advertises quic-go's constant AckDelayExponent, 3",
    "active_connection_id_limit": "advertises quic-go's constant MaxActiveConnectionIDs, 4",
}

#: quicbed-bulk: quic-go's client has one stream window for the three stream-data limits
BULK_CLIENT = ClientSupport(
    "quicbed-bulk (quic-go's client)",
    (
        "initial_max_data",
        *STREAM_DATA,
        "initial_max_streams_bidi",
        "initial_max_streams_uni",
        "max_idle_timeout",
        AUTOTUNE,
    ),
    QUIC_GO_CONSTANTS,
    one_stream_window=True,
    zero_is_default=("initial_max_data", *STREAM_DATA, "max_idle_timeout"),
)

#: the client of each kind of transfer cell
TRANSFER_CLIENTS: dict[str, ClientSupport] = {"bulk": BULK_CLIENT, "compete": BULK_CLIENT}
