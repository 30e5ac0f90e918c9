"""The ``rayjobs`` click group every command module registers on, and its one-line usage errors."""

from __future__ import annotations

from typing import Any, Optional

import click


class OneLineUsage(click.ClickException):
    """A usage error said the project's way: ``error: <command>: <what>; see <command> --help``, exit 2
    (click's own is four lines: the usage, a hint, a blank line, the error)."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def usage_line(e: click.UsageError, path: str = "rayjobs") -> str:
    """One line for click's usage error ``e`` of the command ``path`` (``rayjobs status``): what was
    wrong and where the command's help is."""
    path = e.ctx.command_path if e.ctx is not None else path
    if isinstance(e, click.MissingParameter) and e.param is not None:
        what = (f"missing {e.param.human_readable_name}" if e.param.param_type_name == "argument"
                else f"missing option {e.param.get_error_hint(e.ctx) if e.ctx else e.param.name}")
    elif isinstance(e, click.NoSuchOption):
        what = f"no such option {e.option_name}"
        if e.possibilities:
            what += f" (did you mean {', '.join(sorted(e.possibilities))}?)"
    else:
        msg = " ".join(e.format_message().split()).rstrip(".")
        what = msg[:1].lower() + msg[1:]
    return f"{path}: {what}; see {path} --help"


class Command(click.Command):
    """A click command whose usage errors (a missing argument, an unknown option, a bad value) are one line."""

    def make_context(self, info_name: Optional[str], args: list[str], parent: Optional[click.Context] = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            # click's parser leaves ctx unset for some (an option without its value): name the command here
            path = " ".join(p for p in (parent.command_path if parent else "", info_name or "rayjobs") if p)
            raise OneLineUsage(usage_line(e, path)) from None


class Group(Command, click.Group):
    """A click group of such commands (its subgroups too); an unknown command is one line as well."""

    command_class = Command
    group_class = type  # subgroups (``rayjobs local``) are of this class too

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:  # an unknown command, or one a command's own code raised
            raise OneLineUsage(usage_line(e, ctx.command_path)) from None


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rayjobs")
def main() -> None:
    """Run many verl experiments on one long-lived Ray cluster.

    Submit with: python -m rayjobs.submit +exp=NAME [verl.key=value ...] (add -m for a sweep).
    """
    # A command's rows (10,000 jobs: ~10^6 small objects) live to its end: at Python's default
    # thresholds the collector re-scans them again and again (~0.2 s of a list of 10,000, measured)
    import gc

    gc.set_threshold(50_000, 20, 100)
