"""Tables of a rendered report as headless chromium lays them out (the report tests)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

_MEASURE = """<script>
document.body.setAttribute("data-measure", JSON.stringify([...document.querySelectorAll(
  "table")].map((t) => [t.scrollWidth, t.parentElement.clientWidth])));
</script></body>"""


def table_widths(html: str, width: int, tmp_path: Path) -> list[list[int]]:
    """Every table's width against its box's, as headless chromium lays the page out in a
    window ``width`` pixels wide."""
    return measured(html, _MEASURE, width, tmp_path)


def measured(html: str, script: str, width: int, tmp_path: Path) -> object:
    """What ``script`` (a ``<script>`` ending in ``</body>`` that sets ``data-measure`` on
    the body) measured on ``html``, laid out by headless chromium ``width`` pixels wide."""
    import html as markup

    page = tmp_path / f"measure-{width}.html"
    page.write_text(html.replace("</body>", script))
    done = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'ud'}",
            f"--window-size={width},1000",
            "--dump-dom",
            page.as_uri(),
        ],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    found = re.search(r'data-measure="([^"]*)"', done.stdout)
    assert found, done.stderr[-2000:]
    return json.loads(markup.unescape(found.group(1)))
