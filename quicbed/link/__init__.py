"""The link made real: shaped, tuned and proven (its receipt, spot checks and the proof of
each load); its model is quicbed.model.link, its shapers quicbed.shapers."""
