"""The page shell (styles, the hover script, print rules) and small HTML helpers."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")  # [text](target), as report.md writes links

STYLE = """
:root{--fg:#1d232a;--muted:#5b6570;--line:#d8dde3;--bad:#b3261e;--good:#1b6e3a}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
max-width:1100px;margin:0 auto;padding:16px 24px}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:18px;margin:28px 0 8px;
border-bottom:1px solid var(--line);padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}
nav a{margin-right:12px;color:var(--muted)}
.verdict{font-size:15px;border-left:4px solid var(--good);padding:6px 12px;background:#f3f8f4}
.verdict.bad{border-color:var(--bad);background:#fbf1f0}.verdict li{margin:2px 0}
table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f4f6f8}
code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre{background:#f4f6f8;padding:8px;overflow-x:auto;white-space:pre-wrap}
.charts{display:flex;flex-wrap:wrap;gap:12px}
figure.chart{margin:0;flex:0 1 540px;max-width:100%}
figure.chart svg{width:100%;height:auto;font-size:11px;fill:var(--fg)}
figcaption{font-weight:600;margin-bottom:2px}
svg polyline{fill:none;stroke-width:1.6}svg .grid{stroke:#eceff2}
svg .rule{stroke:#000;stroke-dasharray:2 3}svg .band{fill:#888;opacity:.07}
svg .band.alarm{fill:#d62728;opacity:.14}svg .mark{stroke:#000;stroke-width:.8}
svg .mark.ring{stroke:#d62728;stroke-width:1.6}svg [data-tip]:hover{stroke:#000;stroke-width:2}
.legend{font-size:12px;color:var(--muted)}.legend span{margin-right:12px;white-space:nowrap}
.legend i{display:inline-block;width:16px;border-top:3px solid;margin-right:4px;
vertical-align:middle}.legend i.dashed{border-top-style:dashed}
.note{font-size:12px;color:var(--muted);margin:2px 0}
#tip{position:absolute;pointer-events:none;background:#1d232a;color:#fff;font-size:12px;
padding:3px 7px;border-radius:3px;max-width:420px}
@media print{body{max-width:none;padding:0;font-size:11px}nav,#tip{display:none}
h2{break-after:avoid}figure.chart,table,.verdict{break-inside:avoid}
.charts{display:block}figure.chart{margin-bottom:10px}}
"""

# Show a hovered element's data-tip beside the pointer.
SCRIPT = """
(()=>{const t=document.getElementById('tip');
document.addEventListener('mouseover',e=>{const el=e.target.closest('[data-tip]');
if(!el){t.hidden=true;return}t.textContent=el.getAttribute('data-tip');t.hidden=false;});
document.addEventListener('mousemove',e=>{if(!t.hidden){t.style.left=(e.pageX+14)+'px';
t.style.top=(e.pageY+14)+'px';}});})();
"""


@dataclass(frozen=True, slots=True)
class Section:
    key: str  # the element id: a stable handle for links and tests
    title: str
    body: str


def page(title: str, sections: Sequence[Section]) -> str:
    nav = "".join(f'<a href="#{s.key}">{escape(s.title)}</a>' for s in sections)
    body = "".join(
        f'<section id="{s.key}"><h2>{escape(s.title)}</h2>{s.body}</section>' for s in sections
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1><nav>{nav}</nav>{body}"
        f'<div id="tip" hidden></div><script>{SCRIPT}</script></body></html>\n'
    )


def verdict(lines: Iterable[str], bad: bool) -> str:
    items = "".join(f"<li>{escape(line)}</li>" for line in lines)
    return f'<div class="verdict{" bad" if bad else ""}"><ul>{items}</ul></div>'


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def bullets(lines: Iterable[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>"


def pre(text: str) -> str:
    return f"<pre>{escape(text)}</pre>"


def markdown(text: str) -> str:
    """The Markdown report.md's own sections use (headings, bullets, tables, paragraphs)
    as HTML, so a section written once for report.md reads the same on the page."""
    out: list[str] = []
    rows: list[list[str]] = []
    fence: list[str] | None = None
    for line in [*text.splitlines(), ""]:
        if line.startswith("```"):
            if fence is None:
                fence = []
            else:
                out.append(pre("\n".join(fence)))
                fence = None
            continue
        if fence is not None:
            fence.append(line)
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(set(c) <= set("-:") for c in cells):
                rows.append(cells)
            continue
        if rows:
            out.append(table(rows[0], ([_inline(c) for c in r] for r in rows[1:])))
            rows = []
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 1, 4)
            out.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<ul><li>{_inline(line[2:])}</li></ul>")
        elif line.startswith("!["):
            continue  # report.md's PNGs: the page draws its own charts
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    return "".join(out).replace("</ul><ul>", "")


def _inline(text: str) -> str:
    parts = escape(text).split("**")
    text = "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))
    parts = text.split("`")
    text = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    return LINK.sub(r'<a href="\2">\1</a>', text)
