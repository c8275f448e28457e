"""The report's page in a real headless Chromium: every plot loads and has drawn something,
on the page and in a screenshot, and the browser logs no error. Skipped, with the reason, on
a machine without Chromium (``make browser`` installs it from the Debian packages)."""

import pytest
from PIL import Image

from ascent.report import write_report
from ascent.report.panels import PANELS
from tests.report.browser import IMAGES, chromium
from tests.report.run_dirs import full_run

pytestmark = pytest.mark.integration

# Where each plot is on the screen, in CSS pixels (the window's scale is 1).
PLACES = """
return [...document.images].map((img) => {
  const box = img.getBoundingClientRect();
  return {alt: img.alt, left: box.left, top: box.top, right: box.right, bottom: box.bottom};
});
"""


def test_the_plots_draw_in_chromium(tmp_path):
    page = write_report(full_run(tmp_path / "run"))
    with chromium(width=1280, height=1400) as browser:
        browser.get(page.as_uri())
        plots = browser.execute_script(IMAGES)
        places = browser.execute_script(PLACES)
        screenshot = tmp_path / "report.png"
        assert browser.save_screenshot(str(screenshot))
        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    assert len(plots) == len(PANELS) - 1  # every panel but validation_other
    for plot in plots:  # decoded, and more than a background colour
        assert plot["complete"] and plot["width"] > 0, plot
        assert plot["colours"] > 20, plot
    shot = Image.open(screenshot).convert("RGB")
    visible = [p for p in places if p["bottom"] <= shot.height and p["right"] <= shot.width]
    assert visible, f"no plot within the first {shot.height} pixels: {places}"
    for place in visible:  # painted on the screen, not only decoded
        box = tuple(round(place[side]) for side in ("left", "top", "right", "bottom"))
        colours = shot.crop(box).getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 20, place
