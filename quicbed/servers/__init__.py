"""Web servers under test, behind one small adapter each (Apache h2, quic-go h3)."""
