"""The documentation site: `tools/docs.py build` (mkdocs --strict, executed tutorials,
plots from the benchmark results) succeeds, and the built site works in a browser:
maths rendered from the bundled KaTeX, nothing loaded from another host, no equation,
table or code block past the text column at any width, the API reference under the
public names.

Runs after tests/test_notebooks.py, whose executed notebooks the build reuses. Every test
that builds the site is slow; the plots' check is not.
"""

import functools
import http.server
import json
import threading
import time
import urllib.request

import pytest

from tests.helpers import (
    CHROMEDRIVER,
    CHROMIUM,
    ROOT,
    TUTORIAL_FIGURES,
    TUTORIALS,
    headless_chrome,
)

pytestmark = TUTORIALS
slow = pytest.mark.slow
DOCS = ROOT / "docs"


def test_every_chart_draws_one_bar_per_label_and_value(tmp_path):
    import matplotlib.pyplot as plt

    from tools import performance_plots as plots

    cpu, gpu = plots.load(plots.CPU_RUN), plots.load(plots.GPU_RUN)
    labels, values = plots.cpu_gpu_rows(cpu, gpu)
    assert len(labels) == len(set(labels)) == len(values) >= 4, labels
    figure, axis = plt.subplots()
    bars = plots.bar_chart(axis, labels, values)
    assert len(bars) == len(axis.get_yticklabels()) == len(axis.texts) == len(labels)
    # Two rows of one name were drawn as one bar carrying both values.
    with pytest.raises(ValueError, match="repeated bar labels"):
        plots.bar_chart(plt.subplots()[1], ["CPU bfloat16", "CPU bfloat16"], [63.7, 66.3])
    with pytest.raises(ValueError, match="2 labels for 3 values"):
        plots.bar_chart(plt.subplots()[1], ["a", "b"], [1.0, 2.0, 3.0])
    plt.close("all")
    out = plots.main(["--out", str(tmp_path)])
    assert (out / "cpu_gpu.png").stat().st_size > 0 and (out / "batch_curve.png").is_file()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="the docs need pip install -e '.[test]'")
    from tools.docs import main

    site = tmp_path_factory.mktemp("site")
    assert main(["build", "--site", str(site)]) == 0  # strict: a broken link fails here
    return site


@slow
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
    # Offline: no script, style or image from another host; and no empty address (a
    # <script src=""> fetches the page itself: mkdocs-jupyter's MathJax loader, taken out).
    for page in site.rglob("*.html"):
        text = page.read_text()
        for attribute in ('src="http', "src='http", 'href="https://fonts', "cdn.", 'src=""'):
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


@slow
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


def site_pages(site):
    """Each page's path under the site's root ("" for the home page)."""
    pages = []
    for page in sorted(site.rglob("index.html")):
        path = page.parent.relative_to(site).as_posix()
        if not path.startswith(("assets", "search")):
            pages.append("" if path == "." else f"{path}/")
    return pages


def open_page(browser, url):
    """Loads a page and waits until its scripts, the maths included, have run."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    WebDriverWait(browser, 20).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && !!window.renderMathInElement"
        )
    )
    browser.execute_script("return new Promise(r => requestAnimationFrame(() => r()))")


# The widths every page is measured at: a tablet's, a desktop's with the table of contents
# folded away, then with it shown (the text column at its narrowest, 688 px at 1280), up
# to a wide screen's. Below 1220 px, with the table of contents folded away, the tables
# that ran past the column at 1280 px and wider fitted.
WIDTHS = (760, 1200, 1280, 1440, 1920)

# What of the page's text column runs past it, measured in the browser: each display
# equation, table and code block, where it shows (its box; its content too where that
# spills out of an unclipped box; cut at any box around it that scrolls). One that
# scrolls inside a box within the column is fine. Also: the page's own sideways scroll
# (the theme hides it), display equations cut at the top or bottom by their box (which
# scrolls sideways only), and tables and signatures that scroll at all (they are made
# to fit: cells wrap, signatures at 80 characters).
FITS = """
const fits = () => {
  const column = document.querySelector('.md-content__inner');
  const edge = column.getBoundingClientRect().right + 1;
  const shown = e => {
    const box = e.getBoundingClientRect();
    let right = getComputedStyle(e).overflowX === 'visible'
      ? Math.max(box.right, box.left + e.clientLeft + e.scrollWidth) : box.right;
    for (let a = e.parentElement; a && a !== column; a = a.parentElement)
      if (getComputedStyle(a).overflowX !== 'visible')
        right = Math.min(right, a.getBoundingClientRect().right);
    return right;
  };
  const root = document.documentElement;
  const boxes = '.md-typeset__scrollwrap, .md-typeset table, .doc-signature';
  return {
    past: [...column.querySelectorAll('.katex-display, table, pre')]
      .filter(e => e.getClientRects().length && shown(e) > edge)
      .map(e => `${e.tagName}.${e.className} ${Math.round(shown(e))}>${Math.round(edge - 1)}`),
    scroll: root.scrollWidth - root.clientWidth,
    cut: [...column.querySelectorAll('.katex-display')].filter(e => {
      const box = e.getBoundingClientRect(), top = box.top + e.clientTop;
      const html = e.querySelector('.katex-html');  // what is drawn (the MathML is hidden)
      const drawn = html ? html.getBoundingClientRect() : {top, bottom: top};
      return drawn.top < top - 1 || drawn.bottom > top + e.clientHeight + 1;
    }).map(e => e.textContent.slice(0, 40)),
    wide: [...document.querySelectorAll(boxes)]
      .filter(e => e.scrollWidth > e.clientWidth + 1)
      .map(e => `${e.className} ${e.scrollWidth}>${e.clientWidth}`),
  };
};
return new Promise(r => requestAnimationFrame(() => r(fits())));  // once laid out
"""


def fits_at(browser, width, settle=3.0):
    """FITS once the page, resized to `width`, has settled: the theme animates its
    sidebars across a breakpoint (760 to 1200 px showed the page 84 px too wide for a
    frame), so a result with anything in it is measured again until `settle` seconds."""
    browser.set_window_size(width, 1000)
    end = time.monotonic() + settle
    while True:
        fits = browser.execute_script(FITS)
        fine = not (fits["past"] or fits["scroll"] > 1 or fits["cut"] or fits["wide"])
        if fine or time.monotonic() > end:
            return fits
        time.sleep(0.1)


@slow
def test_maths_renders_offline_with_no_raw_tex_and_tables_fit(site, served, browser):
    """Every page: no TeX left as text (a notebook's $...$, arithmatex's \\( \\)), no
    KaTeX error, no request to another host; and at each of WIDTHS no display equation,
    table or code block past the text column, the page not wider than the window, no
    equation cut, no table or signature wider than its box."""
    rendered = {}
    for path in site_pages(site):
        browser.set_window_size(WIDTHS[0], 1000)
        open_page(browser, f"{served}/{path}")
        page = browser.execute_script(
            """
            const text = document.querySelector('.md-container').cloneNode(true);
            text.querySelectorAll('pre, code, .katex, script, style').forEach(e => e.remove());
            return {
              raw: text.textContent.match(/\\\\[([]|\\$[^$\\n]+\\$/g) || [],
              maths: document.querySelectorAll('.katex').length,
              errors: document.querySelectorAll('.katex-error').length,
              requests: performance.getEntriesByType('resource').map(e => e.name)
                .filter(n => !n.startsWith(location.origin) && !n.startsWith('data:')),
            }"""
        )
        assert page["raw"] == [], (path, page["raw"][:3])
        assert page["errors"] == 0, path
        assert page["requests"] == [], (path, page["requests"])
        rendered[path] = page["maths"]
        for width in WIDTHS:  # the loaded page, resized: the layout is the width's
            fits = fits_at(browser, width)
            assert fits["past"] == [], (width, path, fits["past"][:3])
            assert fits["scroll"] <= 1, (width, path, fits["scroll"])
            assert fits["cut"] == [], (width, path, fits["cut"])
            assert fits["wide"] == [], (width, path, fits["wide"])
    browser.set_window_size(1200, 1000)
    for path in ("paper/", "tutorials/02_attention_decoder/"):
        assert rendered[path] > 5, (path, rendered[path])
    assert (site / "assets" / "katex" / "katex.min.js").is_file()


@slow
def test_tutorial_pages_link_their_notebook_and_its_source(served, browser):
    from selenium.webdriver.common.by import By

    open_page(browser, f"{served}/tutorials/02_attention_decoder/")
    links = {
        a.text: a.get_attribute("href")
        for a in browser.find_elements(By.CSS_SELECTOR, ".notebook-header a")
    }
    assert set(links) == {"Download the notebook", "View source"}, links
    with urllib.request.urlopen(links["Download the notebook"]) as reply:
        notebook = json.load(reply)
    assert notebook["nbformat"] == 4 and notebook["cells"]
    with urllib.request.urlopen(links["View source"]) as reply:
        script = reply.read().decode()
    assert "from keras_saat import" in script and "# # 2. Soft attention" in script


@slow
def test_api_reference_shows_public_names_signatures_and_examples(served, browser):
    from selenium.webdriver.common.by import By

    open_page(browser, f"{served}/api/captioner/")
    heading = browser.find_element(By.CSS_SELECTOR, "h2.doc-heading")
    assert "keras_saat.Captioner" in heading.text, heading.text
    section = browser.execute_script(
        """const h = document.querySelector('h2.doc-heading');
        const contents = h.nextElementSibling.matches('.doc-signature')
          ? h.nextElementSibling : h.parentElement.querySelector('.doc-signature');
        const extenders = document.getElementById('for-extenders-what-training-calls');
        const before = [...document.querySelectorAll('.md-content h2, .md-content h3')]
          .filter(e => !extenders || (e.compareDocumentPosition(extenders) & 4))
          .map(e => e.textContent);
        return {signature: contents ? contents.textContent : '',
                example: document.querySelector('.doc-class details.example code')?.textContent,
                before};"""
    )
    assert "vocabulary" in section["signature"] and 'backbone="shapes_cnn"' in section["signature"]
    example = section["example"] or ""  # the Keras user's path, end to end
    assert "Captioner.from_records(" in example and "keras.saving.load_model(" in example, example
    public = " ".join(section["before"])
    for name in ("from_records", "fit", "generate", "save_to_preset"):
        assert name in public, public
    for internal in ("update_baseline", "weight_gradients", "train_step"):
        assert internal not in public, internal
