"""The daemon's web page in a real browser (scripts/e2e-browser runs this; see it for the set-up).

Headless Chromium from Debian, driven through Selenium 4 (PyPI) and Debian's chromedriver, loads
the page from `splitfetch serve` on 127.0.0.1 and uses it as a person would: signs in, adds
downloads (one with a mirror and a checksum), pauses, resumes, reorders, sets a speed limit, and
watches the segment map; then checks that names made of HTML stay text. Every server is started
here and stopped by PID; the daemon's API is the check of what the page did.
"""
import http.client
import os
import sys
import time
import urllib.parse

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from daemon_test import Daemon, TestServer, call, check, free_port, sha256, wait_for
import daemon_test

MiB = 1 << 20
PAYLOAD = "<img src=x onerror=alert(1)>"


def browser(chromedriver, width, height):
    options = webdriver.ChromeOptions()
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--no-proxy-server", f"--window-size={width},{height}"]:
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service(chromedriver), options=options)


def viewport(driver, width, height, mobile):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})


def rows(driver):
    """The page's downloads in the order shown (GIDs), read in one step: the list is redrawn often."""
    return driver.execute_script("return Array.from(document.querySelectorAll('#downloads > li'), e => e.dataset.gid)")


def row_status(driver, gid):
    """The state the page shows for a download (read in one step: the list is redrawn often)."""
    return driver.execute_script(
        "const row = document.querySelector(`#downloads > li[data-gid='${arguments[0]}']`); return row && row.dataset.status", gid)


def click(driver, gid, action):
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            driver.find_element(By.CSS_SELECTOR, f"#downloads > li[data-gid='{gid}'] button[data-action='{action}']").click()
            return True
        except Exception:
            time.sleep(0.1)
    return False


def add_through_page(driver, urls, mirrors="", checksum="", server_names=False):
    if driver.find_element(By.ID, "add-panel").get_attribute("open") is None:
        driver.find_element(By.CSS_SELECTOR, "#add-panel summary").click()
    driver.find_element(By.ID, "add-urls").send_keys("\n".join(urls))
    if mirrors:
        driver.find_element(By.ID, "add-mirrors").send_keys(mirrors)
    if checksum:
        driver.find_element(By.ID, "add-checksum").send_keys(checksum)
    box = driver.find_element(By.ID, "add-cd")
    if box.is_selected() != server_names:
        box.click()
    driver.find_element(By.CSS_SELECTOR, "#add-form button[type=submit]").click()
    wait_for("the form to clear", lambda: driver.find_element(By.ID, "add-urls").get_attribute("value") == "", 20)
    error = driver.find_element(By.ID, "add-error").text
    check(error == "", f"the page adds {len(urls)} download(s) without an error", error)


def gids_of(port, secret, names):
    """The GIDs of the downloads whose files have these names (any state)."""
    found = {}
    for method, params in [("aria2.tellActive", []), ("aria2.tellWaiting", [0, 1000]), ("aria2.tellStopped", [0, 1000])]:
        for status in call(port, method, *params, token=secret)[1]["result"]:
            name = os.path.basename(status["files"][0]["path"])
            if name in names:
                found[name] = status["gid"]
    return found


def status(port, secret, gid, key="status"):
    return call(port, "aria2.tellStatus", gid, [key], token=secret)[1]["result"][key]


def headers_and_guard(port):
    """The page's own headers, and the Host check in front of it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/")
    response = conn.getresponse()
    body = response.read().decode()
    csp = response.getheader("Content-Security-Policy") or ""
    check(response.status == 200 and "script-src 'self'" in csp and "default-src 'none'" in csp
          and "unsafe-inline" not in csp and response.getheader("X-Content-Type-Options") == "nosniff",
          "the page is served with a Content-Security-Policy (scripts from the daemon only, none inline) and nosniff", csp)
    check("<script>" not in body and "http://" not in body and "https://" not in body,
          "the page names no other site and has no inline script")
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", "/app.js", skip_host=True)
    conn.putheader("Host", "attacker.example")
    conn.endheaders()
    response = conn.getresponse()
    response.read()
    check(response.status == 403, "a request for the page under another Host name is refused (DNS rebinding)", response.status)
    conn.close()


def main():
    daemon_bin, server_bin, chromedriver, work, shots = sys.argv[1:6]
    os.makedirs(shots, exist_ok=True)
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"
    server = TestServer(server_bin, work, rate=MiB // 2)
    mirror = TestServer(server_bin, work, rate=MiB // 2)
    state, root = os.path.join(work, "web-state"), os.path.join(work, "web-root")
    os.makedirs(root)
    d = Daemon(daemon_bin, state, root, free_port(), ["-j", "1", "--split", "4"]).start()
    secret = d.secret()
    port = d.port
    driver = None
    try:
        headers_and_guard(port)
        driver = browser(chromedriver, 1280, 800)
        viewport(driver, 1280, 800, False)
        page = f"http://127.0.0.1:{port}/"
        driver.get(page)
        check(wait_for("the sign-in form", lambda: driver.find_element(By.ID, "signin").is_displayed(), 20),
              "a new browser is asked for the secret")
        driver.find_element(By.ID, "secret").send_keys(secret)
        driver.find_element(By.CSS_SELECTOR, "#signin-form button").click()
        check(wait_for("the app", lambda: driver.find_element(By.ID, "app").is_displayed(), 20), "the secret signs the page in")
        check(secret not in driver.current_url and driver.execute_script("return localStorage.getItem('splitfetch.secret')") == secret,
              "the secret is kept in the browser's storage, not in the URL")
        # The test's own witness: any alert the page would raise is counted, not shown.
        driver.execute_script("window.__alerts = 0; window.alert = function () { window.__alerts += 1; };")

        # Three downloads: the first with a mirror and a checksum; one at a time (-j 1).
        sizes = {"a.bin": 24 * MiB, "b.bin": 6 * MiB, "c.bin": 6 * MiB}
        seeds = {"a.bin": 1, "b.bin": 2, "c.bin": 3}
        url = {name: server.url(size, seeds[name], name) for name, size in sizes.items()}
        add_through_page(driver, [url["a.bin"]], mirrors=mirror.url(sizes["a.bin"], 1, "a.bin"),
                         checksum="sha-256=" + server.want(sizes["a.bin"], 1))
        add_through_page(driver, [url["b.bin"], url["c.bin"]])
        gids = gids_of(port, secret, set(sizes))
        check(len(gids) == 3, "the daemon has the three downloads the page added", gids)
        a, b, c = gids.get("a.bin"), gids.get("b.bin"), gids.get("c.bin")
        uris = call(port, "aria2.getUris", a, token=secret)[1]["result"]
        check(len(uris) == 2, "the first download has its mirror", uris)

        # The segment map: one row per connection while the download runs.
        def map_rows(gid):
            return driver.execute_script(
                "return Array.from(document.querySelectorAll(`#downloads > li[data-gid='${arguments[0]}'] .segrow.connection`),"
                " e => Number(e.dataset.connection))", gid)

        def connections(gid):
            answer = call(port, "splitfetch.tellConnections", gid, token=secret)[1].get("result") or []
            return sorted(c["id"] for c in answer)

        shown = wait_for("the segment map", lambda: len(map_rows(a)) >= 2 and sorted(map_rows(a)) == connections(a), 30)
        check(shown, "the segment map shows one row per connection while the download runs",
              f"rows {map_rows(a)}, connections {connections(a)}")
        def written():
            return driver.execute_script(
                "return Array.from(document.querySelectorAll(`#downloads > li[data-gid='${arguments[0]}'] .segrow.file .written`))"
                ".filter(e => parseFloat(e.style.width) > 0).length", a)

        # The connections can be there before their first bytes are written: wait for those.
        check(wait_for("written ranges in the map", lambda: written() >= 1, 30), "the map's file row shows ranges being written",
              written())

        # Reorder the two waiting ones (c before b), pause and resume b.
        check(click(driver, b, "down"), "the Down button is there for a waiting download")
        waiting = lambda: [x["gid"] for x in call(port, "aria2.tellWaiting", 0, 10, token=secret)[1]["result"]]
        check(wait_for("c before b", lambda: waiting() == [c, b], 10), "Down moves a download below the next one", waiting())
        check(wait_for("the list redrawn", lambda: rows(driver)[1:3] == [c, b], 10), "the list shows the new order", rows(driver))
        check(click(driver, b, "pause") and wait_for("b paused", lambda: status(port, secret, b) == "paused", 10)
              and wait_for("b shown paused", lambda: row_status(driver, b) == "paused", 10), "Pause pauses a download")
        check(click(driver, b, "resume") and wait_for("b waiting", lambda: status(port, secret, b) == "waiting", 10)
              and wait_for("b shown waiting", lambda: row_status(driver, b) == "waiting", 10), "Resume puts it back in the queue")

        # A priority being typed survives a redraw (here caused through the API), then is set.
        box = driver.find_element(By.CSS_SELECTOR, f"#downloads > li[data-gid='{c}'] input[data-field='priority']")
        box.clear()
        box.send_keys("7")
        call(port, "aria2.pause", b, token=secret)
        redrawn = wait_for("b shown paused", lambda: row_status(driver, b) == "paused", 10)
        kept = driver.execute_script(
            "const e = document.activeElement; return !!e && e.dataset.field === 'priority'"
            " && e.closest('li').dataset.gid === arguments[0] && e.value === '7'", c)
        check(redrawn and kept, "a priority being typed keeps its text and focus when the list is redrawn")
        call(port, "aria2.unpause", b, token=secret)
        wait_for("b waiting", lambda: row_status(driver, b) == "waiting", 10)
        check(click(driver, c, "priority")
              and wait_for("c's priority", lambda: status(port, secret, c, "splitfetch.priority") == "7", 10),
              "Set priority gives a download its priority", status(port, secret, c, "splitfetch.priority"))

        done = wait_for("all complete", lambda: all(row_status(driver, g) == "complete" for g in (a, b, c)), 120)
        check(done, "the page shows all three downloads complete", {g: row_status(driver, g) for g in (a, b, c)})
        whole = all(sha256(os.path.join(root, name)) == server.want(size, seeds[name]) for name, size in sizes.items())
        check(whole, "the three files are whole (SHA-256)")
        stopped = [x["gid"] for x in call(port, "aria2.tellStopped", 0, 10, token=secret)[1]["result"]]
        check(stopped == [a, c, b], "they finished in the order the page set: c before b", stopped)

        # A speed limit set on the page holds the next download.
        driver.find_element(By.ID, "limit").send_keys("1M")
        driver.find_element(By.CSS_SELECTOR, "#limit-form button").click()
        check(wait_for("the limit", lambda: call(port, "aria2.getGlobalOption", token=secret)[1]["result"]
                       .get("max-overall-download-limit") == "1M", 10), "the page sets the global speed limit")
        size = 5 * MiB
        started = time.time()
        add_through_page(driver, [server.url(size, 4, "d.bin")])
        dgid = gids_of(port, secret, {"d.bin"}).get("d.bin")
        check(wait_for("d complete", lambda: row_status(driver, dgid) == "complete", 60), "the next download completes")
        elapsed = time.time() - started
        check(elapsed >= 0.8 * size / MiB and sha256(os.path.join(root, "d.bin")) == server.want(size, 4),
              "it honoured the limit: 5 MiB at 1 MiB/s (2 MiB/s without) took at least 4 s, and is whole",
              f"{elapsed:.1f} s, {size / elapsed / MiB:.2f} MiB/s")

        # Names made of HTML, from the URL and from Content-Disposition, stay text.
        driver.find_element(By.ID, "limit").clear()
        driver.find_element(By.ID, "limit").send_keys("0")
        driver.find_element(By.CSS_SELECTOR, "#limit-form button").click()
        by_url = server.url(MiB, 5, urllib.parse.quote(PAYLOAD, safe=""))
        disposition = urllib.parse.quote(f'attachment; filename="{PAYLOAD}.txt"', safe="")
        by_header = f"http://127.0.0.1:{server.port}/size/{MiB}/seed/6/plain.bin?cd={disposition}"
        add_through_page(driver, [by_url])
        add_through_page(driver, [by_header], server_names=True)
        names = lambda: driver.execute_script("return Array.from(document.querySelectorAll('#downloads .name'), e => e.textContent)")
        both = wait_for("both named", lambda: PAYLOAD in names() and PAYLOAD + ".txt" in names(), 60)
        check(both, "a name from the URL and one from Content-Disposition are shown as text", names())
        check(driver.execute_script("return document.querySelectorAll('#downloads img').length") == 0
              and driver.execute_script("return window.__alerts") == 0, "no element and no script came from those names")
        try:
            driver.switch_to.alert
            check(False, "no alert is open")
        except NoAlertPresentException:
            check(True, "no alert is open")
        check(os.path.exists(os.path.join(root, PAYLOAD + ".txt"))
              and sha256(os.path.join(root, PAYLOAD + ".txt")) == server.want(MiB, 6),
              "the file named by Content-Disposition is whole under that name")
        foreign = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith(location.origin + '/') && !n.startsWith('ws://' + location.host + '/'))")
        check(foreign == [], "every asset and connection of the page is the daemon's own (it works offline)", foreign)

        # A phone-width screen: nothing wider than the screen; a live map for the screenshot.
        big = 48 * MiB
        add_through_page(driver, [server.url(big, 7, "e.bin")])
        egid = gids_of(port, secret, {"e.bin"}).get("e.bin")
        wait_for("e's map", lambda: len(map_rows(egid)) == 4, 30)
        if driver.find_element(By.ID, "add-panel").get_attribute("open") is not None:
            driver.find_element(By.CSS_SELECTOR, "#add-panel summary").click()
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(os.path.join(shots, "web-1280x800.png"))
        viewport(driver, 390, 844, True)
        time.sleep(1)  # a progress message or two redraws at the new width (not a timing assertion)
        width = driver.execute_script("return document.documentElement.scrollWidth")
        check(width <= 390, "at 390 px nothing is wider than the screen", width)
        driver.save_screenshot(os.path.join(shots, "web-390x844.png"))
        check(all(os.path.getsize(os.path.join(shots, f)) > 10000 for f in ["web-1280x800.png", "web-390x844.png"]),
              "screenshots at 1280 × 800 and 390 × 844 are saved", shots)
        call(port, "aria2.remove", egid, token=secret)
    finally:
        if driver:
            driver.quit()
        d.stop()
        server.stop()
        mirror.stop()
    print(f"e2e-browser: {daemon_test.PASSED} passed, {daemon_test.FAILED} failed")
    sys.exit(1 if daemon_test.FAILED else 0)


if __name__ == "__main__":
    main()
