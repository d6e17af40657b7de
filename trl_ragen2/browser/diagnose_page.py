"""The page of `trl-ragen2 diagnose --html`: one static HTML file in the run browser's style, without any script.

It shows, for the diagnosed policies: the proxies with their intervals and the regime, the paired differences of
consecutive checkpoints, the regime plane (MI-Est against H(Z|X), the thresholds drawn, one point per policy and
scope), and per policy and scope the cross-scoring matrix (per-token log-probability of each chain under each
context, the own context outlined) next to the chains' text. Every piece of model text goes through
`html.escape`, and the Content-Security-Policy allows no script and no request.
"""

from __future__ import annotations

import html
import math

from .page import STYLE


MAX_CHAINS = 64  # rows and columns of a matrix on the page; the JSON holds all of them
PAGE_STYLE = """
.heat td{width:14px;height:14px;padding:0;border:1px solid #fff}.heat td.own{outline:2px solid #1565c0}
.heat th{font-size:10px;padding:0 3px}.heat td.chain{width:auto;height:auto;min-width:420px;padding:0 6px;white-space:pre-wrap;font-size:12px}
.verdict{background:#fff;border-left:6px solid #1565c0;padding:6px 10px;margin:8px 0}
"""
SCOPE_COLORS = {"first_turn": "#1f77b4", "trajectory": "#ff7f0e"}


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _fmt(metrics: dict, key: str) -> str:
    value, low, high = metrics.get(key), metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.3f}" if low is None or math.isnan(low) else f"{value:.3f} [{low:.3f}, {high:.3f}]"


def _summary(diagnoses) -> str:
    from ..collapse.diagnose import LABELS, TABLE_KEYS

    rows = []
    for diagnosis in diagnoses:
        for scope, report in diagnosis.scopes.items():
            cells = "".join(f"<td>{_fmt(report.metrics, key)}</td>" for key in TABLE_KEYS)
            pvalue = report.metrics.get("retrieval_pvalue", math.nan)
            rows.append(
                f"<tr><td>{_e(diagnosis.name)}</td><td>{scope}</td>{cells}<td>{pvalue:.3g}</td>"
                f"<td><b>{_e(report.regime)}</b></td><td>{_e(diagnosis.engine.get(scope, ''))}</td></tr>"
            )
    head = "".join(f"<th>{_e(LABELS[key].strip())}</th>" for key in TABLE_KEYS)
    return (
        f"<table><tr><th>policy</th><th>scope</th>{head}<th>permutation p</th><th>regime</th><th>engine</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _plane(diagnoses) -> str:
    """The regime plane as an inline SVG: x = H(Z|X), y = MI-Est, threshold lines, one labelled point each."""
    points = [
        (d.name, scope, r.metrics["cond_entropy"], r.metrics["mi_est"])
        for d in diagnoses
        for scope, r in d.scopes.items()
    ]
    mi_t, h_t = diagnoses[-1].mi_threshold, diagnoses[-1].entropy_threshold
    xs, ys = [p[2] for p in points] + [0.0, 2 * h_t], [p[3] for p in points] + [0.0, 2 * mi_t]
    x0, x1, y0, y1 = min(xs), max(xs) * 1.3 + 1e-9, min(ys) - 0.05, max(ys) * 1.1 + 0.05
    w, h, pad = 520, 320, 40

    def sx(x):
        return pad + (x - x0) / (x1 - x0) * (w - 2 * pad)

    def sy(y):
        return h - pad - (y - y0) / (y1 - y0) * (h - 2 * pad)

    parts = [
        f'<svg width="{w}" height="{h}" role="img" aria-label="regime plane">',
        f'<rect x="{pad}" y="{pad}" width="{w - 2 * pad}" height="{h - 2 * pad}" fill="#fff" stroke="#999"/>',
        f'<line x1="{sx(h_t):.1f}" y1="{pad}" x2="{sx(h_t):.1f}" y2="{h - pad}" stroke="#c62828" stroke-dasharray="4"/>',
        f'<line x1="{pad}" y1="{sy(mi_t):.1f}" x2="{w - pad}" y2="{sy(mi_t):.1f}" stroke="#c62828" stroke-dasharray="4"/>',
        f'<text x="{w - pad - 4}" y="{pad + 12}" text-anchor="end">diverse reasoning</text>',
        f'<text x="{pad + 4}" y="{pad + 12}">compressed reasoning</text>',
        f'<text x="{w - pad - 4}" y="{h - pad - 6}" text-anchor="end">template collapse</text>',
        f'<text x="{pad + 4}" y="{h - pad - 6}">low-entropy collapse</text>',
        f'<text x="{w / 2}" y="{h - 8}" text-anchor="middle">H(Z|X), nats/token (threshold {h_t:g})</text>',
        f'<text x="12" y="{h / 2}" transform="rotate(-90 12 {h / 2})" text-anchor="middle">MI-Est, nats/token '
        f"(threshold {mi_t:g})</text>",
    ]
    for name, scope, x, y in points:
        color = SCOPE_COLORS.get(scope, "#444")
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="5" fill="{color}"><title>{_e(name)} {scope}: '
                     f"MI-Est {y:.3f}, H(Z|X) {x:.3f}</title></circle>")  # fmt: skip
        parts.append(f'<text x="{sx(x) + 7:.1f}" y="{sy(y) + 3:.1f}">{_e(name)} ({scope})</text>')
    parts.append("</svg>")
    return "".join(parts)


def _color(value: float, low: float, high: float) -> str:
    """White (low) to dark blue (high) for a per-token log-probability."""
    share = 0.0 if high <= low else (value - low) / (high - low)
    shade = int(255 - 200 * max(0.0, min(1.0, share)))
    return f"rgb({shade},{shade},255)"


def _matrix(report) -> str:
    logp = (report.logp / report.lengths[:, None])[:MAX_CHAINS, :MAX_CHAINS]  # (n, c) nats per token
    head = "".join(f"<th title='{_e(report.columns[c][-300:])}'>{c}</th>" for c in range(logp.shape[1]))
    rows = []
    for n in range(logp.shape[0]):
        own = int(report.target[n])
        best = int(logp[n].argmax())
        finite = logp[n][logp[n].isfinite()]  # each row's own scale: its best context is the darkest cell
        low, high = (finite.min().item(), finite.max().item()) if finite.numel() else (0.0, 0.0)
        cells = "".join(
            f'<td class="{"own" if c == own else ""}" style="background:{_color(v, low, high)}" '
            f'title="chain {n} | context {c}: {v:.3f} nats/token"></td>'
            for c, v in enumerate(logp[n].tolist())
        )
        badge = '<span class="badge hit">hit</span>' if best == own else '<span class="badge miss">miss</span>'
        rows.append(
            f"<tr><th>{n}</th>{cells}<td class='chain'>{badge} <i>{_e(report.groups[n])}</i> "
            f"{_e(report.chains[n][:400])}</td></tr>"
        )
    return (
        f"<p class='notes'>Rows: chains (first {logp.shape[0]}), columns: contexts (hover for their text); within a row, darker = "
        "higher log-probability per token; the outlined cell is the chain's own context, 'hit' when it scores "
        "highest.</p><table class='heat'><tr><th></th>" + head + "<th></th></tr>" + "".join(rows) + "</table>"
    )


def render_diagnosis(diagnoses, comparisons=(), title: str = "trl-ragen2 diagnose") -> str:
    """The page for [`~trl_ragen2.collapse.diagnose.Diagnosis`] objects and their paired comparisons."""
    verdicts = "".join(f"<div class='verdict'><b>{_e(d.name)}</b>: {_e(d.action)}</div>" for d in diagnoses)
    compared = ""
    for comparison in comparisons:
        cells = "".join(
            f"<tr><td>{_e(key)}</td><td>{diff:+.3f} [{low:+.3f}, {high:+.3f}]</td></tr>"
            for key, (diff, low, high) in comparison["differences"].items()
        )
        compared += (
            f"<h3>{_e(comparison['after'])} - {_e(comparison['before'])} (first turn, paired over the same "
            f"prompts)</h3><table><tr><th>proxy</th><th>difference [95%]</th></tr>{cells}</table>"
        )
    text_keys = list(diagnoses[0].text)
    text_rows = "".join(
        f"<tr><td>{_e(d.name)}</td>" + "".join(f"<td>{d.text[k]:.3f}</td>" for k in text_keys) + "</tr>"
        for d in diagnoses
    )
    matrices = "".join(
        f"<details{' open' if i == len(diagnoses) - 1 else ''}><summary>{_e(d.name)}: {scope} cross-scoring "
        f"matrix and chains</summary>{_matrix(report)}</details>"
        for i, d in enumerate(diagnoses)
        for scope, report in d.scopes.items()
    )
    csp = "default-src 'none'; style-src 'unsafe-inline'"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{csp}">
<title>{_e(title)}</title><style>{STYLE}{PAGE_STYLE}</style></head>
<body><header><h1>{_e(title)}: is the reasoning still input-dependent?</h1></header><main>
{verdicts}
<h2>Table 1 proxies</h2>{_summary(diagnoses)}
<p class="notes">Intervals: 95% cluster bootstrap over prompts; p: permutation test of Retrieval-Acc above chance.
Regime thresholds: MI-Est {diagnoses[-1].mi_threshold:g}, H(Z|X) {diagnoses[-1].entropy_threshold:g} nats/token.</p>
{compared}
<h2>Regime plane</h2><div class="panel">{_plane(diagnoses)}</div>
<h2>Text template metrics</h2><table><tr><th>policy</th>{"".join(f"<th>{_e(k)}</th>" for k in text_keys)}</tr>
{text_rows}</table>
<h2>Cross-scoring</h2>{matrices}
</main></body></html>
"""
