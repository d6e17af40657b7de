"""The earlier public path of the web UI, kept so that `python -m trl_ragen2_envs.webshop.server` keeps serving it; the
UI lives in `trl_ragen2_envs.webshop.ui.server` (`python -m trl_ragen2_envs.webshop.ui.server`)."""

from .ui.server import build_parser, create_app, main


__all__ = ["build_parser", "create_app", "main"]

if __name__ == "__main__":
    main()
