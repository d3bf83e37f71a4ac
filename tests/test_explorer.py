"""The neuron explorer: pure parts (histogram, extremes, escaping) and the site in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import polars as pl
import pytest

from wneurons.report.explorer import embed_json, index_html, neuron_html, write_explorer
from wneurons.report.explorer_records import extreme_positions, listed_neurons, sign_histogram, top_tokens

EVIL = "<script>window.__pwned = 1</script>"


def test_embedded_json_cannot_close_its_script_element():
    text = embed_json([{"token": "</script><script>alert(1)</script>", "amp": "a&b"}])
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == [{"token": "</script><script>alert(1)</script>", "amp": "a&b"}]


def test_sign_histogram_splits_by_raw_sign_and_integrates_to_one():
    rng = np.random.default_rng(0)
    y = np.concatenate([rng.normal(-2.0, 0.3, 3000), rng.normal(1.0, 1.0, 7000)])
    h = sign_histogram(y, bins=60)
    assert sum(h["negative"]) == int((y < 0).sum())
    assert sum(h["positive"]) == int((y >= 0).sum())
    width = h["edges"][1] - h["edges"][0]
    total = (np.add(h["negative"], h["positive"]) * h["density_scale"] * width).sum()
    assert total == pytest.approx(1.0)
    assert h["zero_at"] == pytest.approx(-y.mean() / y.std())
    with pytest.raises(ValueError, match="constant"):
        sign_histogram(np.ones(10))


def test_extreme_positions_are_ordered():
    y = np.array([0.5, -3.0, 2.0, -1.0, 7.0, 0.0])
    low, high = extreme_positions(y, 2)
    assert low.tolist() == [1, 3] and high.tolist() == [4, 2]


def test_listed_neurons_ranks_within_each_layer():
    stats = pl.DataFrame(
        {
            "layer": [0, 0, 0, 1, 1, 1],
            "neuron": [0, 1, 2, 0, 1, 2],
            "wd": [0.1, 0.5, float("nan"), 0.3, 0.2, 0.9],
            "md": [3.0, 1.0, 2.0, 1.0, 5.0, 2.0],
        }
    )
    listed = listed_neurons(stats, 2, None)
    assert listed.select("layer", "neuron", "wd_rank").rows() == [(0, 1, 1), (0, 0, 2), (1, 2, 1), (1, 0, 2)]
    assert listed.filter(pl.col("layer") == 1)["md_rank"].to_list() == [2, 3]


def test_every_neuron_of_the_clamped_sets_is_listed():
    """The explorer lists the W set at each percent (the clamp's own selection), not only the top few."""
    from wneurons.core.selection import top_percent_indices

    rng = np.random.default_rng(0)
    k = 400
    stats = pl.DataFrame({"layer": np.repeat([0, 1], k), "neuron": np.tile(np.arange(k), 2),
                          "wd": rng.random(2 * k), "md": rng.random(2 * k)})  # fmt: skip
    listed = listed_neurons(stats, 1, None, clamped_percents=[1.0, 5.0], extra=[(1, 7)])
    for layer in (0, 1):
        wd = stats.filter(pl.col("layer") == layer)["wd"].to_numpy()
        here = listed.filter(pl.col("layer") == layer)
        w5, w1 = set(top_percent_indices(wd, 5.0).tolist()), set(top_percent_indices(wd, 1.0).tolist())
        assert len(w5) == 20 and set(here["neuron"].to_list()) == w5 | ({7} if layer == 1 else set())
        assert set(here.filter(pl.col("clamped_at") == 1.0)["neuron"].to_list()) == w1
        assert set(here.filter(pl.col("clamped_at") == 5.0)["neuron"].to_list()) == w5 - w1
    row = listed.filter((pl.col("layer") == 1) & (pl.col("neuron") == 7)).row(0, named=True)
    assert row["clamped_at"] is None and row["set_sizes"] == "1:4,5:20"


def test_top_tokens_are_the_extreme_means_of_frequent_tokens():
    ids = np.array([1, 1, 1, 2, 2, 2, 3, 3, 3, 4])
    y = np.array([-3.0, -2.0, -1.0, 0.0, 0.0, 0.3, 5.0, 4.0, 6.0, -99.0])  # token 4 is seen once: left out
    tops = top_tokens(ids, y, 2, min_count=3)
    assert [(t["id"], t["count"]) for t in tops["lowest"]] == [(1, 3), (2, 3)]
    assert tops["lowest"][0]["mean"] == pytest.approx(-2.0) and tops["highest"][0]["mean"] == pytest.approx(5.0)


def record(
    layer: int, neuron: int, wd: float, neg_share: float, md: float, token: str = "the", clamped: float | None = 1.0
) -> dict:
    rng = np.random.default_rng(layer * 100 + neuron)
    y = np.concatenate([rng.normal(-1.5, 0.2, 400), rng.normal(0.5, 1.0, 600)])
    context = {"y": -4.2, "left": "a b ", "token": token, "right": " c d"}
    return {
        "model": "toy",
        "revision": "main",
        "layer": layer,
        "neuron": neuron,
        "wd": wd,
        "wd_negative": wd * neg_share,
        "wd_positive": wd * (1 - neg_share),
        "frac_negative": 0.4,
        "md": md,
        "wd_rank": 1,
        "md_rank": 3,
        "layer_size": 96,
        "neg_share": neg_share,
        "neg_per_token": (neg_share / 0.4) / ((1 - neg_share) / 0.6),
        "histogram": sign_histogram(y),
        "negative_contexts": [context],
        "positive_contexts": [context | {"y": 3.1, "token": "of"}],
        "pairs_note": "hand-made pairs",
        "pairs": [
            {
                "rank": 1,
                "sign": "nn",
                "r": 12.5,
                "context_i": f"x [[{token}]] y",
                "upos_i": "DET",
                "dep_i": "det",
                "y_i": -2.0,
                "context_j": "u [[for]] v",
                "upos_j": "ADP",
                "dep_j": "prep",
                "y_j": -0.4,
            }
        ],
        "checkpoints": [{"revision": "step1000", "wd": wd / 2, "rank": 7}],
        "clamped_at": clamped,
        "clamped": [{"percent": 1.0, "in_set": clamped is not None, "set_size": 10}],
        "gated": True,
        "top_tokens": {"lowest": [{"token": " the", "count": 40, "mean": -2.5}, {"token": token, "count": 9,
                       "mean": -1.0}], "highest": [{"token": " of", "count": 30, "mean": 1.5}], "note": "hand-made"},
    }  # fmt: skip


def sign_case_rows(token: str = EVIL) -> list[dict]:
    """A neuron's four gate x up sign cases as the explorer job passes them (each with one example in context)."""
    return [{"case": c, "gate_sign": c[4], "up_sign": c[-1], "count": 3, "fraction": 0.25, "mean_abs_product": 0.5,
             "abs_share": 0.25, "mean_product": -0.1, "examples": [{"y": -0.7, "left": "a ", "token": token,
             "right": " b"}]} for c in ("gate+ up+", "gate+ up-", "gate- up+", "gate- up-")]  # fmt: skip


def site_records() -> list[dict]:
    return [
        record(0, 5, 0.8, 0.9, 1.5, token=EVIL),
        record(0, 9, 0.5, 0.2, 3.0, clamped=None),
        record(1, 2, 1.2, 0.6, 0.7, token="stored"),
        record(2, 7, 0.3, 0.95, 2.2) | {"sign_cases": sign_case_rows("among")},
    ]


def test_pages_escape_data_and_say_what_is_missing():
    rec = record(0, 5, 0.8, 0.9, 1.5, token=EVIL)
    page = neuron_html(rec)
    assert EVIL not in page and html_escaped(EVIL) in page
    assert page.count("<script") == 0
    assert len(re.findall(r"<rect class='bar (?:neg|pos)'", page)) > 10
    assert page.count("class='ytick'") >= 4 and "10<tspan dy='-5' font-size='8'>-4</tspan>" in page  # log ticks
    assert "Gate × up sign cases" in page and "not computed: no sign-case table" in page
    assert "table class='top-tokens lowest'" in page
    shown = neuron_html(rec | {"sign_cases": sign_case_rows()})
    assert shown.count("<tr class='gate-negative'>") == 2 and EVIL not in shown
    assert "<b class='gate-negative-share'>0.5</b>" in shown
    assert "not a gated MLP (family gpt_neox" in neuron_html(rec | {"gated": False, "family": "gpt_neox"})
    no_pairs = neuron_html(rec | {"pairs": None, "pairs_note": "no pair sample <b>here</b>", "checkpoints": []})
    assert "not computed: no pair sample &lt;b&gt;here&lt;/b&gt;" in no_pairs
    assert "no checkpoints of this model in the run" in no_pairs
    index = index_html("toy<i>", "main", [{"layer": 0, "top_negative_token": EVIL}], "note")
    assert EVIL not in index and "toy&lt;i&gt;" in index


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_write_explorer_writes_index_and_one_page_per_neuron(tmp_path):
    write_explorer(tmp_path / "explorer", "toy", "main", site_records(), "note", bundle=tmp_path / "explorer.html")
    names = sorted(p.name for p in (tmp_path / "explorer").iterdir())
    assert names == ["L0_N5.html", "L0_N9.html", "L1_N2.html", "L2_N7.html", "index.html"]
    bundle = (tmp_path / "explorer.html").read_text()
    assert bundle.count("<section id=") == 5 and "id='L2_N7'" in bundle and EVIL not in bundle


# ---------------------------------------------------------------- a real browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("no chromium + chromedriver installed (make browser installs Debian's chromium, chromium-driver)")
    from selenium import webdriver  # a dev dependency: missing it is an install error, not a reason to skip
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def column(driver, index: int) -> list[str]:
    rows = driver.find_elements("css selector", "#table tbody tr")
    return [r.find_elements("tag name", "td")[index].text for r in rows]


def screenshot(driver, tmp_path, name: str) -> None:
    """A PNG of the current view in tmp_path (and in $WNEURONS_SCREENSHOTS when set, to look at afterwards)."""
    import os

    for folder in (tmp_path, os.environ.get("WNEURONS_SCREENSHOTS")):
        if folder:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, name)
            assert driver.save_screenshot(path)
            with open(path, "rb") as f:
                assert f.read(4) == b"\x89PNG"


def test_explorer_in_a_headless_browser(tmp_path, browser):
    browser.set_window_size(1200, 1600)
    write_explorer(tmp_path / "explorer", "toy", "main", site_records(), "note")
    index = tmp_path / "explorer" / "index.html"
    browser.get(index.as_uri())
    # The index loads, drawn by its script from the embedded JSON, layer by layer and by WD rank within a layer.
    assert column(browser, 0) == ["L0 N5", "L0 N9", "L1 N2", "L2 N7"]
    assert EVIL in column(browser, 8)  # the token is shown as text ...
    assert browser.execute_script("return window.__pwned === undefined")  # ... and never ran
    browser.find_element("css selector", "button[data-key='neg_share']").click()
    shares = [float(v) for v in column(browser, 2)]
    assert shares == sorted(shares, reverse=True) and shares[0] == pytest.approx(0.95)
    assert browser.find_element("css selector", "button[data-key='neg_share']").text.endswith("\u25bc")  # the arrow
    browser.find_element("css selector", "button[data-key='neg_share']").click()  # second click: ascending
    assert [float(v) for v in column(browser, 2)] == sorted(shares)
    browser.find_element("css selector", "button[data-key='md']").click()
    assert [float(v) for v in column(browser, 4)] == [3.0, 2.2, 1.5, 0.7]

    # Search by neuron, by layer and by token; filter to the clamped set.
    search = browser.find_element("id", "search")
    for query, expected in (("L1 N2", ["L1 N2"]), ("layer 0", ["L0 N5", "L0 N9"]), ("n7", ["L2 N7"]),
                            ("stored", ["L1 N2"]), ("9", ["L0 N9"])):  # fmt: skip
        search.clear()
        search.send_keys(query)
        assert sorted(column(browser, 0)) == expected, query
    assert browser.execute_script("return location.hash") == "#q=9"  # the search is in the URL
    search.clear()
    search.send_keys("layer 0")
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "clamped")).select_by_value("any")
    assert column(browser, 0) == ["L0 N5"] and column(browser, 7) == ["1%"]  # N9 is in no clamped set
    assert "1 of 4 neurons shown" in browser.find_element("id", "count").text
    screenshot(browser, tmp_path, "explorer-index-search.png")

    # A clamped neuron by its permalink: histogram on a log axis with ticks, clamped sets, top tokens, pairs.
    browser.get(index.as_uri() + "#L2_N7")
    assert browser.current_url.endswith("L2_N7.html")
    assert "In the clamped sets" in browser.page_source and "clamped" in browser.find_element(
        "css selector", "table.clamped-sets").text  # fmt: skip
    assert browser.find_element("css selector", "a.permalink").text == "index.html#L2_N7"
    assert len(browser.find_elements("css selector", "svg.hist text.ylabel")) >= 4
    assert "the" in browser.find_element("css selector", "table.top-tokens.lowest").text
    cases = browser.find_elements("css selector", "table.sign-cases > tbody > tr")  # the gate x up sign cases
    assert [r.text.split()[0] for r in cases[1:]] == ["gate+", "gate+", "gate-", "gate-"] and "among" in cases[3].text
    assert len(browser.find_elements("css selector", "table.sign-cases tr.gate-negative")) == 2  # shaded
    screenshot(browser, tmp_path, "explorer-L2_N7.png")
    browser.find_element("css selector", "nav.neighbours a.previous").click()
    assert browser.current_url.endswith("L1_N2.html")

    # A neuron page: histogram drawn, pairs listed, the <script> token shown as text and not executed.
    browser.get((tmp_path / "explorer" / "L0_N5.html").as_uri())
    bars = browser.find_elements("css selector", "svg.hist rect.bar")
    assert len(bars) > 10 and all(float(b.get_attribute("height")) >= 0 for b in bars)
    assert browser.find_elements("css selector", "svg.hist polyline.normal")
    pairs = browser.find_elements("css selector", "table.pairs tr")
    assert len(pairs) == 2 and "NN" in pairs[1].text and "DET, det" in pairs[1].text
    assert EVIL in browser.find_element("css selector", "table.negative_contexts").text
    assert EVIL in pairs[1].text
    marked = [e.text for e in pairs[1].find_elements("css selector", "span.tok")]
    assert marked == [EVIL, "for"]  # the pair's tokens, highlighted, still text
    assert browser.execute_script("return window.__pwned === undefined")
    assert not browser.find_elements("css selector", "body script")

    # The single-file bundle (what the HTML report embeds): index first, a neuron section by its anchor.
    write_explorer(tmp_path / "site2", "toy", "main", site_records(), "note", bundle=tmp_path / "explorer.html")
    browser.get((tmp_path / "explorer.html").as_uri())
    assert browser.find_element("id", "index").is_displayed()
    assert column(browser, 0) == ["L0 N5", "L0 N9", "L1 N2", "L2 N7"]
    browser.find_element("link text", "L2 N7").click()
    section = browser.find_element("id", "L2_N7")
    assert section.is_displayed() and not browser.find_element("id", "index").is_displayed()
    assert len(section.find_elements("css selector", "svg.hist rect.bar")) > 10
    browser.get((tmp_path / "explorer.html").as_uri() + "#L0_N5")  # the bundle's permalink
    assert browser.find_element("id", "L0_N5").is_displayed()
    assert browser.execute_script("return window.__pwned === undefined")
