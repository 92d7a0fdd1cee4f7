"""``python -m infra.images``: build the images, print their variables, start or stop the
Docker daemon (see the package's docstring).

    python -m infra.images build [NAME ...]   every image, or those named
    python -m infra.images env                KEY=VALUE lines: compose's --env-file
    python -m infra.images daemon start|stop  a daemon where none answers; stop only that one
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from infra.images._docker import DockerError, start_daemon, stop_daemon
from infra.images._recipes import NAMES, build, environment


def cache_dir() -> Path:
    return Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="infra/images/build", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="build the images (default: all)")
    make.add_argument("names", nargs="*", metavar="NAME", help=f"of: {', '.join(NAMES)}")
    commands.add_parser("env", help="print the variables that name the images built here")
    daemon = commands.add_parser("daemon", help="start or stop a Docker daemon")
    daemon.add_argument("action", choices=["start", "stop"])
    arguments = parser.parse_args(argv)
    cache = cache_dir()
    try:
        if arguments.command == "build":
            start_daemon(cache / "docker")
            build(arguments.names or NAMES, cache)
        elif arguments.command == "env":
            for name, value in environment().items():
                print(f"{name}={value}")
        elif arguments.action == "start":
            started = start_daemon(cache / "docker")
            print("docker: started dockerd" if started else "docker: a daemon answers already")
        else:
            stopped = stop_daemon(cache / "docker")
            print(
                "docker: stopped the dockerd started here" if stopped else "docker: nothing to stop"
            )
    except (DockerError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
