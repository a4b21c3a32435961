"""The browser side: headless Chromium driven over CDP, HARs, and load verification."""
