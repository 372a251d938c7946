"""`evalpipe view`: a local web app over the runs of an outputs folder."""

from __future__ import annotations

import click

from evalpipe.cli.common import handle_errors


@click.command()
@click.argument("outputs", default="outputs", type=click.Path(exists=True, file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 or :: for every address of this machine). "
                   "Only this machine can reach the default; another address shows every "
                   "run's transcripts to whoever can reach it.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another name browsers reach the server by (a DNS alias, a reverse "
                   "proxy's name); repeatable. IP addresses, localhost and this machine's "
                   "names need none.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--log", is_flag=True, help="Print one line per request.")
@handle_errors
def view(outputs, host, port, log, allow_hosts):
    """Browse the runs under OUTPUTS (default: outputs) in a web browser.

    Lists every run (status, config, models, date, commit, headline scores), opens
    a run's tables, plots and samples (filtered and paged by the server, so a
    20,000-sample run stays quick), and compares two runs (paired verdict, flips,
    category moves, cost changes). Reads the run files as they are; a run still
    writing refreshes as its samples arrive. Stop with Ctrl-C.
    """
    from evalpipe.errors import InputError
    from evalpipe.view import Outputs, ViewServer

    def stderr(line: str) -> None:
        click.echo(line, err=True)

    try:
        server = ViewServer(Outputs(outputs), host, port, log=stderr if log else None,
                            warn=stderr, allow_hosts=tuple(allow_hosts))
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port} ({exc.strerror or exc})",
                         field="--port", expected="a free port (or --port 0)") from None
    click.echo(f"evalpipe view: {server.url}  (runs under {outputs}; Ctrl-C to stop)")
    if server.hosts.wide:
        port_bound = server.server_address[1]
        click.echo(f"  from other machines: http://<this machine's address or name>:"
                   f"{port_bound}/ (names it answers to: "
                   f"{', '.join(sorted(server.hosts.names))}; add others with --allow-host)")
        click.echo(f"warning: the viewer has no login; anyone who can reach {server.url} "
                   "reads these runs (model replies, prompts, configs)", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
