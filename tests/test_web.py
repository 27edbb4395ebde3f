"""The web console, driven in Debian's Chromium (headless) through ChromeDriver."""

import functools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import base_env
from tests.epub_maker import make_epub
from tests.support import TOMATO, Stack, embedded, fruit_heard, start_stack

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs Debian's chromium and chromium-driver (scripts/test.sh installs them)")

BOOK = "# The Harbour\n\nThe boats came in at dawn. Gulls followed them.\n\n" \
       "# The Market\n\nFish were sold by noon. The square emptied slowly."


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--autoplay-policy=no-user-gesture-required", "--window-size=1200,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded(tmp_path_factory.mktemp("console")) as (url, _):
        yield url


def until(driver: WebDriver, check: Callable[[WebDriver], Any], seconds: float = 60) -> Any:
    """Wait for `check` to return something truthy; show the page's error box on timeout."""
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.2).until(check)
    except TimeoutException:
        error = driver.find_element(By.ID, "error").text
        status = driver.find_element(By.ID, "status").text
        raise AssertionError(f"timed out; error box: {error!r}, status: {status!r}") from None


def shown(driver: WebDriver, element_id: str) -> bool:
    return bool(driver.find_element(By.ID, element_id).is_displayed())


def text_of(driver: WebDriver, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


def row_text(driver: WebDriver, css: str) -> str:
    """The text of an element of the job table, read in one step (it is redrawn often)."""
    found = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';", css)
    return str(found)


def click(driver: WebDriver, css: str, seconds: float = 20) -> None:
    """Click an element that a redraw may replace between finding and clicking it."""
    def attempt(d: WebDriver) -> bool:
        try:
            d.find_element(By.CSS_SELECTOR, css).click()
        except (StaleElementReferenceException, NoSuchElementException):
            return False
        return True

    until(driver, attempt, seconds)


def open_console(driver: WebDriver, url: str, tab: str = "speak") -> None:
    driver.get(f"{url}/#{tab}")
    until(driver, lambda d: Select(d.find_element(By.ID, "speak-voice")).options)


def plain_text_job(driver: WebDriver, words: str) -> None:
    """Fill the job form with plain text (an earlier test may have left it on EPUB)."""
    driver.find_element(By.CSS_SELECTOR, 'input[name="job-kind"][value="text"]').click()
    box = driver.find_element(By.ID, "job-text")
    box.clear()
    box.send_keys(words)


def submit_job(driver: WebDriver) -> str:
    """Submit the job form; return the new job's id (not an earlier test's, still shown)."""
    driver.execute_script("document.getElementById('status').textContent = '';")
    driver.find_element(By.ID, "job-submit").click()
    return str(until(driver, lambda d: text_of(d, "status").removeprefix("submitted ")
                     if text_of(d, "status").startswith("submitted job_") else None))


def test_speak_streams_then_plays_a_whole_file(browser: WebDriver, served: str) -> None:
    open_console(browser, served)
    text = browser.find_element(By.ID, "speak-text")
    text.clear()
    text.send_keys("Streamed into the page as it is made.")
    browser.find_element(By.ID, "speak-go").click()
    until(browser, lambda d: "done (streamed" in text_of(d, "status"))
    streamed = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(document.getElementById('speak-download').href)"
        ".then(r => r.arrayBuffer()).then(b => done(b.byteLength));")
    assert streamed > 44 + 22050  # a WAV header and more than half a second of 16-bit audio

    browser.find_element(By.ID, "speak-stream").click()  # off: one whole file
    Select(browser.find_element(By.ID, "speak-format")).select_by_visible_text("wav")
    browser.find_element(By.ID, "speak-go").click()
    until(browser, lambda d: "s of audio" in text_of(d, "status"))
    link = browser.find_element(By.ID, "speak-download")
    assert link.get_attribute("download") == "speech.wav"
    duration = until(browser, lambda d: d.execute_script(
        "const a = document.getElementById('speak-audio');"
        "return a.readyState >= 1 && a.duration > 0 ? a.duration : null;"))
    assert duration > 1.0


def test_errors_are_shown_in_words(browser: WebDriver, served: str) -> None:
    open_console(browser, served)
    browser.execute_script("document.getElementById('speak-text').value = 'x'.repeat(5000);")
    browser.find_element(By.ID, "speak-go").click()
    message = until(browser, lambda d: text_of(d, "error"))
    assert "use a job (the Jobs tab)" in message  # the console's words, not an endpoint
    assert "/v1/" not in message
    browser.find_element(By.ID, "tab-jobs").click()  # the error stays with its tab
    until(browser, lambda d: not d.find_element(By.ID, "error").is_displayed())
    browser.find_element(By.ID, "tab-speak").click()
    browser.find_element(By.ID, "speak-go").click()
    until(browser, lambda d: text_of(d, "error"))
    text = browser.find_element(By.ID, "speak-text")
    text.clear()
    text.send_keys("Short again.")  # fixing the input clears it
    until(browser, lambda d: not d.find_element(By.ID, "error").is_displayed())


def test_a_markdown_book_from_chapters_to_synced_subtitles(browser: WebDriver, served: str,
                                                           tmp_path: Path) -> None:
    open_console(browser, served, "jobs")
    browser.find_element(By.CSS_SELECTOR, 'input[name="job-kind"][value="markdown"]').click()
    browser.find_element(By.ID, "job-text").send_keys(BOOK)
    browser.find_element(By.ID, "job-preview").click()
    preview = until(browser, lambda d: text_of(d, "job-chapters"))
    assert "2 chapter(s)" in preview
    assert "The Harbour" in preview
    assert "The Market" in preview

    job_id = submit_job(browser)
    row = f'tr[data-job="{job_id}"]'
    until(browser, lambda d: "completed" in row_text(d, row), 120)
    assert "100%" in row_text(browser, row)
    click(browser, f'{row} button[aria-label="Play {job_id}"]')

    until(browser, lambda d: d.find_element(By.ID, "player").is_displayed())
    chapters = browser.find_elements(By.CSS_SELECTOR, "#player-chapters li > button:first-child")
    assert [c.text for c in chapters] == ["The Harbour", "The Market"]
    cues = until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#player-cues li"))
    assert len(cues) >= 4  # one cue per sentence
    assert browser.execute_script(  # a cue's number up to 999 fits beside it, not clipped
        "const ol = document.getElementById('player-cues'), s = document.createElement('span');"
        "s.textContent = '888.\u00a0'; s.style.font = getComputedStyle(ol).font;"
        "document.body.append(s); const w = s.getBoundingClientRect().width; s.remove();"
        "return parseFloat(getComputedStyle(ol).paddingLeft) >= w;")
    downloads = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#player-downloads a")]
    assert downloads[0] == "Audio"
    assert "Chapter 2: The Market" in downloads
    assert {"Subtitles (SRT)", "Subtitles (VTT)", "Manifest (JSON)"} <= set(downloads)
    # Laid out as a row of buttons that wrap: none overlaps another, no bullets.
    boxes = browser.execute_script(
        "return [...document.querySelectorAll('#player-downloads a')].map(a => {"
        "  const r = a.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; });")
    for n, a in enumerate(boxes):
        for b in boxes[n + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    assert browser.execute_script("return getComputedStyle(document.querySelector("
                                  "'#player-downloads li')).listStyleType") == "none"
    browser.find_element(By.ID, "player-downloads").screenshot(str(tmp_path / "downloads.png"))
    until(browser, lambda d: d.execute_script(
        "return document.getElementById('player-audio').readyState >= 1"))

    chapters[1].click()  # seeks to the second chapter and plays
    start = until(browser, lambda d: d.execute_script(
        "const t = document.getElementById('player-audio').currentTime; return t > 0 && t;"))
    assert start >= 2.0
    browser.execute_script("const a = document.getElementById('player-audio'); a.pause();")
    # The cue under the play head is highlighted and shown; another time, another cue.
    for n in (0, len(cues) - 1):
        browser.execute_script(
            "const a = document.getElementById('player-audio');"
            "a.currentTime = arguments[0]; a.dispatchEvent(new Event('timeupdate'));",
            _cue_middle(browser, n))
        current = until(browser, lambda d: d.find_elements(By.CSS_SELECTOR,
                                                           "#player-cues li.current"))
        assert current[0].text == cues[n].text
        assert text_of(browser, "player-cue") == cues[n].text


def test_a_chapter_re_rendered_from_the_player_becomes_version_two(browser: WebDriver,
                                                                   served: str) -> None:
    open_console(browser, served, "jobs")
    plain_text_job(browser, "The boats came in at dawn.")
    job_id = submit_job(browser)
    row = f'tr[data-job="{job_id}"]'
    until(browser, lambda d: "completed" in row_text(d, row), 120)
    click(browser, f'{row} button[aria-label="Play {job_id}"]')
    click(browser, 'button[aria-label="Re-render chapter 1"]')
    browser.switch_to.alert.dismiss()  # asked first; "no" sends nothing
    click(browser, 'button[aria-label="Re-render chapter 1"]')
    assert "version 2" in browser.switch_to.alert.text
    browser.switch_to.alert.accept()
    until(browser, lambda d: "completed (v2)" in row_text(d, row), 120)
    click(browser, f'{row} button[aria-label="Play {job_id}"]')
    until(browser, lambda d: text_of(d, "player-version").startswith("Version 2"))
    earlier = until(browser, lambda d: d.execute_script(
        "const a = [...document.querySelectorAll('#player-downloads a')]"
        "  .find(a => a.textContent === 'Version 1 (earlier)'); return a ? a.href : null;"))
    assert httpx.get(earlier).status_code == 200


def test_a_job_is_listed_by_its_title_and_the_console_fits_a_phone(browser: WebDriver,
                                                                    served: str) -> None:
    open_console(browser, served, "jobs")
    plain_text_job(browser, "A short one.")
    title = browser.find_element(By.ID, "job-title")
    title.clear()
    title.send_keys("Harbour Stories")
    job_id = submit_job(browser)
    title.clear()
    row = f'tr[data-job="{job_id}"]'
    until(browser, lambda d: "Harbour Stories" in row_text(d, f"{row} td"))
    assert job_id[:16] not in row_text(browser, f"{row} td")
    size = browser.get_window_size()
    browser.set_window_size(420, 900)
    try:
        for tab in ("speak", "jobs", "voices"):
            browser.find_element(By.ID, f"tab-{tab}").click()
            until(browser, functools.partial(shown, element_id=tab))
            # nothing wider than the screen: no sideways scrolling of the page
            wide = browser.execute_script(
                "const scrolls = (e) => e && e !== document.body && (['auto', 'scroll']"
                "  .includes(getComputedStyle(e).overflowX) || scrolls(e.parentElement));"
                "return [document.documentElement.scrollWidth, window.innerWidth,"
                "  ...[...document.querySelectorAll('body *')].filter(e => e.offsetParent"
                "  && e.getBoundingClientRect().right > window.innerWidth + 0.5"
                "  && !scrolls(e.parentElement))"
                "  .map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 5)];")
            assert wide[0] <= wide[1], (tab, wide)
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_the_player_lights_the_word_being_spoken(browser: WebDriver, served: str) -> None:
    """A job with word timings (the form asks for them by default), heard back: the cue under
    the play head is shown word by word, the word spoken at that moment is lit, and the
    player says what the recognition check heard."""
    open_console(browser, served, "jobs")
    assert browser.find_element(By.ID, "job-words").is_selected()
    box = browser.find_element(By.ID, "job-text")
    box.clear()
    box.send_keys("The boats came in at dawn. Gulls followed them home.")
    Select(browser.find_element(By.ID, "job-verify")).select_by_value("flag")
    job_id = submit_job(browser)
    row = f'tr[data-job="{job_id}"]'
    until(browser, lambda d: "completed" in row_text(d, row), 120)
    click(browser, f'{row} button[aria-label="Play {job_id}"]')
    until(browser, lambda d: d.find_element(By.ID, "player").is_displayed()
          and d.find_elements(By.CSS_SELECTOR, "#player-cues li"))
    # Read in one step, as the player may redraw its list between finding and reading.
    until(browser, lambda d: "Word timings (JSON)" in d.execute_script(
        "return [...document.querySelectorAll('#player-downloads a')].map(a => a.textContent);"))
    words: list[dict[str, Any]] = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const url = [...document.querySelectorAll('#player-downloads a')]"
        "  .find(a => a.textContent === 'Word timings (JSON)').href;"
        "fetch(url).then(r => r.json()).then(j => done(j.words));")
    assert [w["word"] for w in words] == [
        "the", "boats", "came", "in", "at", "dawn", "gulls", "followed", "them", "home"]
    browser.execute_script("document.getElementById('player-audio').pause();")
    for n in (1, 5, 7):  # "boats", "dawn." (written form, one for one), "followed"
        middle = (words[n]["start"] + words[n]["end"]) / 2
        browser.execute_script(
            "const a = document.getElementById('player-audio');"
            "a.currentTime = arguments[0]; a.dispatchEvent(new Event('timeupdate'));", middle)
        lit = until(browser, lambda d: d.execute_script(  # read in one step (redraws)
            "return [...document.querySelectorAll('#player-cue .current-word')]"
            ".map(w => w.textContent);"))
        assert lit == [["boats", "dawn.", "followed"][(1, 5, 7).index(n)]]
    assert text_of(browser, "player-cue") == "Gulls followed them home."
    assert text_of(browser, "player-verify").startswith("Heard back: no segment misheard")


def _cue_middle(browser: WebDriver, n: int) -> float:
    """The middle of cue n, read from the VTT the page loaded."""
    middle: float = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const url = [...document.querySelectorAll('#player-downloads a')]"
        "  .find(a => a.textContent === 'Subtitles (VTT)').href;"
        "fetch(url).then(r => r.text()).then(t => {"
        "  const times = [...t.matchAll(/([0-9:.]+) --> ([0-9:.]+)/g)][arguments[0]];"
        "  const s = v => v.split(':').reduce((a, p) => a * 60 + Number(p), 0);"
        "  done((s(times[1]) + s(times[2])) / 2); });", n)
    return middle


def test_an_epub_shows_its_chapters_before_it_is_submitted(browser: WebDriver, served: str,
                                                          tmp_path: Path) -> None:
    book = tmp_path / "book.epub"
    book.write_bytes(make_epub([("Departure", "They left before sunrise."),
                                ("Arrival", "The town was asleep when they came.")]))
    open_console(browser, served, "jobs")
    browser.find_element(By.CSS_SELECTOR, 'input[name="job-kind"][value="epub"]').click()
    assert not browser.find_element(By.ID, "job-text").is_displayed()
    browser.find_element(By.ID, "job-file").send_keys(str(book))
    browser.find_element(By.ID, "job-preview").click()
    preview = until(browser, lambda d: text_of(d, "job-chapters"))
    assert "2 chapter(s)" in preview
    items = browser.find_elements(By.CSS_SELECTOR, "#job-chapters li")
    assert [i.text.split(":")[0] for i in items] == ["Departure (toc)", "Arrival (toc)"]


def test_a_running_job_can_be_cancelled_and_deleted(browser: WebDriver, served: str) -> None:
    open_console(browser, served, "jobs")
    browser.execute_script("document.getElementById('job-text').value = arguments[0];",
                           # minutes of work on any machine: at 200 sentences a job on a
                           # fast 2-core VM finished before its Cancel button was clicked
                           "A long sentence to keep the worker busy for a while. " * 2000)
    job_id = submit_job(browser)
    row = f'tr[data-job="{job_id}"]'
    # Its row can take a while on 2 busy cores: one CI run showed "submitted"
    # but no row within 20 s while the worker planned this 2,000-sentence job; three local
    # runs of the module took under 5 s. A minute for the row, then the usual waits.
    click(browser, f'{row} button[aria-label="Cancel {job_id}"]', 60)
    until(browser, lambda d: "cancelled" in row_text(d, row))
    click(browser, f'{row} button[aria-label="Delete {job_id}"]')
    until(browser, lambda d: not row_text(d, row))
    assert httpx.get(f"{served}/v1/audio/jobs/{job_id}").status_code == 404


def test_voices_are_listed_and_upload_says_why_it_is_off(browser: WebDriver,
                                                         served: str) -> None:
    open_console(browser, served, "voices")
    rows = until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#voice-table tbody tr"))
    listed = httpx.get(f"{served}/v1/audio/voices").json()["voices"]
    assert [r.text.split()[0] for r in rows] == [v["name"].split()[0] for v in listed]
    assert all(r.text.endswith("builtin Hear") for r in rows), [r.text for r in rows]
    assert {v["model"] for v in listed} == {"piper", "kokoro"}  # both CPU engines by default
    # A short sample of a voice of each engine, made when asked for, played in the page.
    for voice in ("joe", "jm_kumo"):
        row = next(r for r, v in zip(rows, listed, strict=True) if v["id"] == voice)
        row.find_element(By.TAG_NAME, "button").click()
        playing = "Playing a sample of " + next(v["name"] for v in listed if v["id"] == voice)
        until(browser, lambda d: text_of(d, "status") == playing)  # noqa: B023
    assert "No model here clones voices" in text_of(browser, "voice-note")
    assert not browser.find_element(By.ID, "voice-go").is_enabled()


def test_a_consent_recorded_in_the_console_is_heard_listed_and_deleted(
        browser: WebDriver, served: str, tmp_path: Path) -> None:
    statement = httpx.get(f"{served}/v1/audio/voice_consents/statement").json()["statement"]
    recording = tmp_path / "consent.wav"  # the speaker's part, read by Piper
    recording.write_bytes(httpx.post(f"{served}/v1/audio/speech", timeout=60, json={
        "model": "piper", "voice": "joe", "input": statement, "response_format": "wav"}).content)
    open_console(browser, served, "voices")
    until(browser, lambda d: text_of(d, "consent-statement") == statement)
    browser.find_element(By.ID, "consent-name").send_keys("Nell Reader")
    browser.find_element(By.ID, "consent-file").send_keys(str(recording))
    browser.find_element(By.ID, "consent-go").click()
    until(browser, lambda d: "Nell Reader" in text_of(d, "consent-table"))
    consent = httpx.get(f"{served}/v1/audio/voice_consents").json()["data"][0]
    assert consent["name"] == "Nell Reader"
    row = f'tr[data-consent="{consent["id"]}"]'
    assert "% of the statement" in row_text(browser, row)
    assert Select(browser.find_element(By.ID, "voice-consent")).options[0].text == "Nell Reader"
    click(browser, f'{row} button[aria-label="Delete the consent of Nell Reader"]')
    until(browser, lambda d: not row_text(d, row))
    assert httpx.get(f"{served}/v1/audio/voice_consents/{consent['id']}").status_code == 404


def test_a_lexicon_saved_in_the_console_is_spoken_by_a_job_picked_with_it(
        browser: WebDriver, served: str) -> None:
    open_console(browser, served, "voices")
    browser.find_element(By.ID, "lexicon-name").send_keys("console-fruit")
    browser.find_element(By.ID, "lexicon-entries").send_keys("tomato = potato")
    browser.find_element(By.ID, "lexicon-go").click()
    until(browser, lambda d: "console-fruit" in text_of(d, "lexicon-table"))
    entries = browser.find_element(By.ID, "lexicon-entries")
    entries.clear()
    entries.send_keys("tomato = /bənˈænə/")  # saved again under its name: replaced
    browser.find_element(By.ID, "lexicon-go").click()
    until(browser, lambda d: text_of(d, "status") == "lexicon console-fruit saved"
          and not d.find_element(By.ID, "lexicon-go").get_attribute("disabled"))
    lexicon = httpx.get(f"{served}/v1/audio/lexicons/console-fruit").json()
    assert lexicon["entries"] == [{"text": "tomato", "ipa": "bənˈænə"}]

    open_console(browser, served, "jobs")
    plain_text_job(browser, TOMATO)
    Select(browser.find_element(By.ID, "job-format")).select_by_visible_text("wav")
    until(browser, lambda d: len(Select(d.find_element(By.ID, "job-lexicon")).options) > 1)
    Select(browser.find_element(By.ID, "job-lexicon")).select_by_value(lexicon["id"])
    job_id = submit_job(browser)
    Select(browser.find_element(By.ID, "job-lexicon")).select_by_value("")
    until(browser, lambda d: "completed" in row_text(d, f'tr[data-job="{job_id}"]'), 120)
    job = httpx.get(f"{served}/v1/audio/jobs/{job_id}").json()
    assert job["lexicons"] == [lexicon["id"]]
    assert fruit_heard(httpx.get(job["result"]["url"]).content) == {"banana"}


def test_a_book_with_tags_a_cover_and_acx_mastering_from_the_form(
        browser: WebDriver, served: str, tmp_path: Path) -> None:
    from tests.test_audiobook_files import image, read_back

    cover = tmp_path / "cover.jpg"
    cover.write_bytes(image("JPEG"))
    open_console(browser, served, "jobs")
    plain_text_job(browser, "The boats came in at dawn.")
    Select(browser.find_element(By.ID, "job-format")).select_by_visible_text("mp3")
    Select(browser.find_element(By.ID, "job-mastering")).select_by_value("acx")
    browser.find_element(By.ID, "job-title").send_keys("Harbour")
    browser.find_element(By.ID, "job-author").send_keys("A. Writer")
    browser.find_element(By.ID, "job-cover").send_keys(str(cover))
    job_id = submit_job(browser)
    for field in ("job-title", "job-author", "job-cover"):  # leave the form as it was
        browser.find_element(By.ID, field).clear()
    Select(browser.find_element(By.ID, "job-mastering")).select_by_value("none")
    until(browser, lambda d: "completed" in row_text(d, f'tr[data-job="{job_id}"]'), 120)
    job = httpx.get(f"{served}/v1/audio/jobs/{job_id}").json()
    assert job["result"].get("mastering") == {"profile": "acx", "ok": True}, job
    found = read_back(httpx.get(job["result"]["url"]).content)
    assert {"title": "Harbour", "artist": "A. Writer"}.items() <= found["tags"].items()
    assert found["cover"] == cover.read_bytes()


def test_a_chapter_voice_picked_in_the_preview_goes_with_the_job(browser: WebDriver,
                                                                  served: str) -> None:
    open_console(browser, served, "jobs")
    browser.find_element(By.CSS_SELECTOR, 'input[name="job-kind"][value="markdown"]').click()
    box = browser.find_element(By.ID, "job-text")
    box.clear()
    box.send_keys(BOOK)
    browser.find_element(By.ID, "job-preview").click()
    pickers = until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "select.chapter-voice"))
    assert len(pickers) == 2
    Select(pickers[1]).select_by_value("joe")
    job_id = submit_job(browser)
    until(browser, lambda d: "completed" in row_text(d, f'tr[data-job="{job_id}"]'), 120)
    job = httpx.get(f"{served}/v1/audio/jobs/{job_id}").json()
    manifest = httpx.get(job["result"]["manifest_url"]).json()
    assert manifest["options"]["chapter_voices"] == {"1": "joe"}


def test_keyboard_and_labels(browser: WebDriver, served: str) -> None:
    open_console(browser, served)
    browser.find_element(By.ID, "tab-speak").send_keys(Keys.ARROW_RIGHT)
    until(browser, lambda d: d.execute_script("return location.hash") == "#jobs")
    assert browser.switch_to.active_element.get_attribute("id") == "tab-jobs"
    assert browser.find_element(By.ID, "jobs").is_displayed()
    unlabelled = browser.execute_script(
        "return [...document.querySelectorAll('input, select, textarea, button')]"
        ".filter(e => e.type !== 'hidden' && !(e.labels && e.labels.length)"
        " && !e.getAttribute('aria-label') && !e.textContent.trim()).map(e => e.id);")
    assert unlabelled == []


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("console-keyed")
    import redis

    from tests.conftest import redis_url

    redis.Redis.from_url(redis_url(4)).flushdb()
    stack = start_stack(tmp, base_env(tmp, database_url, 4) | {"NARRATOR_API_KEYS": "sesame"})
    yield stack
    stack.stop()


def test_the_console_asks_for_a_key_and_keeps_it_in_the_tab(browser: WebDriver,
                                                            keyed: Stack) -> None:
    browser.get(f"{keyed.url}/#speak")
    until(browser, lambda d: d.find_element(By.ID, "key-dialog").is_displayed())
    browser.find_element(By.ID, "key-input").send_keys("wrong")
    browser.find_element(By.CSS_SELECTOR, "#key-form button").click()
    until(browser, lambda d: d.find_element(By.ID, "key-dialog").is_displayed())  # again
    key = browser.find_element(By.ID, "key-input")
    key.clear()
    key.send_keys("sesame" + Keys.ENTER)
    until(browser, lambda d: Select(d.find_element(By.ID, "speak-voice")).options)
    assert browser.execute_script("return sessionStorage.getItem('narrator-api-key')") == "sesame"
    assert browser.execute_script("return localStorage.length") == 0
    assert browser.find_element(By.ID, "forget-key").is_displayed()
    browser.find_element(By.ID, "forget-key").click()
    assert browser.execute_script("return sessionStorage.getItem('narrator-api-key')") is None


def test_the_page_and_its_files_are_served(served: str) -> None:
    page = httpx.get(f"{served}/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    for asset, kind in (("app.js", "javascript"), ("style.css", "text/css")):
        response = httpx.get(f"{served}/web/{asset}")
        assert response.status_code == 200
        assert kind in response.headers["content-type"]
    assert httpx.get(f"{served}/nowhere").json()["error"]["type"] == "not_found_error"


def _listens_while_it_runs(browser: WebDriver, url: str) -> None:
    """Submit a book from the Jobs tab, press Listen while it runs, and hear it play: the
    stream's audio advances through hls.js while the job is still in progress."""
    open_console(browser, url, "jobs")
    plain_text_job(browser, "")
    browser.execute_script("document.getElementById('job-text').value = arguments[0];",
                           "The harbour lights came on one by one before the rain. " * 300)
    job_id = submit_job(browser)
    click(browser, f'tr[data-job="{job_id}"] button[aria-label="Listen {job_id}"]', 120)
    until(browser, lambda d: shown(d, "live"))
    played = until(browser, lambda d: d.execute_script(
        "const a = document.getElementById('live-audio'); "
        "return a.currentTime > 1.5 ? a.currentTime : 0;"), 60)
    assert played > 1.5
    status = httpx.get(f"{url}/v1/audio/jobs/{job_id}", headers=browser.execute_script(
        "const k = sessionStorage.getItem('narrator-api-key'); "
        "return k ? {Authorization: 'Bearer ' + k} : {};")).json()["status"]
    assert status == "in_progress"  # heard before the book was done
    browser.execute_script("document.getElementById('live-audio').pause();")
    httpx.post(f"{url}/v1/audio/jobs/{job_id}/cancel", headers=browser.execute_script(
        "const k = sessionStorage.getItem('narrator-api-key'); "
        "return k ? {Authorization: 'Bearer ' + k} : {};"))


def test_a_running_book_is_heard_from_the_jobs_tab(browser: WebDriver, served: str) -> None:
    _listens_while_it_runs(browser, served)


def test_a_keyed_servers_stream_is_heard_with_the_key(browser: WebDriver,
                                                      keyed: Stack) -> None:
    """hls.js sends the tab's key with the playlist and every fragment."""
    browser.get(f"{keyed.url}/#speak")
    until(browser, lambda d: d.find_element(By.ID, "key-dialog").is_displayed())
    browser.find_element(By.ID, "key-input").send_keys("sesame" + Keys.ENTER)
    until(browser, lambda d: Select(d.find_element(By.ID, "speak-voice")).options)
    _listens_while_it_runs(browser, keyed.url)
    browser.execute_script("sessionStorage.removeItem('narrator-api-key');")


def _types_and_hears(browser: WebDriver) -> None:
    """Type into "Type and hear": the first sentence is spoken once it ends, the rest on
    "Speak the rest" (WS /v1/audio/speech/stream, as typed)."""
    box = browser.find_element(By.ID, "live-text")
    box.send_keys("The boats came in at dawn. Gulls followed")
    until(browser, lambda d: text_of(d, "live-said") == "Speaking: The boats came in at dawn.")
    box.send_keys(" them home")
    browser.find_element(By.ID, "live-done").click()
    until(browser, lambda d: text_of(d, "live-said").startswith("Spoken: 2 sentence(s)"))
    assert not shown(browser, "error")


def test_typed_text_is_heard_sentence_by_sentence(browser: WebDriver, served: str) -> None:
    open_console(browser, served, "speak")
    _types_and_hears(browser)


def test_typed_text_on_a_keyed_server(browser: WebDriver, keyed: Stack) -> None:
    """The console's key goes with the WebSocket as a subprotocol (browsers set no headers)."""
    browser.get(f"{keyed.url}/#speak")
    until(browser, lambda d: d.find_element(By.ID, "key-dialog").is_displayed())
    browser.find_element(By.ID, "key-input").send_keys("sesame" + Keys.ENTER)
    until(browser, lambda d: Select(d.find_element(By.ID, "speak-voice")).options)
    _types_and_hears(browser)
