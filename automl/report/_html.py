"""The report page: one HTML file with inline CSS and, when plotly is there, its
interactive figures with plotly.js inline; the PNGs beside it by relative path. It opens
offline from the run directory (or a copy of ``report/``): no CDN, no network."""

from __future__ import annotations

from html import escape
from typing import Any

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:70rem;padding:0 1rem;color:#222}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #eee;margin:.5rem 0}
code{background:#f4f4f4;padding:0 .2rem}.skip{color:#888;font-style:italic}
figure.live{margin:.5rem 0;overflow-x:auto}
"""


def fmt(v: Any) -> str:
    """A cell's text, None as a dash. Floats: 4 decimals below 10 (scores: ``0.9944``),
    2 up to 1e5 (seconds: ``211.73``), 3 significant digits when tiny (``2.58e-05``,
    a weight decay), 4 significant digits when huge."""
    if v is None:
        return "-"
    if isinstance(v, float):
        a = abs(v)
        if a == 0 or 1e-3 <= a < 10:
            return f"{v:.4f}"
        if a < 1e-3:
            return f"{v:.3g}"
        return f"{v:.2f}" if a < 1e5 else f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k.split('.')[-1]}={fmt(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v)
    return str(v)


def table(columns: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = "".join(
            f'<td class="num">{escape(fmt(v))}</td>' if isinstance(v, (int, float))
            and not isinstance(v, bool) else f"<td>{escape(fmt(v))}</td>" for v in r)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def pairs(items: list[tuple[str, Any]]) -> str:
    return table(["", ""], [[k, v] for k, v in items if v is not None])


def figure(name: str, caption: str, files: dict[str, str], skipped: dict[str, str],
           live: dict[str, str] | None = None) -> str:
    """A figure: its interactive plotly ``<div>`` (``live[name]``) with a link to the PNG,
    else the PNG, else why it was not drawn."""
    if live and name in live:
        png = (f' (<a href="{escape(files[name])}">PNG</a>)' if name in files else "")
        return (f'<figure class="live">{live[name]}'
                f"<figcaption>{escape(caption)}{png}</figcaption></figure>")
    if name in files:
        return (f'<figure><img src="{escape(files[name])}" alt="{escape(caption)}">'
                f"<figcaption>{escape(caption)}</figcaption></figure>")
    return f'<p class="skip">{escape(caption)}: not drawn ({escape(skipped.get(name, "?"))})</p>'


def page(title: str, sections: list[tuple[str, str]], head: str = "") -> str:
    """The whole document; ``head`` goes into ``<head>`` (plotly.js, inline)."""
    parts = [f"<h2>{escape(h)}</h2>\n{body}" for h, body in sections if body]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style>{head}</head>\n"
            f"<body><h1>{escape(title)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n")


def code(text: str) -> str:
    return f"<code>{escape(text)}</code>"
