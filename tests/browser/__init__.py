"""The dashboard in headless Chromium (Debian's, driven by Playwright)."""
