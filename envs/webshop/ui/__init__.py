"""WebShop in a browser, for people: `python -m trl_ragen2_envs.webshop.ui.server` (needs the `web` extra).

`server.py` is the Flask app; `templates/` and `static/` are its pages and assets. This file imports nothing, so
the environment never loads Flask.
"""
