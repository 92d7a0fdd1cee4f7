"""The ``shoal`` command line (typer); it composes core and services, it holds no rules."""
