"""Write docs/cli.md, the reference of every command and flag, from the command line's own
parser (``toolgym.cli.build_parser``), so the page says what the parser accepts.

    python docs/cli_reference.py            # rewrites docs/cli.md
    python docs/cli_reference.py --check    # exit 1 if docs/cli.md is not what it would write

``tests/test_cli_reference.py`` runs the check: a flag added to the parser without
regenerating the page fails the test suite with this command in the message.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"


def _cell(text: str) -> str:
    """Markdown-table-safe text: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _help(action: argparse.Action) -> str:
    """The action's help with argparse's ``%(default)s``-style fields filled in."""
    text = action.help or ""
    if "%" in text:
        fields = {**vars(action), "prog": ""}
        try:
            text = text % fields
        except (KeyError, TypeError, ValueError):
            pass
    return text


def _argument(action: argparse.Action) -> str:
    """What follows the flag: its metavar or choices, nothing for a switch."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        return str(action.metavar) if not isinstance(action.metavar, tuple) else " ".join(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper()


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or action.required:
        return ""
    if isinstance(action.default, list | tuple) and not action.default:
        return ""
    return f"`{action.default}`"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """``{name: (one-line help, parser)}`` for every subcommand, in the order they were added."""
    for action in parser._actions:  # argparse keeps no public list of subparsers
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (helps.get(name, ""), sub) for name, sub in action.choices.items()}
    return {}


def render() -> str:
    """The page's Markdown text."""
    from toolgym.cli import build_parser

    lines = [
        "# Command-line reference",
        "",
        "Every command of `python run_agent.py` (the same as the `toolgym` script) and every flag,",
        "written from the parser by `python docs/cli_reference.py`; `COMMAND --help` prints the same.",
        "What the files and formats mean: [reference.md](reference.md); the models and their flags in",
        "use: [models.md](models.md).",
        "",
    ]
    for name, (summary, sub) in subcommands(build_parser()).items():
        lines += [f"## `{name}`", "", _cell(summary) + ("." if summary and not summary.endswith(".") else ""), ""]
        positionals = [a for a in sub._actions if not a.option_strings]
        if positionals:
            lines.append("Arguments: " + ", ".join(f"`{_argument(a) if a.metavar else a.dest.upper()}`"
                                                   + (f" ({_cell(_help(a))})" if a.help else "") for a in positionals) + ".")
            lines.append("")
        options = [a for a in sub._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
        if options:
            lines += ["| flag | argument | what | default |", "|---|---|---|---|"]
            for action in options:
                flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
                required = " (required)" if action.required else ""
                lines.append(f"| {flags} | {_cell(_argument(action))} | {_cell(_help(action))}{required} | {_default(action)} |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    text = render()
    if check:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python docs/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
