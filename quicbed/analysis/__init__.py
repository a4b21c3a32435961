"""From the store: statistics (summaries, comparisons), finding cells, explaining a
load's time. Above results/ (what it reads), below the runner and the report (which
both show what it computes)."""
