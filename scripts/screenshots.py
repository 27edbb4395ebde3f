"""Take the console's screenshots that the docs show, one per tab, from a real embedded server.

    .venv/bin/python scripts/screenshots.py     # writes docs/img/console-{speak,jobs,voices}.png

Needs what the browser tests need (Debian's chromium and chromium-driver; scripts/test.sh
installs them). It starts `narrator serve` in a temporary folder, speaks a sentence, makes a
two-chapter book and opens it in the player, saves a lexicon, and photographs each tab.
"""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from selenium import webdriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

from tests.support import embedded  # noqa: E402
from tests.test_web import (  # noqa: E402
    BOOK,
    CHROMEDRIVER,
    CHROMIUM,
    click,
    open_console,
    row_text,
    submit_job,
    text_of,
    until,
)

OUT = ROOT / "docs" / "img"


def main() -> None:
    """Photograph the three tabs as a new user sees them after a first try of each."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,1300",
                 "--hide-scrollbars"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(
        executable_path=CHROMEDRIVER or "chromedriver"))
    with tempfile.TemporaryDirectory() as folder, embedded(Path(folder)) as (url, _):
        try:
            open_console(driver, url)
            driver.find_element(By.ID, "speak-go").click()
            until(driver, lambda d: "done" in text_of(d, "status"))
            driver.save_screenshot(str(OUT / "console-speak.png"))

            open_console(driver, url, "jobs")
            driver.find_element(By.CSS_SELECTOR, 'input[name="job-kind"][value="markdown"]').click()
            driver.find_element(By.ID, "job-text").send_keys(BOOK)
            driver.find_element(By.ID, "job-title").send_keys("Harbour Stories")
            job_id = submit_job(driver)
            row = f'tr[data-job="{job_id}"]'
            until(driver, lambda d: "completed" in row_text(d, row), 120)
            click(driver, f'{row} button[aria-label="Play {job_id}"]')
            until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#player-cues li"))
            driver.execute_script("document.getElementById('player').scrollIntoView();")
            driver.save_screenshot(str(OUT / "console-jobs.png"))

            open_console(driver, url, "voices")
            driver.find_element(By.ID, "lexicon-name").send_keys("names")
            driver.find_element(By.ID, "lexicon-entries").send_keys("Nguyen = win")
            driver.find_element(By.ID, "lexicon-go").click()
            until(driver, lambda d: "names" in text_of(d, "lexicon-table"))
            driver.execute_script("window.scrollTo(0, 0);")
            driver.save_screenshot(str(OUT / "console-voices.png"))
        finally:
            driver.quit()
    print(f"wrote {', '.join(p.name for p in sorted(OUT.glob('console-*.png')))}")


if __name__ == "__main__":
    main()
