"""``benchledger serve``: the read-only web dashboard (the ``dashboard`` extra)."""

from __future__ import annotations

import ipaddress
import os

import click

from benchledger.cli.logs import configure_server_logging
from benchledger.cli.output import CommandError
from benchledger.cli.settings import Settings, pass_settings

TOKEN_ENV = "BENCHLEDGER_DASHBOARD_TOKEN"
#: The dashboard's command-line refusals (documented in docs/errors.md).
DASHBOARD_MISSING = "ledger.dashboard.not_installed"
TOKEN_REQUIRED = "ledger.dashboard.token_required"
INSTALL_HINT = "the dashboard is not installed: pip install 'benchledger[dashboard]'"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("serve", short_help="Serve the read-only web dashboard.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8040, show_default=True)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    default=None,
    help=f"Require this token on every request (env {TOKEN_ENV}); "
    "needed to bind anything but a loopback address.",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(0.5, 60),
    default=2.0,
    show_default=True,
    help="How often the pages refresh their numbers.",
)
@pass_settings
def serve(settings: Settings, host: str, port: int, token: str | None, poll_seconds: float) -> None:
    """Serve a read-only dashboard of the database's campaigns and studies.

    Binds 127.0.0.1 by default. Any other address needs --token (or
    BENCHLEDGER_DASHBOARD_TOKEN): open http://HOST:PORT/?token=TOKEN once in a
    browser (it becomes a cookie), or send "Authorization: Bearer TOKEN".
    """
    try:
        import uvicorn

        from benchledger.dashboard import DashboardSettings, create_app
    except ImportError:
        raise CommandError(DASHBOARD_MISSING, INSTALL_HINT) from None
    token = token or None
    if not is_loopback(host) and token is None:
        raise CommandError(
            TOKEN_REQUIRED,
            f"binding {host} exposes the ledger beyond this machine: pass --token "
            f"(or set {TOKEN_ENV})",
        )
    database = settings.database()
    app = create_app(database, DashboardSettings(token=token, poll_seconds=poll_seconds))
    shown = f"[{host}]" if ":" in host else host
    suffix = "/?token=…" if token else "/"
    click.echo(f"benchledger dashboard on http://{shown}:{port}{suffix} (Ctrl-C to stop)", err=True)
    level = os.environ.get("BENCHLEDGER_LOG", "warning")
    # uvicorn's loggers (its access log too) in the command's --log-format, tokens scrubbed.
    configure_server_logging(settings.logging, level)
    uvicorn.run(app, host=host, port=port, log_level=level, log_config=None)
