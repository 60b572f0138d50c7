"""Makes docs/page.png, the README's picture of the page at GET /.

    python tools/page_screenshot.py --model-base models/keras_saat IMAGE... [--word blue]

Serves the export with the development server, opens the page in headless
Chromium (Debian's chromium and chromium-driver), uploads the images, hovers the
first caption word equal to --word (or the second word) and saves the screenshot.
"""

import argparse
import shutil
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from keras_saat.serving import DevServer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base", required=True)
    parser.add_argument("--name", default="keras_saat")
    parser.add_argument("--word", default=None)
    parser.add_argument("--out", default=str(Path(__file__).parents[1] / "docs" / "page.png"))
    parser.add_argument("images", nargs="+")
    args = parser.parse_args()
    server = DevServer(args.model_base, args.name, port=0, log=lambda *_: None).start()
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--window-size=1100,800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        service=webdriver.ChromeService(shutil.which("chromedriver")), options=options
    )
    try:
        driver.get(server.url + "/")
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: "version" in d.find_element(By.ID, "model").text)
        driver.find_element(By.ID, "files").send_keys(
            "\n".join(str(Path(p).resolve()) for p in args.images)
        )
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".card")) == len(args.images))
        time.sleep(0.5)
        words = driver.find_elements(By.CSS_SELECTOR, ".card .word")
        chosen = [w for w in words if w.text == args.word] or words[1:2]
        ActionChains(driver).move_to_element(chosen[0]).perform()
        time.sleep(0.5)
        driver.save_screenshot(args.out)
        print(f"wrote {args.out}")
    finally:
        driver.quit()
        server.stop()


if __name__ == "__main__":
    main()
