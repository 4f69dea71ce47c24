"""The ``ingestwm`` command line."""

from __future__ import annotations

import sys

import click

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ingestwm")
def cli() -> None:
    """ingestwm: a Pravega-style segment store with ingestion-time watermarks."""


@cli.command()
def demo() -> None:
    """Run the main job and print a short report."""
    from .demo import run_demo

    run_demo(click.echo)


@cli.command()
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Durable store directory.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=12345, show_default=True, help="Port (0 picks a free one).")
@click.option("--token", envvar="INGESTWM_TOKEN", default=None, help="Shared secret (env INGESTWM_TOKEN).")
@click.option("--certfile", type=click.Path(dir_okay=False), default=None, help="TLS certificate.")
@click.option("--keyfile", type=click.Path(dir_okay=False), default=None, help="TLS private key.")
@click.option("--sync", type=click.Choice(["always", "interval", "none"]), default=None, help="Log sync.")
def serve(
    data_dir: str | None,
    host: str,
    port: int,
    token: str | None,
    certfile: str | None,
    keyfile: str | None,
    sync: str | None,
) -> None:
    """Serve a segment store until SIGINT/SIGTERM; prints ``listening on HOST:PORT``."""
    from segmentstore.errors import SegmentStoreError
    from segmentstore.server import serve as run_server

    try:
        run_server(data_dir, host, port, token, certfile, keyfile, sync, echo=_echo_flush)  # type: ignore[arg-type]
    except (SegmentStoreError, OSError) as e:
        raise click.ClickException(str(e)) from None


def _echo_flush(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ingestwm`` console script."""
    try:
        cli.main(args=argv, prog_name="ingestwm", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
