"""Every `keras-saat ...` command the READMEs and the docs pages show is one the parser accepts."""

import argparse
import re
import shlex
from pathlib import Path

import pytest

from keras_saat.cli import build_parser
from keras_saat.cli.flags import split_beam_args

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", ROOT / "export" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"^\s*(?:\.venv/bin/)?keras-saat\s+(.*)$")
# A placeholder in a synopsis: DIR, BASE, N, IMAGE..., OUT.png, FILE.jsonl|FILE.csv, key=value.
PLACEHOLDER = re.compile(
    r"^([A-Z][A-Z0-9_]*(\.[a-z]+)?(\|[A-Z][A-Z0-9_]*(\.[a-z]+)?)*|section\.key=value)(\.\.\.)?$"
)


def block_commands():
    """(doc, line) for each keras-saat line inside a fenced code block (a line ending in
    a backslash continues on the next)."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"```\w*\n(.*?)```", doc.read_text(), re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                match = COMMAND.match(line.split("  #")[0].split(" # ")[0])
                if match:
                    found.append((doc.name, match.group(1).strip()))
    return found


def inline_commands():
    """(doc, text) for each `keras-saat ...` code span outside the code blocks."""
    found = []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for span in re.findall(r"`((?:\.venv/bin/)?keras-saat [^`]+)`", text):
            found.append((doc.name, span.split("keras-saat ", 1)[1]))
    return found


def synopsis_words(text):
    """Arguments of a synopsis line: optional groups kept, the first of alternative flags
    (`--workdir DIR|--preset DIR`), placeholders filled with values."""
    text = re.sub(r"\|--[\w-]+( [A-Z][A-Z_]*)?", "", text)
    text = text.replace("[", " ").replace("]", " ")
    words = []
    for word in shlex.split(text):
        if word == "...":
            continue
        if PLACEHOLDER.match(word) or word.endswith("..."):
            word = "1"  # a string, an int and a path all accept it
        elif "|" in word and not word.startswith("-"):
            word = word.split("|")[0]
        words.append(word)
    return words


class Refused(Exception):
    pass


def parse(words):
    words, _ = split_beam_args(words)  # Beam's own options, after `--` (keras_saat.cli.main)
    parser = build_parser()

    def refuse(message):
        raise Refused(message)

    for action in parser._subparsers._group_actions[0].choices.values():
        action.error = refuse
    parser.error = refuse
    return parser.parse_args(words)


@pytest.mark.parametrize("doc, text", block_commands())
def test_each_command_in_a_code_block_parses(doc, text):
    parse(synopsis_words(text))


@pytest.mark.parametrize("doc, text", inline_commands())
def test_each_inline_command_names_a_real_subcommand_and_real_flags(doc, text):
    words = shlex.split(text)
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert words[0] in commands, f"{doc}: `keras-saat {text}` names no subcommand"
    known = {flag for action in commands[words[0]]._actions for flag in action.option_strings}
    flags = [w.split("=")[0] for w in words[1:] if w.startswith("--")]
    assert set(flags) <= known, f"{doc}: `keras-saat {text}`: {set(flags) - known}"
    if len(words) > 1 and not any(w in ("N", "K", "...") for w in words):
        try:  # a whole command (not a mention of one flag) must parse as it stands
            parse(synopsis_words(text))
        except Refused as err:
            if "required" in str(err):
                raise AssertionError(f"{doc}: `keras-saat {text}`: {err}") from None


def test_the_checks_see_the_commands_and_catch_a_wrong_one():
    assert len(block_commands()) >= 10 and len(inline_commands()) >= 10
    with pytest.raises(Refused, match="required"):
        parse(synopsis_words("caption --plot att.png photo.jpg"))
    assert isinstance(
        parse(synopsis_words("caption --preset DIR PATH... [--out FILE.jsonl|FILE.csv]")),
        argparse.Namespace,
    )
