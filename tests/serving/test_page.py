"""The page at GET /, in a real browser: Debian's chromium and chromedriver, driven by Selenium.

`make test` installs them where missing (Makefile `browser`); where they cannot be
had, this module is skipped with the reason.
"""

import base64
import time

import pytest

from keras_saat.serving import DevServer, RestClient
from tests.helpers import CHROMEDRIVER, CHROMIUM, headless_chrome

pytestmark = pytest.mark.slow
selenium = pytest.importorskip(
    "selenium", reason="selenium is not installed: pip install -e '.[test]'"
)
if not (CHROMEDRIVER and CHROMIUM):
    pytest.skip(
        "the page test needs Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver; `make test` does it as root)",
        allow_module_level=True,
    )
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def server(export_base):
    server = DevServer(export_base, "cap", port=0, log=lambda *_: None).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    driver = headless_chrome()
    yield driver
    driver.quit()


def canvas_pixels(driver, card):
    return driver.execute_script("return arguments[0].querySelector('canvas').toDataURL()", card)


def test_the_page_captions_uploads_and_shows_attention_per_word(
    server, browser, test_images, tmp_path
):
    broken = tmp_path / "broken.png"
    whole = test_images[2].read_bytes()
    broken.write_bytes(whole[: len(whole) // 2])  # a real header, half the data
    uploads = [test_images[0], test_images[1], broken]
    expected = RestClient(server.url, "cap").caption(uploads[:2])

    browser.get(server.url + "/")
    wait = WebDriverWait(browser, 120)
    wait.until(lambda d: "version" in d.find_element(By.ID, "model").text)
    header = browser.find_element(By.ID, "model").text
    assert "model cap, version 1" in header and "serving_default(image_bytes)" in header

    browser.find_element(By.ID, "files").send_keys("\n".join(str(p) for p in uploads))
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".card")) == 3)
    cards = {
        c.find_element(By.CLASS_NAME, "name").text: c
        for c in browser.find_elements(By.CSS_SELECTOR, ".card")
    }
    for path, want in zip(uploads[:2], expected, strict=True):
        words = cards[path.name].find_elements(By.CSS_SELECTOR, ".word")
        shown = " ".join(w.text for w in words if w.text != "⟨end⟩")
        assert shown == want["caption"]
        assert "valid: true" in cards[path.name].find_element(By.CLASS_NAME, "meta").text
    bad = cards["broken.png"]
    assert "invalid" in bad.get_attribute("class")
    assert "valid: false" in bad.text and "truncated or corrupt" in bad.text

    # Hover the second word: the overlay of that step's attention is drawn.
    card = cards[uploads[0].name]
    wait.until(
        lambda d: d.execute_script(
            "return arguments[0].querySelector('canvas').toDataURL().length > 5000", card
        )
    )
    before = canvas_pixels(browser, card)
    word = card.find_elements(By.CSS_SELECTOR, ".word")[1]
    ActionChains(browser).move_to_element(word).perform()
    wait.until(lambda d: card.find_element(By.TAG_NAME, "canvas").get_attribute("data-step") == "1")
    after = canvas_pixels(browser, card)
    assert after != before and "active" in word.get_attribute("class")
    other = card.find_elements(By.CSS_SELECTOR, ".word")[0]
    ActionChains(browser).move_to_element(other).perform()
    wait.until(lambda d: card.find_element(By.TAG_NAME, "canvas").get_attribute("data-step") == "0")
    assert canvas_pixels(browser, card) != before

    # Each word its own map, drawn by the page's own `showCard`: the small model above
    # attends almost uniformly (its steps' maps may shade alike), so a prediction whose
    # steps attend to the grid's top-right and bottom-left cells, then top-right again.
    def corner(row, col):
        return [[float((i, j) == (row, col)) for j in range(8)] for i in range(8)]

    def brightness(quarter):  # the canvas's mean RGB over its top-right or bottom-left quarter
        return browser.execute_script(
            """const canvas = arguments[0].querySelector('canvas');
            const half = canvas.width / 2, right = arguments[1] === 'top right';
            const data = canvas.getContext('2d').getImageData(
                right ? half : 0, right ? 0 : half, half, half).data;
            let sum = 0;
            for (let i = 0; i < data.length; i += 4) sum += data[i] + data[i + 1] + data[i + 2];
            return sum / (data.length / 4);""",
            card,
            quarter,
        )

    suffix = test_images[0].suffix.lstrip(".").replace("jpg", "jpeg")
    image = f"data:image/{suffix};base64," + base64.b64encode(test_images[0].read_bytes()).decode()
    prediction = {"valid": True, "tokens": ["top", "bottom", "<end>"], "log_prob": -1.0,
                  "attention": [corner(0, 7), corner(7, 0), corner(0, 7)]}  # fmt: skip
    browser.execute_script(
        "showCard(arguments[0], arguments[1])", {"name": "corners", "url": image}, prediction
    )
    card = next(
        c for c in browser.find_elements(By.CSS_SELECTOR, ".card")
        if c.find_element(By.CLASS_NAME, "name").text == "corners"
    )  # fmt: skip
    wait.until(
        lambda d: d.execute_script(
            "return arguments[0].querySelector('canvas').toDataURL().length > 5000", card
        )
    )
    drawn, quarters = [], []
    for step, word in enumerate(card.find_elements(By.CSS_SELECTOR, ".word")):
        ActionChains(browser).move_to_element(word).perform()
        wait.until(
            lambda d, step=step: (
                card.find_element(By.TAG_NAME, "canvas").get_attribute("data-step") == str(step)
            )
        )
        drawn.append(canvas_pixels(browser, card))
        quarters.append((brightness("top right"), brightness("bottom left")))
    assert drawn[0] != drawn[1] and drawn[2] == drawn[0]  # each step its own map
    # The attended cell is left bright where it lies on the image: top right at step 0,
    # bottom left at step 1 (a transposed or turned map would swap them).
    assert quarters[0][0] > quarters[1][0] and quarters[1][1] > quarters[0][1]

    raw = browser.find_element(By.ID, "request").get_attribute("textContent")
    assert "POST /v1/models/cap:predict" in raw and '"b64"' in raw
    assert "HTTP 200" in browser.find_element(By.ID, "response").get_attribute("textContent")
    time.sleep(0.2)
    assert browser.save_screenshot(str(tmp_path / "page.png"))
    assert (tmp_path / "page.png").stat().st_size > 10_000


def test_the_page_is_one_self_contained_file(server, browser):
    """No request leaves the model's own server: no CDN, no fonts, no scripts elsewhere."""
    browser.get(server.url + "/?model=cap")
    WebDriverWait(browser, 60).until(lambda d: "version" in d.find_element(By.ID, "model").text)
    resources = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert resources and all(r.startswith(server.url) for r in resources), resources
    browser.get(server.url + "/?model=nothing")
    WebDriverWait(browser, 60).until(lambda d: "cannot read" in d.find_element(By.ID, "model").text)


def test_a_picture_unlike_the_training_pictures_is_marked(server, browser, test_images, tmp_path):
    import skimage.data
    from PIL import Image

    photo = tmp_path / "astronaut.png"
    Image.fromarray(skimage.data.astronaut()).save(photo)
    uploads = [photo, test_images[0]]
    expected = RestClient(server.url, "cap").caption(uploads)
    assert not expected[0]["familiar"] and expected[0]["novelty"] > 1.0

    browser.get(server.url + "/")
    wait = WebDriverWait(browser, 120)
    wait.until(lambda d: "version" in d.find_element(By.ID, "model").text)
    browser.find_element(By.ID, "files").send_keys("\n".join(str(p) for p in uploads))
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".card")) == 2)
    for card in browser.find_elements(By.CSS_SELECTOR, ".card"):
        name = card.find_element(By.CLASS_NAME, "name").text
        want = expected[[p.name for p in uploads].index(name)]
        notes = card.find_elements(By.CLASS_NAME, "unfamiliar")
        if want["familiar"]:
            assert notes == [], name
        else:
            assert "unlike the pictures this model learnt from" in notes[0].text
            assert f"novelty {want['novelty']:.1f}" in notes[0].text
