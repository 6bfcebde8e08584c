"""What both browser tests need: Debian's chromium, its driver and selenium, or one line saying
what to install; and a headless chromium driven through selenium."""
from __future__ import annotations

import shutil

import pytest

INSTALL = ("apt-get install -y chromium chromium-driver (Debian/Ubuntu) and "
           "pip install -r requirements-dev.txt (selenium)")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
CHROMEDRIVER = shutil.which("chromedriver")


def skip_without_browser(what: str) -> None:
    """Skip the calling test module (``what``: its name in the line) unless chromium, chromedriver
    and selenium are all installed."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        selenium = None
    missing = [name for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER),
                                        ("selenium", selenium)) if not found]
    if missing:
        pytest.skip(f"{what} skipped: no {', '.join(missing)}; to run it: {INSTALL}", allow_module_level=True)


def headless_chromium(width: int, script_timeout_s: float):
    """A headless chromium window ``width`` x 1000 px (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(script_timeout_s)
    return driver
