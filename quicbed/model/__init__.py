"""The model at the bottom: what a link is, as data, with no I/O (quicbed.model.link).
Everything that shapes, measures or reports a link reads it from here."""
