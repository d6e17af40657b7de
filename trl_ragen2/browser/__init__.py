"""The run browser: one static HTML file showing what a run wrote, what the filter kept, and what MI retrieval saw.

- `data`: one run's data for the page (curves, logged steps, retrieval views), read from its folder;
- `page`: the HTML page (inline CSS and JS, the data embedded as JSON, a Content-Security-Policy);
- `report`: `build_report` (what `trl-ragen2 view` runs) and `report_html` / `notebook_view` for notebooks.
- `diagnose_page`: the static page of `trl-ragen2 diagnose --html` (proxies, regime plane, cross-scoring matrices).

Entry point layer (`docs/architecture.md`); see `docs/run_browser.md`.
"""
