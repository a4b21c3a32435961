"""Record how long a finished sweep took, for the estimate's check (tests/test_estimate.py).

    .venv/bin/python tools/record_duration.py RESULTS_FOLDER [...]

writes ``benchmarks/durations/<spec name>[-shard-<i>of<K>]-<date>.json`` per folder
(quicbed.run.duration.measured: the spec as it ran, its wall time, its waits for a
quiet host, the git commit) and prints today's estimate beside it. Record runs that ran alone on the
machine: a run slowed by a build or a test beside it is no evidence of the estimate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from quicbed.run.duration import compare, measured

OUT = Path(__file__).resolve().parent.parent / "benchmarks" / "durations"


def main(folders: list[str]) -> int:
    if not folders:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for folder in folders:
        rec = measured(Path(folder))
        shard = f"-shard-{rec['shard'].replace('/', 'of')}" if rec.get("shard") else ""
        path = OUT / f"{rec['name']}{shard}-{rec['began'][:10]}.json"
        path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        c = compare(rec)
        print(
            f"{path.name}: {c['cells']} cells, took {c['took_min']} min, "
            f"estimate {c['estimate_min']} min (x{c['ratio']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
