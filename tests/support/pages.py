"""What an HTML page would fetch or link to outside itself, read from its source."""

from __future__ import annotations

import re
from html.parser import HTMLParser

ABSOLUTE = re.compile(r"[a-z][a-z0-9+.-]*:|//", re.IGNORECASE)
FETCHED = ("src", "srcset", "poster", "data", "xlink:href", "action")  # loaded, wherever


class References(HTMLParser):
    """Every URL a page loads, and every link of its that leaves the directory."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in FETCHED or (name == "href" and ABSOLUTE.match(value or "")):
                self.urls.append(value or "")


def external(page: str) -> list[str]:
    """What the page would fetch, or link to outside its directory (a sibling report is
    fine: a click, not a load)."""
    parser = References()
    parser.feed(page)
    found = list(parser.urls)
    found += re.findall(r"url\(|@import|//[a-z0-9.-]+\.[a-z]{2,}/", page.split("<body>")[0])
    found += [t for t in parser.tags if t in ("link", "img", "iframe", "object", "embed")]
    return found
