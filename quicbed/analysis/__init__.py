"""From the store: statistics, finding cells, explaining a load's time."""
