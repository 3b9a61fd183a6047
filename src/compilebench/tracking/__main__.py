"""Where the MLflow UI shows compilebench's runs.

python -m compilebench.tracking --ui-url http://127.0.0.1:5000    # prints the runs table's address (make ui)
"""

from __future__ import annotations

import socket
import urllib.parse

from compilebench.tracking.store import LOGGER, StoreError, ui_url


def port_taken(base: str) -> bool:
    """Whether another program already listens where the UI at `base` would (a bind fails there, as the UI's
    would; SO_REUSEADDR as a server sets it, so a port only in TIME_WAIT counts as free)."""
    address = urllib.parse.urlsplit(base)
    with socket.socket(socket.AF_INET6 if ":" in (address.hostname or "") else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address.hostname or "127.0.0.1", address.port or 80))
        except OSError:
            return True
    return False


def port_problem(base: str) -> str | None:
    """Why `base` names no port a UI can serve on (None: it does): a whole number from 1 to 65535."""
    try:
        port = urllib.parse.urlsplit(base).port
    except ValueError:
        port = None
    if port is None or not 1 <= port <= 65535:
        given = base.rsplit(":", 1)[-1] if base.count(":") > 1 else "none"
        return f"the UI's port must be a whole number from 1 to 65535 (make ui PORT=5001), got {given!r} in {base}"
    return None


def main() -> None:
    import argparse

    from compilebench.config import stage_config

    parser = argparse.ArgumentParser(description="Print where the MLflow UI shows compilebench's runs table.")
    parser.add_argument("--ui-url", required=True, metavar="BASE", help="the UI's address, e.g. http://127.0.0.1:5000")
    args = parser.parse_args()
    problem = port_problem(args.ui_url)
    if problem:
        parser.error(problem)
    config = stage_config()
    try:
        url = ui_url(config.paths.tracking_uri, args.ui_url)
    except StoreError as error:
        LOGGER.error("%s", error)
        raise SystemExit(2) from None
    if port_taken(args.ui_url):
        port = urllib.parse.urlsplit(args.ui_url).port
        LOGGER.error(
            "%s is taken: another program listens there, so the UI cannot start; pick a free port, e.g. "
            "`make ui PORT=%d`",
            args.ui_url,
            (port or 5000) + 1,
        )
        raise SystemExit(2)
    print(f"compilebench runs: {url}")


if __name__ == "__main__":
    main()
