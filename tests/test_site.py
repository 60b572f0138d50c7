"""The documentation site: `tools/docs.py build` (mkdocs --strict, executed tutorials,
plots from the benchmark results) succeeds, and the built site works in a browser.

Runs after tests/test_notebooks.py, whose executed notebooks the build reuses.
"""

import functools
import http.server
import threading

import pytest

from tests.helpers import CHROMEDRIVER, CHROMIUM, ROOT, TUTORIAL_FIGURES, headless_chrome

pytestmark = pytest.mark.slow
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="the docs need pip install -e '.[test]'")
    from tools.docs import main

    site = tmp_path_factory.mktemp("site")
    assert main(["build", "--site", str(site)]) == 0  # strict: a broken link fails here
    return site


def test_the_site_builds_with_every_page(site):
    for page in DOCS.rglob("*.md"):
        built = site / page.relative_to(DOCS).with_suffix("") / "index.html"
        if page.name == "index.md":
            built = site / page.relative_to(DOCS).parent / "index.html"
        assert built.is_file(), built
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        assert (site / "tutorials" / notebook.stem / "index.html").is_file()
    api = (site / "api" / "captioner" / "index.html").read_text()
    assert "generate_stream" in api and "save_to_preset" in api
    # Offline: no script, style or image from another host.
    for page in site.rglob("*.html"):
        text = page.read_text()
        for attribute in ('src="http', "src='http", 'href="https://fonts', "cdn."):
            assert attribute not in text, (page, attribute)


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("selenium", reason="selenium is not installed: pip install -e '.[test]'")
    if not (CHROMEDRIVER and CHROMIUM):
        pytest.skip("the site test needs Debian's chromium and chromium-driver (`make test`)")
    driver = headless_chrome()
    yield driver
    driver.quit()


def test_tutorial_pages_show_their_figures_and_search_finds_beam(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    for name, at_least in TUTORIAL_FIGURES.items():
        browser.get(f"{served}/tutorials/{name}/")
        WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "img"))
        drawn = browser.execute_script(
            "return [...document.querySelectorAll('.jp-OutputArea img, .output_png img, img')]"
            ".filter(i => i.src.startsWith('data:image/png') && i.complete && i.naturalWidth > 0)"
            ".length"
        )
        assert drawn >= at_least, name
    browser.get(f"{served}/")
    browser.execute_script("document.getElementById('__search').checked = true")  # open search
    box = browser.find_element(By.CSS_SELECTOR, "input[data-md-component='search-query']")
    WebDriverWait(browser, 10).until(lambda d: box.is_displayed())
    box.send_keys("beam")  # the index loads in a worker; results appear as one types

    def results(driver):
        items = driver.find_elements(By.CSS_SELECTOR, ".md-search-result__item")
        return [i.get_attribute("textContent").lower() for i in items]

    texts = WebDriverWait(browser, 30).until(results)
    assert any("beam" in text for text in texts), texts[:3]
    out = ROOT / "build"
    out.mkdir(exist_ok=True)
    browser.save_screenshot(str(out / "site.png"))
