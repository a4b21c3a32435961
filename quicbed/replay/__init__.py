"""Real pages replayed on the testbed: archives, their import and the page models."""
