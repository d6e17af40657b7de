"""Headless Chromium for the browser tests: the flags, and Debian's chromium and chromedriver (installed when missing)."""

import os
import shutil
import subprocess
import sys

import pytest


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def chromium_and_driver() -> tuple[str, str]:
    """Paths of Debian's chromium and chromedriver, installing them (and selenium) when missing and possible."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "selenium>=4.20"], capture_output=True, text=True
        )
        if result.returncode != 0:
            pytest.skip(f"selenium is not installed and pip could not install it: {result.stderr[-300:]}")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        if os.name != "posix" or os.geteuid() != 0 or not shutil.which("apt-get"):
            pytest.skip("chromium/chromedriver are missing and cannot be installed here (needs root and apt-get)")
        install = ["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"]
        if subprocess.run(install, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True)
            result = subprocess.run(install, capture_output=True, text=True)
            if result.returncode != 0:
                pytest.skip(f"apt-get could not install chromium: {result.stderr[-300:]}")
    return shutil.which("chromium"), shutil.which("chromedriver")
