"""How the project starts Debian's Chromium headless (tests, screenshots, benchmarks).

The flags keep Chromium off the network: on a machine with a closed network its background
services otherwise try, and fail, to reach Google's hosts at every start.
"""

from pathlib import Path

#: Debian's ``chromium`` package; Playwright is pointed at it and never downloads a browser.
CHROMIUM = Path("/usr/bin/chromium")

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
