"""Debian's chromium, headless, driven over the DevTools protocol (a websocket): open a
page with the network off, collect console errors and every request it tries, hover an
element and read what the page shows, take a screenshot.

Also a command: `python -m tests.support.browser report.html --screenshot out.png`.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)
VIEWPORT = (1280, 900)


class Page:
    """One tab, attached with its own session; events are kept as they arrive."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser, self.session = browser, session
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and the browser's own error log lines."""
        found = []
        for e in self.browser.events_of(self.session):
            method, p = e["method"], e.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(p["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                found.append(json.dumps(p["args"])[:500])
            elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
                found.append(p["entry"]["text"])
        return found

    def requests(self) -> list[str]:
        """Every URL the page asked for, the page itself included."""
        return [
            e["params"]["request"]["url"]
            for e in self.browser.events_of(self.session)
            if e["method"] == "Network.requestWillBeSent"
        ]

    def failed(self) -> list[str]:
        return [
            e["params"].get("errorText", "")
            for e in self.browser.events_of(self.session)
            if e["method"] == "Network.loadingFailed"
        ]

    def hover(self, selector: str) -> str | None:
        """Move the pointer onto a point where the element itself is the topmost thing
        drawn (its box's centre may be covered by another mark, or outside a star's shape),
        coming from outside it so that the page sees the pointer enter; the tooltip's
        text, None if none shows."""
        where = self.evaluate(
            f"(() => {{const el = document.querySelector({json.dumps(selector)});"
            "el.scrollIntoView({block: 'center'}); const r = el.getBoundingClientRect();"
            "const at = [0.5, 0.4, 0.6, 0.3, 0.7];"
            "for (const f of at) for (const g of at) {"
            "const x = r.x + r.width * f, y = r.y + r.height * g;"
            "const top = document.elementFromPoint(x, y);"
            "if (top && (top === el || el.contains(top))) return [x, y];}"
            "return [r.x + r.width / 2, r.y + r.height / 2];})()"
        )
        x, y = where
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=0, y=0)
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        return self.evaluate(
            "(() => {const t = document.getElementById('tip');"
            "return t.hidden ? null : t.textContent;})()"
        )

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG."""
        self.evaluate("window.scrollTo(0, 0)")
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        self.viewport()  # capturing beyond the viewport leaves it resized
        return path

    def viewport(self) -> None:
        width, height = VIEWPORT
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )


class Browser:
    """A chromium process with a fresh empty profile, stopped on exit."""

    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-"))
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.ws: ClientConnection = connect(
            self._endpoint(), max_size=None, open_timeout=30, legacy=True
        )
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _endpoint(self) -> str:
        assert self.process.stderr is not None
        deadline = time.monotonic() + 60
        seen = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                break
            seen.append(line)
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                return found.group(1)
        raise RuntimeError("chromium did not start: " + "".join(seen)[-2000:])

    def send(self, method: str, params: dict[str, Any], session: str | None = None) -> dict:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def events_of(self, session: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("sessionId") == session and "method" in e]

    def open(self, path: Path) -> Page:
        """A new tab at file://path, the network emulated offline before it loads."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, session["sessionId"])
        for domain in ("Runtime", "Log", "Network", "Page"):
            page.send(f"{domain}.enable")
        page.send(
            "Network.emulateNetworkConditions",
            offline=True,
            latency=0,
            downloadThroughput=-1,
            uploadThroughput=-1,
        )
        page.viewport()
        page.send("Page.navigate", url=path.resolve().as_uri())
        deadline = time.monotonic() + 30
        while not any(e["method"] == "Page.loadEventFired" for e in self.events_of(page.session)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not load")
            page.evaluate("1")  # reads the events that arrived meanwhile
        return page

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.ws.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


def open_offline(browser: Browser, path: Path, screenshot: Path | None = None) -> Page:
    """The page loaded with the network off, asserted clean: no console error, no request
    but the page itself, none failed; a screenshot kept where asked."""
    page = browser.open(path)
    assert page.errors() == []
    assert page.requests() == [path.resolve().as_uri()]
    assert page.failed() == []
    if screenshot:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(screenshot)
    return page


def sections(page: Page) -> list[str]:
    """The page's section ids, in order."""
    return page.evaluate("[...document.querySelectorAll('section')].map(s => s.id)")


def main() -> None:
    parser = argparse.ArgumentParser(description="Open a report.html offline, screenshot it.")
    parser.add_argument("page", type=Path)
    parser.add_argument("--screenshot", type=Path, required=True, metavar="OUT.png")
    args = parser.parse_args()
    with Browser() as browser:
        page = browser.open(args.page)
        page.screenshot(args.screenshot)
        for line in page.errors() + page.failed():
            print(line)


if __name__ == "__main__":
    main()
