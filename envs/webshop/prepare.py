"""The earlier public path of `catalog/prepare.py` (`trl-ragen2 data webshop`), kept so that code written for it keeps
working; the names live in `trl_ragen2_envs.webshop.catalog.prepare` and are re-exported by `trl_ragen2_envs.webshop`."""

from .catalog.prepare import default_data_dir, prepare_webshop_data, prepared_data_dir


__all__ = ["default_data_dir", "prepare_webshop_data", "prepared_data_dir"]
