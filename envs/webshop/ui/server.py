"""WebShop in a browser, for people: the same engine, goals and reward as the agent's environment.

    python -m trl_ragen2_envs.webshop.ui.server --port 3000 [--data-dir DIR] [--log-dir logs/]

(`DIR`: a WebShop data folder, e.g. `~/.cache/trl_ragen2/webshop-data/small` after `trl-ragen2 data webshop small`.)

Each browser session (a signed cookie) owns one `WebShopEnv` episode: the instruction and search box, results
pages, product pages with selectable options, description / features / reviews, "Buy Now", then the score and
every part of it. Every click goes through `WebShopEnv.step`, so people and agents play by the same rules, and
with `--log-dir` each browser session appends the environment's per-step JSONL records (`../episode_log.py`) to
`<log-dir>/<session>.jsonl`. `/replay` lists the logged episodes of the log folder (from the UI or from agent
runs with `log_path`) and shows them step by step.

Safe defaults: binds to 127.0.0.1 (pass `--host 0.0.0.0` to expose it), escapes all product text (Jinja
autoescape), and loads nothing from outside: local CSS and a local placeholder image instead of product photos.
Requests over 64 KiB get 413. The cookie holds only the session id: messages ("That did nothing: ...") stay on
the server, cut to one line. `/replay` reads only regular `*.jsonl` files with plain names, skips lines it cannot
use, and answers 404, never 500, for a name or episode it cannot show. Needs Flask: `pip install "trl-ragen2[web]"`.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..env import WebShopEnv
from ..episode_log import read_episodes


DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 3000
MAX_SESSIONS = 1000  # browser sessions kept in memory; the oldest is dropped beyond this
MAX_REQUEST_BYTES = 64 << 10  # a form post is a few hundred bytes; larger requests get 413
MAX_MESSAGE_CHARS = 300  # a message shown to a person is cut here
MAX_REPLAY_FILES = 200  # /replay lists the most recently written logs first, this many
LOG_NAME = re.compile(r"^[\w.-]{1,200}\.jsonl$", re.ASCII)
MAX_EPISODE_ID_CHARS = 200
PAGE_TEMPLATES = {"search": "search.html", "results": "results.html", "item": "item.html", "done": "done.html"}


def _import_flask():
    try:
        import flask
    except ImportError:
        raise ImportError('The WebShop web UI needs Flask: pip install "trl-ragen2[web]"') from None
    return flask


class _Episodes:
    """Browser session id -> its `WebShopEnv`, bounded in size (least recently used dropped first)."""

    def __init__(self, env_kwargs: dict[str, Any], log_dir: Path | None):
        self.env_kwargs, self.log_dir = env_kwargs, log_dir
        self._envs: OrderedDict[str, WebShopEnv] = OrderedDict()
        # The message to show on a session's next page: kept here, not in the cookie (4 KB), and cut to a line.
        self._messages: dict[str, str] = {}
        self.lock = threading.Lock()

    def say(self, sid: str, message: str) -> None:
        """Show `message` (cut to `MAX_MESSAGE_CHARS`) on the session's next page."""
        self._messages[sid] = (
            message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 3] + "..."
        )

    def pop_message(self, sid: str) -> str | None:
        return self._messages.pop(sid, None)

    def get(self, sid: str) -> WebShopEnv | None:
        env = self._envs.get(sid)
        if env is not None:
            self._envs.move_to_end(sid)
        return env

    def start(self, sid: str, split: str, seed: int | None, goal_id: int | None) -> WebShopEnv:
        env = self._envs.get(sid)
        if env is None or env.split != split:
            log_path = str(self.log_dir / f"{sid}.jsonl") if self.log_dir else None
            env = WebShopEnv(split=split, log_path=log_path, **self.env_kwargs)
        if goal_id is not None:
            env.reset_to_goal(goal_id)
        else:
            env.reset(seed=seed)
        self._envs[sid] = env
        self._envs.move_to_end(sid)
        while len(self._envs) > MAX_SESSIONS:
            dropped, _ = self._envs.popitem(last=False)
            self._messages.pop(dropped, None)
        return env


def _log_files(logs: Path | None) -> list[Path]:
    """The replayable logs of the folder: regular `*.jsonl` files with a plain name, newest first, at most
    `MAX_REPLAY_FILES`."""
    if logs is None:
        return []
    found = []
    for path in logs.glob("*.jsonl"):
        try:
            if LOG_NAME.match(path.name) and path.is_file():
                found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return [path for _, path in sorted(found, key=lambda item: (-item[0], item[1].name))[:MAX_REPLAY_FILES]]


def _int_arg(value: str | None) -> int | None:
    if value is None or value.strip() == "":
        return None
    if len(value) > 20:  # no seed or goal index is this long (and int() of a huge string is slow)
        return None
    try:
        return int(value)
    except ValueError:
        return None


def create_app(
    data_dir: str | None = None,
    log_dir: str | None = None,
    split: str = "test",
    secret_key: str | None = None,
    **env_kwargs: Any,
):
    """The Flask app. `env_kwargs` are further `WebShopEnv` keywords (e.g. `procedural_products`, `cache_dir`)."""
    flask = _import_flask()
    here = Path(__file__).resolve().parent
    app = flask.Flask(__name__, template_folder=str(here / "templates"), static_folder=str(here / "static"))
    app.secret_key = secret_key or secrets.token_hex(32)
    app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    logs = Path(log_dir) if log_dir else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    episodes = _Episodes({"data_dir": data_dir, **env_kwargs}, logs)
    default_split = WebShopEnv(data_dir=data_dir, split=split, **env_kwargs).split  # validates and loads once

    def session_id() -> str:
        if "sid" not in flask.session:
            flask.session["sid"] = secrets.token_hex(8)
        return flask.session["sid"]

    def current_env() -> WebShopEnv:
        sid = session_id()
        env = episodes.get(sid)
        return env if env is not None else episodes.start(sid, default_split, None, None)

    @app.get("/")
    def index():
        with episodes.lock:
            env = current_env()
            view = env.session.view()
            context = {
                "view": view,
                "env": env,
                "observation": env.render(),
                "turn": env.turn,
                "message": episodes.pop_message(session_id()),
            }
        return flask.render_template(PAGE_TEMPLATES.get(view["page"], "subpage.html"), **context)

    @app.route("/new", methods=["GET", "POST"])
    def new_episode():
        values = flask.request.values
        chosen_split = values.get("split") or default_split
        with episodes.lock:
            try:
                episodes.start(session_id(), chosen_split, _int_arg(values.get("seed")), _int_arg(values.get("goal")))
            except ValueError as error:
                episodes.say(session_id(), str(error))
                episodes.start(session_id(), default_split, None, None)
        return flask.redirect(flask.url_for("index"))

    @app.post("/act")
    def act():
        form = flask.request.form
        if "search" in form:
            action = f"search[{form['search']}]"
        elif "click" in form:
            action = f"click[{form['click']}]"
        else:
            action = ""
        with episodes.lock:
            _, _, _, info = current_env().step(action)
            if not info["action_is_valid"]:
                episodes.say(session_id(), f"That did nothing: {info['invalid_reason']}.")
        return flask.redirect(flask.url_for("index"))

    @app.get("/replay")
    def replay_index():
        files = []
        for path in _log_files(logs):
            try:
                files.append((path.name, list(read_episodes(path).items())))
            except OSError:  # removed, unreadable or not a regular file: left out of the list
                continue
        return flask.render_template("replay_index.html", files=files, log_dir=logs)

    @app.get("/replay/<name>/<episode>")
    def replay(name: str, episode: str):
        if logs is None or not LOG_NAME.match(name) or len(episode) > MAX_EPISODE_ID_CHARS:
            flask.abort(404)
        try:
            records = read_episodes(logs / name).get(episode)
        except OSError:  # missing, unreadable or not a regular file
            flask.abort(404)
        if not records:
            flask.abort(404)
        step = min(max(_int_arg(flask.request.args.get("step")) or 0, 0), len(records) - 1)
        return flask.render_template("replay.html", name=name, episode=episode, records=records, step=step)

    return app


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the WebShop web UI command."""
    parser = argparse.ArgumentParser(description="WebShop web UI (same engine and reward as the agent's environment)")
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="interface to bind (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default 3000)")
    parser.add_argument(
        "--data-dir", default=None, help="WebShop data folder (default: $WEBSHOP_DATA_DIR, else procedural)"
    )
    parser.add_argument("--log-dir", default=None, help="write per-step JSONL logs here and replay them at /replay")
    parser.add_argument("--split", default="test", help="goal split for new episodes: train, validation or test")
    parser.add_argument("--procedural-products", type=int, default=1000, help="size of the procedural catalogue")
    parser.add_argument("--procedural-seed", type=int, default=0, help="seed of the procedural catalogue")
    parser.add_argument("--cache-dir", default=None, help="search index cache folder")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Command line: serve the WebShop web UI (Flask) until interrupted."""
    args = build_parser().parse_args(argv)
    app = create_app(
        data_dir=args.data_dir,
        log_dir=args.log_dir,
        split=args.split,
        procedural_products=args.procedural_products,
        procedural_seed=args.procedural_seed,
        cache_dir=args.cache_dir,
        binary_reward=False,
    )
    app.run(host=args.host, port=args.port, threaded=True, debug=bool(os.environ.get("WEBSHOP_UI_DEBUG")))


if __name__ == "__main__":
    main()
