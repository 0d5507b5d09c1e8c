"""The report opens in a real browser: headless Chromium (Debian's ``chromium``, which
``.ci/run`` installs) loads ``index.html`` from disk with no network, every plotly figure
renders, and the console shows no message (no JavaScript error or warning)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from test_report import make_run

from automl.report import build_report

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)


@pytest.mark.skipif(BROWSER is None, reason="no Chromium here (.ci/run installs Debian's "
                                           "chromium; apt-get install chromium)")
def test_report_renders_in_headless_chromium_without_console_errors(tmp_path):
    run_dir = make_run(tmp_path, study=True, cv=True, compression=True)
    rep = build_report(run_dir)
    assert len(rep.interactive) == 6
    proc = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=20000", "--dump-dom", rep.index.resolve().as_uri()],
        capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln]
    assert console == [], console
    dom = proc.stdout
    # plotly replaced each figure's empty <div> with its drawing: one container, SVG layers
    assert len(re.findall(r'class="plot-container plotly"', dom)) == len(rep.interactive)
    assert len(re.findall(r'class="main-svg"', dom)) >= 2 * len(rep.interactive)
    for name in rep.interactive:
        assert re.search(rf'id="{name}" class="plotly-graph-div js-plotly-plot"', dom), name
