"""A real headless Chromium for the report's page, driven through Selenium.

Why Selenium with Debian's ``chromium-driver`` rather than the DevTools protocol by hand: the
browser console log (``goog:loggingPrefs``), running a script in the page and screenshots are
each one documented call, the driver comes from the same Debian source package as the browser
(their versions always match), and no protocol code of our own needs keeping. Both programs
are named explicitly, so Selenium never tries to download a driver (the test machines have
no network).
"""

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

NO_BROWSER = "no Chromium: apt-get install chromium chromium-driver, or make browser"


def programs() -> tuple[str, str]:
    """The chromium and chromedriver executables, or a pytest skip that says how to get
    them."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip(NO_BROWSER)
    try:
        import selenium  # noqa: F401 - the dev extra; checked here to skip with the reason
    except ImportError:
        pytest.skip("no selenium: pip install -e '.[dev]'")
    return browser, driver


@contextmanager
def chromium(width: int = 1280, height: int = 1400) -> Iterator:
    """A headless Chromium (a Selenium driver) with a ``width`` x ``height`` window whose
    console messages of every level are kept for ``get_log("browser")``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = programs()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    # --no-sandbox: the tests run as root in containers, where Chromium's sandbox cannot start.
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield session
    finally:
        session.quit()


def screenshot(browser: object, path: str, width: int = 1280, height: int = 1400) -> None:
    """A PNG of the page's top ``width`` x ``height`` CSS pixels at scale 1, whatever the
    window's size (Chromium's DevTools screenshot, through the driver). The docs' picture of
    the quickstart's report is made with it."""
    import base64

    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}
    )
    with open(path, "wb") as out:
        out.write(base64.b64decode(shot["data"]))


# Every <img> with what the browser made of it: loaded size, and how many distinct colours a
# sample of its pixels has once drawn into a canvas (1: a blank image). data: URIs do not
# taint a canvas, so the pixels can be read back.
IMAGES = """
return [...document.images].map((img) => {
  const canvas = document.createElement("canvas");
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const context = canvas.getContext("2d");
  let colours = 0;
  if (img.naturalWidth > 0) {
    context.drawImage(img, 0, 0);
    const pixels = context.getImageData(0, 0, canvas.width, canvas.height).data;
    const seen = new Set();
    for (let i = 0; i < pixels.length; i += 4 * 7) seen.add(pixels.slice(i, i + 4).join());
    colours = seen.size;
  }
  return {alt: img.alt, complete: img.complete, width: img.naturalWidth, colours: colours};
});
"""
