"""CPU profiles on request (``--profile cpu``): where each arm's server and client spend
their CPU, as flame graphs and as the implementation study's component shares.

``none`` (the default) profiles nothing; ``cpu`` samples the arm's server and client
processes with ``perf record -e cpu-clock -g`` (a software clock event: this kernel,
like many VMs', has no hardware PMU) over the measured loads or flows, folds the
stacks with inferno and classifies them (quicbed.profile.components). Like
``--traces``, a profile observes the loads: it is not part of a cell's identity, it is
recorded in the attempt's provenance.
"""

from __future__ import annotations

from quicbed.errors import QuicbedError

PROFILES = ("none", "cpu")
#: the perf event every profile samples, and how often (per CPU, per second)
EVENT = "cpu-clock"
FREQUENCY_HZ = 499


def check_profile(name: str) -> str:
    if name not in PROFILES:
        raise QuicbedError(f"profile: unknown {name!r} (one of {', '.join(PROFILES)})")
    return name
