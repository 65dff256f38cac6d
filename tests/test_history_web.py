"""`abtest history serve` in a real headless Chromium (Debian's chromium + chromedriver, driven by Selenium):
the page loads plotly.js from the server, the series has one point per build, the change point is marked at
the step build, and clicking it opens the compare report between the builds on both sides."""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest
from history_data import label, make_history

from abtest.commands.history import compare_report
from abtest.history.db import open_db
from abtest.history.detect import detect
from abtest.history.ingest import add
from abtest.history.web import Server, create_app

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("web")
    make_history(root / "store")
    engine = open_db(root / "h.sqlite")
    add(engine, [root / "store"], with_trace=False)
    (cp,) = detect(engine, metrics=("power.Total",))
    server = Server(create_app(engine, report=compare_report)).start()
    try:
        yield server, cp
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def test_api(served):
    server, _ = served
    with urllib.request.urlopen(f"{server.url}/api/points?device=lab-dut&workload=video&metric=power.Total") as r:
        doc = json.load(r)
    assert len(doc["points"]) == 30 and doc["series"]["unit"] == "mW"
    assert all(p["n"] == 3 and p["ci_low"] < p["value"] < p["ci_high"] for p in doc["points"])
    assert [c["after"]["label"] for c in doc["change_points"]] == [label(20)]


def test_dashboard_in_chromium(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server, cp = served
    browser.get(f"{server.url}/?device=lab-dut&workload=video&metric=power.Total")
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "status").get_attribute("data-ready") == "1")
    assert browser.execute_script("return typeof Plotly") == "object"  # served from the plotly wheel
    data = browser.execute_script(
        "const g = document.getElementById('chart');return g.data.map(t => ({x: t.x, n: t.x.length}));"
    )
    assert data[0]["n"] == 30 and data[1]["x"] == [label(20)]
    drawn = browser.find_elements(By.CSS_SELECTOR, "#chart .scatterlayer .trace:nth-of-type(1) .points .point")
    assert len(drawn) == 30  # the SVG shows one marker per build
    marks = browser.find_elements(By.CSS_SELECTOR, "#chart .scatterlayer .trace:nth-of-type(2) .points .point")
    assert len(marks) == 1
    assert "30 builds, 1 change point(s)" in browser.find_element(By.ID, "status").text
    assert label(19) in browser.find_element(By.CSS_SELECTOR, "#changepoints tbody tr").text
    browser.find_element(By.ID, f"cp-{cp.id}").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "report-title"))
    title = browser.find_element(By.ID, "report-title").text
    assert "power.Total" in title and f"{label(19)} → {label(20)}" in title
    assert f"abtest compare: {label(20)} vs {label(19)}" in browser.page_source  # the compare report itself
